"""A night that raised a test's est_time by calibration still says when the test ran past the
timeout its file gives the framework's own runner: PR CI kills it there until the patch is merged.

Two real nights on a registry repo whose timeout floor (the framework runner's timeout_per_file) is
1 s: the first measures 3 s against the file's est_time=4 (timeout max(1, 4 x 1.25) = 5 s) and
calibrates 10; the second runs with timeout 12 s and the test takes 6 s: green here, a TIMEOUT under
the framework's runner. The floor is the repo's, not ``--timeout-floor``: the framework's runner
knows nothing of that flag.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.assets import example_assets
from tests.support.env import child_env

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[2]
TEST = """\
import time
from pathlib import Path

from ci_register import register_cuda_ci

register_cuda_ci(est_time=4, suite="stage-b-2-gpu-h200", labels=["fx"])


def execute():
    time.sleep(float((Path(__file__).parent / "sleep_s.txt").read_text()))


if __name__ == "__main__":
    execute()
"""


def night(assets: Path, home: Path, sleep: int) -> subprocess.CompletedProcess:
    """One plain night (no --env: a night with extra environment is no calibration evidence); how long
    the test sleeps is in a file beside it, so the test file and its digest stay the same."""
    (assets.parent / "fw" / "tests" / "e2e" / "sleep_s.txt").write_text(str(sleep))
    env = {**child_env("NIGHTLY_", "DAGSTER_"), "NIGHTLY_HOME": str(home), "NIGHTLY_GPU_LOCK_DIR": str(home / "locks"),
           "NIGHTLY_ASSETS_DIR": str(assets)}
    return subprocess.run([sys.executable, "-m", "pipelines", "run", "--repo", "fw", "--labels", "fx"],
                          cwd=PROJECT, env=env, capture_output=True, text=True, timeout=900, check=False)


def test_a_pass_past_the_files_timeout_is_said_after_calibration_raised_the_nights_timeout(tmp_path):
    repo = tmp_path / "fw"
    (repo / "tests" / "e2e").mkdir(parents=True)
    (repo / "tests" / "e2e" / "ci_register.py").write_text(
        "def register_cuda_ci(est_time, suite, *, labels=(), nightly=False, disabled=None):\n    pass\n")
    (repo / "tests" / "e2e" / "test_slow.py").write_text(TEST)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    assets = example_assets(tmp_path / "assets")
    with open(assets / "repos.yaml", "a") as fh:
        fh.write(f"  fw:\n    path: {repo}\n    timeout: {{floor_s: 1, factor: 1.25}}\n")
    home = tmp_path / "home"

    first = night(assets, home, 3)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "near timeout" not in first.stdout
    second = night(assets, home, 6)
    assert second.returncode == 0, second.stdout + second.stderr  # the night's timeout is the calibrated 12 s
    near = [line for line in second.stdout.splitlines() if line.startswith("near timeout: ")]
    assert len(near) == 1 and re.search(r"tests/e2e/test_slow\.py: last run passed after [67](\.\d)? s of its 5 s timeout",
                                        near[0]), second.stdout  # 6 s and some, in whole seconds
    assert "its file's est_time=4 gives the framework's own runner" in near[0]
