"""``kill -9`` of the run worker of a multiprocess run leaves nothing running (reliability.md, kill -9 rows).

A run launched from the UI, by the daemon or by ``dagster asset materialize`` runs its step in a child
of the run worker (Dagster's multiprocess executor). The worker killed with SIGKILL (an OOM kill, an
operator) took nothing with it: the step ran on, reparented to PID 1, with its hanging test holding its
GPUs until its timeout, its record "running", and the next night waiting for those GPUs. The step now
notices that its worker is gone and interrupts the night as a SIGTERM does. The waits poll what the night
wrote, never fixed sleeps; the limits are hang guards far below the hanging test's 900 s timeout.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from pipelines.defs.runs import TAG_PID
from tests.conftest import PROJECT_ROOT
from tests.e2e.test_interrupts import HANG, alive, history
from tests.support.env import child_env
from tests.support.hanging import hanging_record

pytestmark = pytest.mark.slow  # a real run of the example through `dagster asset materialize`

WAIT_S = 600  # until the hanging test runs: a hang guard only
GONE_S = 60  # from the kill until the step and its test are gone: the test would otherwise run for 900 s
DAGSTER = Path(sys.executable).parent / "dagster"


def the_run(home: Path) -> dg.DagsterRun:
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        [run] = instance.get_runs()
        return run


def test_kill_9_of_the_run_worker_stops_the_step_kills_its_tests_and_records_them_interrupted(tmp_path):
    home = tmp_path / "home"
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"), "NIGHTLY_HOME": str(home),
           "DAGSTER_HOME": str(home / "dagster"), "MINIRL_HANG": "test_lora_math"}
    prepared = subprocess.run([sys.executable, "-m", "pipelines", "ui", "--print-command"], cwd=PROJECT_ROOT,
                              env=env, capture_output=True, text=True, timeout=300, check=False)
    assert prepared.returncode == 0, prepared.stderr  # the instance `make ui` opens
    catalog = subprocess.run([sys.executable, "-m", "pipelines", "catalog", "--json"], cwd=PROJECT_ROOT, env=env,
                             capture_output=True, text=True, timeout=300, check=True)
    keys = sorted(t["id"] for t in json.loads(catalog.stdout))
    config = {"ops": {"test_runs": {"config": {"labels": ["lora"], "timeout_floor_s": 900, "all_registered": True,
                                               "env_from": ["MINIRL_HANG"]}}}}
    out = tmp_path / "materialize.out"
    with out.open("w") as sink:
        worker = subprocess.Popen(
            [str(DAGSTER), "asset", "materialize", "-m", "pipelines.definitions", "--select", "test_runs",
             "--partition-range", f"{keys[0]}...{keys[-1]}", "--config-json", json.dumps(config)],
            cwd=PROJECT_ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    record: dict = {}
    try:
        record = hanging_record(home, HANG, worker, out.read_text, WAIT_S)
        run = the_run(home)
        # the run worker is the command's process; the tests run in its step child (the multiprocess executor)
        assert run.tags[TAG_PID] == str(worker.pid) and record["owner_pid"] != worker.pid, (run.tags, record)
        os.kill(worker.pid, signal.SIGKILL)  # the worker only: its step child is left to itself
        worker.wait(timeout=60)
        killed = time.monotonic()
        step, test = int(record["owner_pid"]), int(record["pid"])
        summary_path = home / "runs" / f"{run.run_id}.json"
        while time.monotonic() - killed < GONE_S and (
                alive(step) or alive(test) or json.loads(summary_path.read_text())["status"] == "running"):
            time.sleep(0.3)
        assert not alive(test), f"the hanging test outlived its run worker by {GONE_S} s"
        assert not alive(step), f"the step process outlived its run worker by {GONE_S} s"
        summary = json.loads(summary_path.read_text())
        assert summary["status"] == "interrupted" and summary["interrupted"], summary["notes"]
        assert {a["test_id"]: a["outcome"] for a in summary["attempts"]}[HANG] == "interrupted"
        assert (HANG, "interrupted", run.run_id) in history(home)
        assert not list((home / "running").glob("*.json")), "an attempt is still recorded as running"
        for lock in record["lock_paths"]:  # nothing holds the test's GPUs any more
            with open(lock) as fh:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        said = out.read_text()
        assert f"the run worker (PID {worker.pid}) that started this step is gone (killed?); interrupting the " \
               "night" in said, said[-3000:]
    finally:  # an orphaned step or test would run for 900 s: the step child is in the worker's process group
        for group in (worker.pid, record.get("pgid")):
            if group:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(group), signal.SIGKILL)
        worker.wait(timeout=60)
