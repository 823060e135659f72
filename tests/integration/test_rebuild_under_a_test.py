"""A rebuild of a cached input waits for the tests of other runs that read it (docs/storage.md).

A night's test reads a converted checkpoint while another run (a `dagster asset materialize` after a
converter change) rebuilds it: the rebuild used to remove the folder and rename the new one into place at
once, under the running test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import PROJECT_ROOT
from tests.support.assets import copied_example
from tests.support.env import child_env

pytestmark = pytest.mark.slow  # a real night in a fresh Python with Dagster

READER = """import os, pathlib, time
from minirl.ci_register import register_cuda_ci
from minirl.checkpoint import load_torch_dist
from minirl.testing import convert_checkpoint, exec_command, host_path

register_cuda_ci(est_time=5, suite="stage-b-2-gpu-h200", labels=["reader"])
SIGNALS = pathlib.Path({signals!r})


def prepare():
    exec_command("hf download minirl/tiny-lm --local-dir /root/models/tiny-lm")
    convert_checkpoint("tiny-lm", "tiny", 2, dir_dst="/root/ckpt")


def execute():
    ckpt = host_path("/root/ckpt/tiny-lm_torch_dist")
    before = os.stat(ckpt).st_ino
    (SIGNALS / "started").write_text("reading")
    deadline = time.time() + 40
    while not (SIGNALS / "go").exists() and time.time() < deadline:
        time.sleep(0.1)
    assert os.stat(ckpt).st_ino == before, "the checkpoint was replaced under the test"
    load_torch_dist(ckpt)
    print("read the same checkpoint to the end")


if __name__ == "__main__":
    prepare()
    execute()
"""


def _wait(done, limit_s: float = 120) -> bool:
    deadline = time.monotonic() + limit_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_rebuild_waits_for_another_runs_test_that_reads_the_checkpoint(tmp_path):
    from pipelines.night import Night, NightSettings

    repo, assets = copied_example(tmp_path)
    signals = tmp_path / "signals"
    signals.mkdir()
    (repo / "tests" / "e2e" / "test_reader.py").write_text(READER.format(signals=str(signals)))
    home = tmp_path / "home"
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"), "NIGHTLY_HOME": str(home), "NIGHTLY_ASSETS_DIR": str(assets)}
    night = subprocess.Popen([sys.executable, "-m", "pipelines", "run", "--labels", "reader"], cwd=PROJECT_ROOT,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rebuilt: list = []
    try:
        assert _wait(lambda: (signals / "started").exists() or night.poll() is not None), "the test never started"
        assert night.poll() is None, night.stdout.read()
        # another run, after a converter change: the conversion's identity changed, so it is built again
        converter = repo / "tools" / "convert_hf_to_torch_dist.py"
        converter.write_text(converter.read_text() + "# v2\n")
        other = Night(NightSettings(home=home, assets_dir=assets))
        [conv] = [r for r in other.catalog.requirements if r.kind == "conversion" and r.path == "/root/ckpt/tiny-lm_torch_dist"]
        builder = threading.Thread(target=lambda: rebuilt.append(other.build(conv)), daemon=True)
        builder.start()
        dest = other.cache.host_path(conv.path)
        built_anew = lambda: any((p / ".nightly-complete.json").exists()  # noqa: E731
                                 for p in dest.parent.glob(f".{dest.name}.partial-*"))
        assert _wait(lambda: built_anew() or not builder.is_alive())
        time.sleep(0.5)
        assert builder.is_alive() and not rebuilt, "the rebuild replaced the checkpoint under the running test"
        (signals / "go").write_text("")
        out, _ = night.communicate(timeout=300)
        assert night.returncode == 0, out[-3000:]
        builder.join(120)
        [built] = rebuilt
        assert not built.reused and "files tools/convert_hf_to_torch_dist.py" in built.rebuilt
        assert json.loads((dest / ".nightly-complete.json").read_text())["identity"] == built.identity
    finally:
        (signals / "go").write_text("")
        if night.poll() is None:
            night.kill()
            night.wait()
