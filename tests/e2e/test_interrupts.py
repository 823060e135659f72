"""A night stopped by a signal loses nothing and leaves nothing running (issue 10, night-level rows).

- SIGTERM (or Ctrl-C) to ``nightly run``: nothing new starts, running tests are killed with
  their whole process tree, each attempt is recorded as ``interrupted``, the Dagster run ends
  CANCELED and the command exits 130.
- ``kill -9`` of ``nightly run``: the test processes keep their GPU locks until they die; the
  next night kills those orphans and records them as interrupted, and marks the dead night's
  Dagster run (left STARTED) as failed.
The waits poll what the night wrote (its running records), never fixed sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from pipelines.core.history import FileHistoryStore
from tests.conftest import PROJECT_ROOT
from tests.support.env import child_env
from tests.support.hanging import hanging_record

pytestmark = pytest.mark.slow

HANG = "tests/e2e/lora/test_lora_math.py"
#: with HANG, the tests of ``--labels lora`` that start at once (8 GPUs: 4 + 2 + 2); PENDING waits for 2 of them
HUNG_WITH = ("tests/e2e/test_backend_matrix.py", "tests/e2e/lora/test_lora_moe_5layer.py")
PENDING = "tests/e2e/lora/test_lora_moe_6layer.py"
WAIT_S = 600  # hang guard only


def start_night(home: Path, *extra: str, hang: tuple[str, ...] = (HANG,)) -> subprocess.Popen:
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"),
           "NIGHTLY_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-m", "pipelines", "run", "--home", str(home), "--labels", "lora",
                             "--env", f"MINIRL_HANG={','.join(Path(t).stem for t in hang)}", "--timeout-floor", "900", *extra],
                            cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def wait_running(home: Path, test_id: str, proc: subprocess.Popen, other_than: str | None = None) -> dict:
    """Until the hanging test runs and has said so in its log; returns its running record."""
    return hanging_record(home, test_id, proc, lambda: proc.stdout.read() if proc.poll() is not None else "",
                          WAIT_S, other_than)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def history(home: Path) -> list[tuple]:
    return [(s.test_id, s.outcome, s.run_id) for s in FileHistoryStore(home / "history.sqlite").read()]


def runs(home: Path) -> dict[str, dg.DagsterRunStatus]:
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        return {r.run_id: r.status for r in instance.get_runs()}


def test_sigterm_kills_running_tests_records_them_interrupted_and_cancels_the_run(tmp_path):
    home = tmp_path / "home"
    proc = start_night(home)
    record = wait_running(home, HANG, proc)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 130, out[-3000:]
    assert "interrupted" in out
    assert not alive(int(record["pid"])), "the hanging test outlived its night"
    assert (HANG, "interrupted") in {(t, o) for t, o, _ in history(home)}
    statuses = runs(home)
    assert dg.DagsterRunStatus.CANCELED in statuses.values(), statuses
    summary = json.loads((home / "nights" / "latest.json").read_text())
    assert summary["interrupted"] and any(a["outcome"] == "interrupted" for a in summary["attempts"])


def test_one_sigterm_to_the_night_and_its_test_records_the_test_interrupted_not_failed(tmp_path):
    """systemctl stop (KillMode=control-group), a container's kill, kill -TERM -1: one SIGTERM reaches the
    night and its tests at once. The test it killed is interrupted like the others, never a failure (in the
    record, its verdict, history and so the flaky rules), and no test starts on the GPUs it freed. The test is
    signalled just before the night: it then always dies before the night acts on its own signal.

    Every test but the last of the plan hangs, so the last (2 GPUs, after a 2-GPU test) can only start on
    GPUs a signal freed: any start of it is one after the signal. (With the others left to end by themselves,
    one ending just before the signal starts it legitimately, and whether its log existed when looked at
    was a matter of scheduling.)"""
    home = tmp_path / "home"
    proc = start_night(home, hang=(HANG, *HUNG_WITH))
    record = wait_running(home, HANG, proc)
    for other in HUNG_WITH:  # all hang: none ends by itself, so nothing is due to start before the signal
        wait_running(home, other, proc)
    os.kill(int(record["pid"]), signal.SIGTERM)
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 130, out[-3000:]
    assert f"{HANG}  INTERRUPTED" in out and f"{HANG}  FAILED" not in out, out[-3000:]
    summary = json.loads((home / "nights" / "latest.json").read_text())
    outcomes = {(a["test_id"], a["outcome"]) for a in summary["attempts"]}
    assert (HANG, "interrupted") in outcomes and not any(o == "failed" for _, o in outcomes), outcomes
    assert HANG in summary["verdict"]["interrupted"] and summary["verdict"]["failed"] == [], summary["verdict"]
    assert {(t, o) for t, o, _ in history(home) if t == HANG} == {(HANG, "interrupted")}, history(home)
    assert "# nightly: interrupted" in Path(record["log_path"]).read_text()
    late = [a["test_id"] for a in summary["attempts"] if a["test_id"] not in {HANG, *HUNG_WITH}
            and Path(a["log_path"]).exists()]
    assert late == [], f"started after the night was signalled: {late}"
    assert PENDING not in {a["test_id"] for a in summary["attempts"]} or \
        all(a["elapsed_s"] == 0 for a in summary["attempts"] if a["test_id"] == PENDING), summary["attempts"]


def test_after_kill_9_the_next_night_reaps_the_orphan_and_fails_the_dead_run(tmp_path):
    home = tmp_path / "home"
    proc = start_night(home)
    record = wait_running(home, HANG, proc)
    os.kill(proc.pid, signal.SIGKILL)  # the night only: its test keeps running, holding its GPU locks
    proc.communicate(timeout=WAIT_S)
    assert alive(int(record["pid"])), "the orphan should still be running until the next night"
    second = start_night(home, "--accept-problems")
    second.stdin = None
    deadline = time.monotonic() + WAIT_S
    while alive(int(record["pid"])) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not alive(int(record["pid"])), "the next night did not kill the orphan"
    # the second night has reaped and moved on once its own attempt of the test hangs; a signal
    # before that would interrupt the reaping itself (recorded by the night after, but not said here)
    wait_running(home, HANG, second, other_than=record.get("run_id"))
    second.send_signal(signal.SIGTERM)  # the second night hangs too: stop it the clean way
    out, _ = second.communicate(timeout=WAIT_S)
    assert "left running" in out, out[-3000:]
    first_run = record.get("run_id")
    samples = history(home)
    assert (HANG, "interrupted", first_run) in samples, samples
    statuses = runs(home)
    assert statuses[first_run] == dg.DagsterRunStatus.FAILURE, statuses


def test_a_not_started_run_of_a_dead_process_is_failed_by_the_next_run():
    """A run created in-process whose process died before Dagster started it (the calibration run of a
    `nightly run` killed at that moment) would stay NOT_STARTED for ever."""
    import socket

    from pipelines.defs.runs import TAG_HOST, TAG_PID, fail_stale_runs

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with dg.DagsterInstance.ephemeral() as instance:
        run = instance.add_run(dg.DagsterRun(job_name="calibration", run_id="a" * 8 + "-dead",
                                             status=dg.DagsterRunStatus.NOT_STARTED,
                                             tags={TAG_HOST: socket.gethostname(), TAG_PID: str(dead.pid)}))
        notes = fail_stale_runs(instance, "current")
        assert notes == [f"run {run.run_id} was left NOT_STARTED by dead process {dead.pid}; marked failed"]
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
