"""A whole night on a framework of the SGLang family that nobody configured (examples/sglangish).

No ``assets/`` entry: the dialect comes from the example's own registry module. The night must
select exactly the ``nightly=True`` registrations (the family's meaning of nightly), run them,
report the disabled one as skipped, and exit 0. Expected rows come from the example's files
(tests/examples/test_sglangish.py records them by importing each file), not from the catalog.
Assertions are on outcomes, the exit code and the table's rows, not on wording.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.examples.test_sglangish import SGLANGISH, collected, recorded
from tests.support.env import child_env

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[2]


def nightly(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = child_env("NIGHTLY_", "DAGSTER_")
    return subprocess.run([sys.executable, "-m", "pipelines", *args], cwd=PROJECT, env={**env, "NIGHTLY_HOME": str(home)},
                          capture_output=True, text=True, timeout=900, check=False)  # hang guard: minutes loaded


def expected_rows() -> dict[str, str]:
    """test id -> outcome the night must report: nightly registrations pass, disabled ones are skipped."""
    sys.path.insert(0, str(SGLANGISH))
    try:
        regs = {rel: recorded(rel) for rel in collected()}
    finally:
        sys.path.remove(str(SGLANGISH))
    out = {}
    for rel, calls in regs.items():
        for c in calls:
            if c["nightly"]:
                test_id = rel if len(calls) == 1 else f"{rel}::{c['backend']}-{c['suite']}"
                out[test_id] = "skipped" if c["disabled"] else "passed"
    return out


def test_the_example_is_not_configured():
    repos = yaml.safe_load((PROJECT / "assets" / "repos.yaml").read_text())["repos"]
    assert not any("sglangish" in str(r.get("path", "")) for r in repos.values())


def test_a_night_on_the_unconfigured_sglang_family_example_runs_exactly_its_nightly_registrations(tmp_path):
    expected = expected_rows()
    assert "passed" in expected.values() and "skipped" in expected.values()
    done = nightly("run", "--repo", "examples/sglangish", "--home", str(tmp_path / "home"), home=tmp_path / "home")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {}
    for line in done.stdout.splitlines():
        cells = line.split()
        if len(cells) >= 2 and cells[0].startswith("test/registered/") and cells[1] in ("passed", "failed", "skipped",
                                                                                      "timed_out", "infra_error"):
            rows[cells[0]] = cells[1]
    assert rows == expected


def test_the_catalog_of_the_example_says_which_dialect_and_roots_it_assumed(tmp_path):
    done = nightly("catalog", "--repo", "examples/sglangish", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "dialect sglang (sglangish/test/ci/ci_register.py" in done.stderr
    assert "roots: test/registered" in done.stderr
