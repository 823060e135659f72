"""The night's verdict as `nightly run` records it and `nightly report` states it, on real nights stopped
early: a selected test that never started is no pass, and a record's verdict never outvotes its own attempts.

The signal lands where a user's Ctrl-C may land (between two tests, while inputs build): a wrapper of
the CLI entry point sends it to its own process at that moment and waits until the night has seen it,
never for a fixed time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.cli import main
from tests.conftest import PROJECT_ROOT
from tests.support.assets import QUICK_TEST, example_assets, registry_repo
from tests.support.env import child_env

pytestmark = pytest.mark.slow  # real (tiny) nights

WAIT_S = 600  # hang guard only

#: a test of :func:`registry_repo` that needs all 8 GPUs of the example's node, so two of them run one after the other
WHOLE_NODE = QUICK_TEST.replace("stage-b-2-gpu-h200", "stage-c-8-gpu-h200")

#: ``nightly ARGS...`` with SIGINT sent to itself when the first test's GPUs are given back, before the dispatcher
#: starts the next test (argv: home, then nightly's own arguments); it waits until the night has seen the signal
BETWEEN_TESTS = """
import os, signal, sys, time
import pipelines.night as night_module
from pipelines.core.plan import DispatchQueue
run_plan, finish, stops, sent = night_module.run_plan, DispatchQueue.finish, [], []
def capturing_run_plan(*a, **k):
    stops.append(k["stop"])
    return run_plan(*a, **k)
def finish_then_signal(self, test_id):
    finish(self, test_id)
    if stops and not sent:  # the night's dispatch, not the planner's simulated nights
        sent.append(test_id)
        print(f"INJECT: SIGINT after {test_id} ended, before the next test starts", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 120
        while not stops[-1].is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
night_module.run_plan = capturing_run_plan
DispatchQueue.finish = finish_then_signal
from pipelines.cli import entrypoint
sys.argv = ["nightly", *sys.argv[2:]]
entrypoint()
"""


def _injected(script: str, home: Path, assets: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"), "NIGHTLY_HOME": str(home), "NIGHTLY_ASSETS_DIR": str(assets)}
    done = subprocess.run([sys.executable, "-c", script, str(home), *args], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=WAIT_S)
    assert "INJECT: SIGINT" in done.stderr, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _record(home: Path) -> dict:
    [record] = [json.loads(p.read_text()) for p in (home / "runs").glob("*.json")]
    return record


def test_a_night_stopped_between_two_tests_is_not_ok_and_says_which_never_started(tmp_path, capsys, monkeypatch):
    """The first test passed, the signal came before the second started: the record's verdict said ok and
    `nightly report` printed `report: OK: 1 never started`."""
    _, assets = registry_repo(tmp_path, {"test_a.py": WHOLE_NODE.format(est=2), "test_b.py": WHOLE_NODE.format(est=2)})
    home = tmp_path / "home"
    done = _injected(BETWEEN_TESTS, home, assets, "run", "--home", str(home), "--repo", "fw")
    assert done.returncode == 130, done.stderr[-3000:]
    record = _record(home)
    [ran] = [a["test_id"] for a in record["attempts"]]
    [never] = [t for t in record["selected"] if t != ran]
    assert [a["outcome"] for a in record["attempts"]] == ["passed"], record["attempts"]
    assert record["verdict"]["ok"] is False
    assert record["verdict"]["never_started"] == [never]

    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    assert main(["report", "--home", str(home), "--repo", "fw"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "report: FAILED: 1 never started"


#: ``nightly ARGS...`` with SIGINT sent to itself once the night's first input is built (argv: home, then nightly's
#: own arguments): the night is preparing its inputs and no test has started
WHILE_BUILDING = """
import os, signal, sys, time
from pipelines.night import Night
build, sent = Night.build, []
def build_then_signal(self, req):
    built = build(self, req)
    if not sent:
        sent.append(req.key)
        print(f"INJECT: SIGINT after {req.kind} {req.key} was built", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            time.sleep(0.01)  # the signal is handled here
    return built
Night.build = build_then_signal
from pipelines.cli import entrypoint
sys.argv = ["nightly", *sys.argv[2:]]
entrypoint()
"""


def test_tests_a_signal_stopped_before_they_started_are_never_started_not_interrupted(tmp_path, capsys,
                                                                                        monkeypatch):
    """Ctrl-C while the night built its inputs: the record said `interrupted` of the 2 tests (`FAILED: 2
    interrupted`) with no attempt at all; an interrupted test is one a signal cut short."""
    home = tmp_path / "home"
    assets = example_assets(tmp_path / "assets")
    done = _injected(WHILE_BUILDING, home, assets, "run", "--home", str(home), "--labels", "short")
    assert done.returncode == 130, done.stderr[-3000:]
    record = _record(home)
    assert record["attempts"] == [] and len(record["selected"]) == 2, record
    verdict = record["verdict"]
    assert (verdict["ok"], verdict["interrupted"], sorted(verdict["never_started"])) == (
        False, [], sorted(record["selected"])), verdict
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    assert main(["report", "--home", str(home)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "report: FAILED: 2 never started"
