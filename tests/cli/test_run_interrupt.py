"""Ctrl-C during ``nightly run``: two lines that say what happened and what to do, and nothing left running.

The signal goes to the whole process group, as a terminal's Ctrl-C does. The test waits for what
the night wrote (the hanging test's running record and log line), never for a fixed time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from pipelines.core.history import FileHistoryStore
from pipelines.instance import open_instance
from tests.conftest import PROJECT_ROOT
from tests.support.env import child_env
from tests.support.hanging import hanging_record

pytestmark = pytest.mark.slow  # a real night in a fresh Python with Dagster

HANG = "tests/e2e/lora/test_lora_math.py"
WAIT_S = 600  # hang guard only


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_ctrl_c_says_in_two_lines_what_was_kept_and_how_to_resume(tmp_path):
    home = tmp_path / "home"
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"),
           "NIGHTLY_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-m", "pipelines", "run", "--home", str(home), "--labels", "lora",
                             "--env", "MINIRL_HANG=test_lora_math", "--timeout-floor", "900"],
                            cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        record = hanging_record(home, HANG, proc, lambda: proc.stderr.read() if proc.poll() is not None else "",
                                WAIT_S)  # a pipe of a running night would never end
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group, Dagster's helpers included
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-3000:]
    for noise in ("Traceback", "Stack Trace", "DagsterExecutionInterruptedError", "KeyboardInterrupt"):
        assert noise not in out + err, err[-3000:]
    said = err.strip().splitlines()
    assert len(said) == 2, err
    assert said[0].startswith("nightly: interrupted: running tests were killed and recorded as `interrupted` ("), said
    assert HANG in said[0].split("); ")[0], said  # the count and the tests the signal killed, as the record has them
    assert f"); finished tests are kept in history and the night's record {home / 'runs'}" in said[0], said
    assert said[1].startswith("nightly: to resume, run the same `nightly run` again")
    # calibrated and reported like a night cancelled in the UI (the sensor calibrates that one)
    report = Path(said[0].split("; its report: ")[1])
    assert report.is_file() and report.parent == home / "reports", said[0]
    assert not _alive(int(record["pid"])), "the hanging test outlived its night"
    assert (HANG, "interrupted") in {(s.test_id, s.outcome) for s in FileHistoryStore(home / "history.sqlite").read()}
    _ui_shows(home, HANG, "interrupted")


def _ui_shows(home: Path, test_id: str, outcome: str) -> None:
    """The UI shows the attempt: its partition is materialized with the outcome, and its check (tied to
    that materialization) passes for a pass and warns for an interruption."""
    with open_instance(home) as instance:
        [mat] = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("test_runs"), asset_partitions=[test_id]), limit=1).records
        assert mat.asset_materialization.metadata["outcome"].value == outcome
        [check] = [e for e in instance.all_logs(mat.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
                   if e.dagster_event.event_specific_data.partition == test_id]
        evaluation = check.dagster_event.event_specific_data
        assert evaluation.passed == (outcome == "passed"), evaluation
        assert evaluation.target_materialization_data.storage_id == mat.storage_id
        if outcome == "interrupted":
            assert evaluation.severity == dg.AssetCheckSeverity.WARN


# `nightly run` with a signal sent while Dagster itself stores an event (the signal lands in Dagster's
# frame, not the asset's): argv = signal, home, when, nightly's own arguments; when "test": the
# materialization of the first test that finished while the hanging one runs; "ended": the night's
# step success (every test done); "calibration": the calibration run's first event (before it starts);
# "calibrating": a step of the calibration run starting
INJECT = """
import os, signal, sys, time
from pathlib import Path
import dagster._core.instance as inst
store, sig, home, when = inst.DagsterInstance.handle_new_event, int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
hang, sent = "tests/e2e/lora/test_lora_math.py", []
def hanging():
    return any("hanging on purpose" in p.read_text(errors="replace") for p in (home / "logs").rglob("*lora_math*"))
def now(de):
    if when == "calibration":
        return de.job_name == "calibration"
    if when == "calibrating":
        return de.job_name == "calibration" and de.event_type_value == "STEP_START"
    if when == "ended":
        return de.event_type_value == "STEP_SUCCESS" and de.job_name != "calibration"
    return (de.event_type_value == "ASSET_MATERIALIZATION" and "test_runs" in str(de.asset_key)
            and de.partition not in (None, hang) and hanging())
def handle_new_event(self, event, *a, **k):
    done = store(self, event, *a, **k)
    de = getattr(event, "dagster_event", None)
    if not sent and de is not None and now(de):
        sent.append(de.event_type_value)
        print(f"INJECT: signal {sig} while Dagster stores {de.event_type_value} of {de.job_name}", file=sys.stderr,
              flush=True)
        os.kill(os.getpid(), sig)
        for _ in range(500):
            time.sleep(0.002)  # the signal is handled here, in Dagster's frame
    return done
inst.DagsterInstance.handle_new_event = handle_new_event
from pipelines.cli import entrypoint
sys.argv = ["nightly", *sys.argv[4:]]
entrypoint()
"""


def _injected_night(home: Path, sig: int, when: str, *args: str) -> subprocess.CompletedProcess:
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"),
           "NIGHTLY_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", INJECT, str(int(sig)), str(home), when, "run", "--home", str(home),
                           "--labels", "lora", *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                          timeout=WAIT_S)
    assert "INJECT: signal" in done.stderr, done.stderr[-3000:]
    return done


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_dagster_stores_an_event_still_interrupts_the_night(tmp_path, sig):
    home = tmp_path / "home"
    done = _injected_night(home, sig, "test", "--env", "MINIRL_HANG=test_lora_math", "--timeout-floor", "900")
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-3000:]
    assert "nightly: interrupted: running tests were killed" in done.stderr
    summary = json.loads((home / "nights" / "latest.json").read_text())
    # the whole record, written as the run ended (not the partial one of a run still going)
    assert summary["status"] == "interrupted" and summary["interrupted"], summary.get("notes")
    outcomes = {a["test_id"]: a["outcome"] for a in summary["attempts"]}
    assert outcomes[HANG] == "interrupted" and "passed" in outcomes.values(), outcomes
    # the UI shows every attempt as the record does: the killed one, and the one Dagster was storing
    # when the signal came (its check was still to be reported)
    for test_id, outcome in outcomes.items():
        _ui_shows(home, test_id, outcome)
    with open_instance(home) as instance:
        night = instance.get_run_by_id(summary["run_id"])
        assert night.status == dg.DagsterRunStatus.CANCELED, night.status
        # Dagster itself ended it CANCELED (the cancel was asked for at once), never FAILURE first
        ended = {e.dagster_event.event_type for e in instance.all_logs(night.run_id) if e.dagster_event}
        assert dg.DagsterEventType.RUN_FAILURE not in ended, ended


def test_sigterm_as_the_calibration_starts_cancels_that_run_and_exits_130(tmp_path):
    home = tmp_path / "home"
    done = _injected_night(home, signal.SIGTERM, "calibration")
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-3000:]
    with open_instance(home) as instance:
        [calibration] = [r for r in instance.get_runs() if r.job_name == "calibration"]
        assert calibration.status == dg.DagsterRunStatus.CANCELED, calibration.status  # not NOT_STARTED for ever


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_finished_night_calibrates_says_the_night_is_recorded_without_stack_traces(tmp_path, sig):
    """The night ended and was recorded; a signal in its calibration printed two Dagster ERROR events with
    their stack traces and a bare `interrupted`: it says where the night is and who calibrates it now."""
    home = tmp_path / "home"
    done = _injected_night(home, sig, "calibrating")
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Stack Trace" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("nightly")]
    assert said[0].startswith("nightly: interrupted while calibrating: the night finished and is recorded in "), said
    assert "calibrate_missed_runs" in said[1], said
    with open_instance(home) as instance:
        [calibration] = [r for r in instance.get_runs() if r.job_name == "calibration"]
        assert calibration.status == dg.DagsterRunStatus.CANCELED, calibration.status


def test_sigterm_after_every_test_ended_is_not_swallowed(tmp_path):
    home = tmp_path / "home"
    done = _injected_night(home, signal.SIGTERM, "ended")
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-3000:]
    summary = json.loads((home / "nights" / "latest.json").read_text())
    # it says what happened: every test had finished (it once said "running tests were killed" of passed tests)
    assert summary["status"] == "finished" and all(a["outcome"] == "passed" for a in summary["attempts"]), summary
    assert (f"nightly: interrupted: the signal arrived after the night had ended: its {len(summary['attempts'])} "
            "test(s) had all finished and none was interrupted; ") in done.stderr, done.stderr[-3000:]
    assert "running tests were killed" not in done.stderr, done.stderr[-3000:]
    with open_instance(home) as instance:
        assert instance.get_run_by_id(summary["run_id"]).status == dg.DagsterRunStatus.CANCELED


# a script's lines that send SIGINT to its own process once the hanging test has said it hangs (home: its NIGHTLY_HOME)
CTRL_C_WHEN_HUNG = """def watch():
    while True:
        for p in (home / "logs").rglob("*lora_math*") if (home / "logs").is_dir() else ():
            if "hanging on purpose" in p.read_text(errors="replace"):
                os.kill(os.getpid(), signal.SIGINT)
                return
        time.sleep(0.3)
threading.Thread(target=watch, daemon=True).start()
"""

REFUSED = r"""
import os, signal, sys, threading, time
from pathlib import Path
home = Path(sys.argv[1])
from pipelines.storage import state
from pipelines.storage.state import StateError
put = state.LocalStateStore.put
def refusing(self, key, text, *a, **k):
    if key.startswith(("runs/", "nights/")) and "unsaved" not in str(self.root):
        raise StateError(f"{key}: refused (credentials expired)")
    return put(self, key, text, *a, **k)
state.LocalStateStore.put = refusing
{CTRL_C_WHEN_HUNG}from pipelines.cli import entrypoint
sys.argv = ["nightly", "run", "--home", str(home), "--labels", "lora", "--env", f"MINIRL_HANG={sys.argv[2]}",
            "--timeout-floor", "900"]
entrypoint()
""".replace("{CTRL_C_WHEN_HUNG}", CTRL_C_WHEN_HUNG)


def test_ctrl_c_on_a_night_whose_store_refuses_writes_is_an_interrupt_that_says_where_the_results_are(tmp_path):
    """Both at once: the interruption decides the exit (130, CANCELED), and the kept folder is named."""
    home = tmp_path / "home"
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"), "NIGHTLY_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", REFUSED, str(home), "test_lora_math"], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-3000:]
    assert "nightly: interrupted: running tests were killed" in done.stderr
    folders = list((home / "unsaved").iterdir())
    assert len(folders) == 1 and str(folders[0]) in done.stderr
    assert "nightly run: error:" not in done.stderr  # the kept folder's README is said once, not again as an error


# `nightly run` with a signal sent at a point before any test starts: argv = signal, where, nightly's own
# arguments; where "import": while the command imports its modules (before it parses its arguments);
# "plan": while it plans the night; "create_run": as Dagster has just stored the night's run, NOT_STARTED,
# before its own handler is in place (the window where SIGTERM used to kill the command silently)
EARLY = """
import importlib.abc, os, signal, sys, time
sig, where = int(sys.argv[1]), sys.argv[2]
def send(what):
    print(f"INJECT: signal {sig} {what}", file=sys.stderr, flush=True)
    os.kill(os.getpid(), sig)
    for _ in range(500):
        time.sleep(0.002)  # the signal is handled here
class Importing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pipelines.core.select":
            sys.meta_path.remove(self)
            send("while importing " + name)
        return None
if where == "import":
    sys.meta_path.insert(0, Importing())
if where == "plan":
    from pipelines import night
    plan = night.Night.plan
    def planning(self, *a, **k):
        send("while planning")
        return plan(self, *a, **k)
    night.Night.plan = planning
if where == "converted":  # a library turns the signal's KeyboardInterrupt into its own error (pydantic's SchemaError)
    import dagster._core.instance as inst
    create = inst.DagsterInstance.create_run_for_job
    def converting(self, *a, **k):
        run = create(self, *a, **k)
        try:
            send(f"as Dagster stored run {run.run_id}, inside a library that converts it")
        except KeyboardInterrupt as exc:
            raise ValueError(f"schema build failed: {exc!r}") from None
        return run
    inst.DagsterInstance.create_run_for_job = converting
if where == "create_run":
    import dagster._core.instance as inst
    create = inst.DagsterInstance.create_run_for_job
    def created(self, *a, **k):
        run = create(self, *a, **k)
        send(f"as Dagster stored run {run.run_id} ({run.status.value})")
        return run
    inst.DagsterInstance.create_run_for_job = created
from pipelines.cli import entrypoint
sys.argv = ["nightly", *sys.argv[3:]]
entrypoint()
"""


def _early_signal(home: Path, sig: int, where: str) -> subprocess.CompletedProcess:
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"), "NIGHTLY_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", EARLY, str(int(sig)), where, "run", "--home", str(home),
                           "--labels", "lora"], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                          timeout=WAIT_S)
    assert "INJECT: signal" in done.stderr, done.stderr[-3000:]
    return done


def _said(done: subprocess.CompletedProcess) -> list[str]:
    """What the command said on stderr, without the injection's own line."""
    return [line for line in done.stderr.splitlines() if not line.startswith("INJECT: ")]


def _runs(home: Path) -> list:
    if not (home / "dagster").is_dir():
        return []
    with open_instance(home) as instance:
        return list(instance.get_runs())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_before_dagster_starts_the_run_ends_it_canceled_not_not_started(tmp_path, sig):
    home = tmp_path / "home"
    done = _early_signal(home, sig, "create_run")
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-3000:]
    [run] = _runs(home)  # the night's, and no calibration run
    assert run.status == dg.DagsterRunStatus.CANCELED, run.status
    assert _said(done) == [f"nightly: interrupted before the night's first test started: nothing of it was recorded "
                           f"(Dagster run {run.run_id} CANCELED); to resume, run the same `nightly run` again"]
    assert not (home / "runs").exists() and not (home / "nights").exists()  # no record, not even a partial one


def test_a_sigterm_a_library_turns_into_its_own_error_is_an_interruption_not_a_traceback(tmp_path):
    """A single SIGTERM once surfaced as `pydantic_core.SchemaError: ... KeyboardInterrupt` with its traceback, exit 1."""
    home = tmp_path / "home"
    done = _early_signal(home, signal.SIGTERM, "converted")
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "ValueError" not in done.stderr, done.stderr[-3000:]
    [run] = _runs(home)
    assert run.status == dg.DagsterRunStatus.CANCELED, run.status
    assert _said(done) == [f"nightly: interrupted before the night's first test started: nothing of it was recorded "
                           f"(Dagster run {run.run_id} CANCELED); to resume, run the same `nightly run` again"]


@pytest.mark.parametrize("where", ["import", "plan"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_before_the_night_runs_exits_130_with_one_line_and_makes_no_run(tmp_path, sig, where):
    home = tmp_path / "home"
    done = _early_signal(home, sig, where)
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-3000:]  # SIGTERM was 143, with no word
    assert _said(done) == ["nightly run: interrupted"], done.stderr[-3000:]
    assert _runs(home) == []


def test_sigterm_as_the_night_starts_running_exits_130_and_leaves_no_run_not_started(tmp_path):
    """As an operator or a CI timeout sends it: from outside, right after `nightly: running`, wherever it lands."""
    home = tmp_path / "home"
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"), "NIGHTLY_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-m", "pipelines", "run", "--home", str(home), "--labels", "lora"],
                            cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("nightly: running"):
                break
        else:
            pytest.fail(f"the night never started running:\n{proc.stderr.read()[-3000:]}")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    said = err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("nightly") and "interrupted" in said[0], err[-3000:]
    assert all(r.status == dg.DagsterRunStatus.CANCELED for r in _runs(home)), [r.status for r in _runs(home)]


# `nightly run` with a signal whose interruption a finalizer swallows, as SQLAlchemy's gc callback `_collection_gced`
# did ("Exception ignored in ... KeyboardInterrupt"): argv = signal, home, when, nightly's own arguments; when
# "setup": as Dagster has just stored the night's run (our handler's KeyboardInterrupt is lost); "test": as the
# night stores the log of a test that finished while the hanging one hangs (Dagster's own interruption is lost)
LOST = """
import os, signal, sys, time
from pathlib import Path
sig, home, when = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
hang, sent = "tests/e2e/lora/test_lora_math.py", []
class Lost:
    def __del__(self):
        print(f"INJECT: signal {sig} in a finalizer {when}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), sig)
        for _ in range(100):
            time.sleep(0.005)  # the handler runs here: Python discards what it raises
def hanging():
    return any("hanging on purpose" in p.read_text(errors="replace") for p in (home / "logs").rglob("*lora_math*"))
import dagster._core.instance as inst
import pipelines.execute as ex
create, finished = inst.DagsterInstance.create_run_for_job, ex._Progress.finished
def created(self, *a, **k):
    run = create(self, *a, **k)
    if when == "setup" and not sent:
        sent.append(run.run_id)
        Lost()
    return run
def _finished(self, attempt):
    if when == "test" and not sent and attempt.test_id != hang and hanging():
        sent.append(attempt.test_id)
        Lost()
    return finished(self, attempt)
inst.DagsterInstance.create_run_for_job, ex._Progress.finished = created, _finished
from pipelines.cli import entrypoint
sys.argv = ["nightly", *sys.argv[4:]]
entrypoint()
"""


def _lost_signal(home: Path, when: str, *args: str) -> subprocess.CompletedProcess:
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"), "NIGHTLY_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", LOST, str(int(signal.SIGTERM)), str(home), when, "run", "--home",
                           str(home), "--labels", "lora", *args], cwd=PROJECT_ROOT, env=env, capture_output=True,
                          text=True, timeout=WAIT_S)
    assert "INJECT: signal" in done.stderr, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def test_a_sigterm_a_finalizer_swallows_as_the_night_starts_still_stops_it_before_any_test(tmp_path):
    """The reviewer's SIGTERM just after `nightly: running`: lost in SQLAlchemy's gc callback, every test ran to its
    end (PASSED, `nightly: done`), and the command then said running tests were killed, and cancelled the run."""
    home = tmp_path / "home"
    done = _lost_signal(home, "setup")
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-3000:]
    assert "PASSED" not in done.stdout and "nightly: done" not in done.stdout, done.stdout[-3000:]
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    [run] = _runs(home)
    assert run.status == dg.DagsterRunStatus.CANCELED, run.status
    assert _said(done) == [f"nightly: interrupted before the night's first test started: nothing of it was recorded "
                           f"(Dagster run {run.run_id} CANCELED); to resume, run the same `nightly run` again"]


def test_a_sigterm_a_finalizer_swallows_while_a_test_runs_kills_it_and_says_which(tmp_path):
    """Dagster's own interruption, lost the same way while the night stored a finished test's log: the hanging test
    ran on to its timeout. The night stops at its next wait for a finished test and names the test it killed."""
    home = tmp_path / "home"
    done = _lost_signal(home, "test", "--env", "MINIRL_HANG=test_lora_math", "--timeout-floor", "120")
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-3000:]
    summary = json.loads((home / "nights" / "latest.json").read_text())
    assert summary["status"] == "interrupted", summary.get("notes")
    outcomes = {a["test_id"]: a["outcome"] for a in summary["attempts"]}
    assert outcomes[HANG] == "interrupted" and "passed" in outcomes.values(), outcomes
    [hung] = [a for a in summary["attempts"] if a["test_id"] == HANG]
    assert hung["elapsed_s"] < 60, hung  # killed as the signal came, not at its timeout
    killed = sorted(t for t, o in outcomes.items() if o == "interrupted")  # the hanging one, and any started beside it
    said = [line for line in _said(done) if line.startswith("nightly")]
    assert said[0].startswith(f"nightly: interrupted: running tests were killed and recorded as `interrupted` "
                              f"({len(killed)}: {', '.join(killed[:3])}"), said
    with open_instance(home) as instance:
        assert instance.get_run_by_id(summary["run_id"]).status == dg.DagsterRunStatus.CANCELED


# `nightly run` given Ctrl-C again while it stops the night: argv = home, where; the first SIGINT comes
# once the hanging test hangs, the second at `where`: "join" as the launcher has killed the running tests
# (the night waits for them to end), "drain" as Dagster stores the first killed test's materialization,
# "record" as the night writes its whole record
AGAIN = r"""
import os, signal, sys, threading, time
from pathlib import Path
home, where = Path(sys.argv[1]), sys.argv[2]
first = []
def again(what):
    print(f"INJECT: second SIGINT {what}", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(250):
        time.sleep(0.002)  # handled here, in the middle of what is being done
from pipelines.launch import local
interrupt = local.LocalLauncher.interrupt
def interrupting(self, *a, **k):
    first.append(1)
    done = interrupt(self, *a, **k)
    if where == "join":
        again("while the night waits for its killed tests")
    return done
local.LocalLauncher.interrupt = interrupting
import dagster._core.instance as inst
store = inst.DagsterInstance.handle_new_event
def handle_new_event(self, event, *a, **k):
    done = store(self, event, *a, **k)
    de = getattr(event, "dagster_event", None)
    if where == "drain" and first and len(first) == 1 and de is not None and \
            de.event_type_value == "ASSET_MATERIALIZATION" and "test_runs" in str(de.asset_key):
        first.append(2)
        again("while Dagster stores a killed test's materialization")
    return done
inst.DagsterInstance.handle_new_event = handle_new_event
from pipelines import night
write = night.Night.write_summary
def writing(self, summary, *a, **k):
    if where == "record" and summary.get("status") == "interrupted":
        again("as the night writes its record")
    return write(self, summary, *a, **k)
night.Night.write_summary = writing
{CTRL_C_WHEN_HUNG}from pipelines.cli import entrypoint
sys.argv = ["nightly", "run", "--home", str(home), "--labels", "lora", "--env", "MINIRL_HANG=test_lora_math",
            "--timeout-floor", "900"]
entrypoint()
""".replace("{CTRL_C_WHEN_HUNG}", CTRL_C_WHEN_HUNG)


@pytest.mark.parametrize("where", ["join", "drain", "record"])
def test_ctrl_c_again_while_the_night_stops_loses_nothing(tmp_path, where):
    """A second Ctrl-C while the first stops the night (its tests killed, its record written) used to cut
    that short: the record said no test had been dispatched, or stayed "running", and the UI showed none
    of the night's tests. It is noted and the night stops as after one."""
    home = tmp_path / "home"
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"), "NIGHTLY_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", AGAIN, str(home), where], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=WAIT_S)
    assert "INJECT: second SIGINT" in done.stderr, done.stderr[-3000:]
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "nightly: interrupted: running tests were killed" in done.stderr
    summary = json.loads((home / "nights" / "latest.json").read_text())
    assert summary["status"] == "interrupted", summary.get("notes")
    outcomes = {a["test_id"]: a["outcome"] for a in summary["attempts"]}
    # the others passed or were killed too (a test not yet started when the night stopped has no attempt)
    assert outcomes[HANG] == "interrupted" and set(outcomes.values()) <= {"passed", "interrupted"}, outcomes
    assert json.loads((home / "runs" / f"{summary['run_id']}.json").read_text())["attempts"] == summary["attempts"]
    history = {(s.test_id, s.outcome) for s in FileHistoryStore(home / "history.sqlite").read()}
    assert set(outcomes.items()) <= history
    for test_id, outcome in outcomes.items():
        _ui_shows(home, test_id, outcome)
    running = [json.loads(f.read_text()) for f in (home / "running").glob("*.json")]
    assert not running, running  # every attempt ended and was recorded; nothing left for a reaper
    if where != "drain":  # that one lands in Dagster's frame, which keeps it to itself
        assert done.stderr.count("nightly: still stopping the night") == 1, done.stderr[-3000:]


# `nightly run` with a signal sent while the night reports a test that finished as another one hangs: argv =
# signal, home, where, nightly's own arguments; where "check": as the test's check result is tied to its
# materialization (in the asset's conversion); "progress": as the night stores its log and partial record
REPORTING = """
import os, signal, sys, time
from pathlib import Path
sig, home, where = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
hang, sent = "tests/e2e/lora/test_lora_math.py", []
def hanging():
    return any("hanging on purpose" in p.read_text(errors="replace") for p in (home / "logs").rglob("*lora_math*"))
def send(what):
    sent.append(what)
    print(f"INJECT: signal {sig} {what}", file=sys.stderr, flush=True)
    os.kill(os.getpid(), sig)
    for _ in range(500):
        time.sleep(0.002)  # handled here, in the middle of the report
import pipelines.defs.test_runs as tr
import pipelines.execute as ex
targeted, finished = tr._targeted, ex._Progress.finished
def _targeted(context, check):
    if where == "check" and not sent and check.partition not in (None, hang) and hanging():
        send(f"as the check of {check.partition} is tied to its materialization")
    return targeted(context, check)
def _finished(self, attempt):
    if where in ("progress", "slow store") and not sent and attempt.test_id != hang and hanging():
        send(f"as the night stores {attempt.test_id}'s log and partial record")
        if where == "slow store":  # the store takes 30 s to answer: the night must not wait for it to stop
            for _ in range(3000):
                time.sleep(0.01)
    return finished(self, attempt)
tr._targeted, ex._Progress.finished = _targeted, _finished
made = ex.Finished
def _made(attempt, *a, **k):  # the night's event of a finished test, made as it is taken off the queue
    if where == "event" and not sent and attempt.test_id != hang and hanging():
        send(f"as the night takes {attempt.test_id} off its queue")
    return made(attempt, *a, **k)
ex.Finished = _made
from pipelines.cli import entrypoint
sys.argv = ["nightly", *sys.argv[4:]]
entrypoint()
"""


@pytest.mark.parametrize("where", ["check", "progress", "slow store", "event"])
def test_a_signal_while_a_finished_test_is_reported_keeps_it_and_the_killed_ones_in_the_ui(tmp_path, where):
    """The test that finished is taken off the night's queue and half reported when the signal lands: it
    used to vanish from the UI (or lose its check), and with it every test the interrupt killed."""
    home = tmp_path / "home"
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"), "NIGHTLY_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", REPORTING, str(int(signal.SIGINT)), str(home), where, "run", "--home",
                           str(home), "--labels", "lora", "--env", "MINIRL_HANG=test_lora_math", "--timeout-floor",
                           "900"], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=WAIT_S)
    if "INJECT: signal" not in done.stderr:  # every other test ended before the hanging one hung: nothing to see
        pytest.skip("no test finished while the hanging one hung on this run")
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-3000:]
    summary = json.loads((home / "nights" / "latest.json").read_text())
    assert summary["status"] == "interrupted", summary.get("notes")
    outcomes = {a["test_id"]: a["outcome"] for a in summary["attempts"]}
    assert outcomes[HANG] == "interrupted" and "passed" in outcomes.values(), outcomes
    for test_id, outcome in outcomes.items():
        _ui_shows(home, test_id, outcome)
    for test_id in outcomes:  # each test said once, however far its first telling got
        assert len([line for line in done.stdout.splitlines() if f"] {test_id}  " in line]) == 1, done.stdout
    # the signal stopped the night at once, not once the store answered (the hanging test was killed then)
    [hung] = [a for a in summary["attempts"] if a["test_id"] == HANG]
    assert hung["elapsed_s"] < 20, hung


BROKEN = """
import sys
import pipelines.defs.test_runs as tr
meta, made = tr.attempt_metadata, []
def broken(attempt, test, night):
    made.append(attempt.test_id)
    if len(made) == 2:
        raise KeyError("a bug while reporting a test")
    return meta(attempt, test, night)
tr.attempt_metadata = broken
from pipelines.cli import entrypoint
sys.argv = ["nightly", *sys.argv[1:]]
entrypoint()
"""


def test_a_bug_while_reporting_a_test_stops_the_night_as_a_failure_never_as_an_interrupt(tmp_path):
    """No signal was sent: the night is not "interrupted" (exit 130, CANCELED, "no new test started after
    the signal"), which a CI reads as someone stopping it; it failed, and says with what."""
    home = tmp_path / "home"
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"), "NIGHTLY_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", BROKEN, "run", "--home", str(home), "--labels", "lora", "--env",
                           "MINIRL_HANG=test_lora_math", "--timeout-floor", "900"], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode not in (0, 130), done.stdout[-2000:] + done.stderr[-3000:]
    assert "nightly: interrupted" not in done.stderr, done.stderr[-3000:]
    summary = json.loads((home / "nights" / "latest.json").read_text())
    assert summary["status"] == "failed", summary["status"]
    assert "KeyError" in summary["notes"][0] and "signal" not in summary["notes"][0], summary["notes"]
    assert {a["test_id"]: a["outcome"] for a in summary["attempts"]}[HANG] == "interrupted"  # killed, not left running
    with open_instance(home) as instance:
        assert instance.get_run_by_id(summary["run_id"]).status == dg.DagsterRunStatus.FAILURE
    # the verdict and the report say the night failed on its error, never that someone interrupted it
    verdict = next((line for line in (done.stdout + done.stderr).splitlines() if line.startswith("verdict: ")), "")
    assert verdict.startswith("verdict: FAILED: the night stopped on an error (KeyError: "), verdict
    assert "killed when it stopped" in verdict and "interrupted" not in verdict, verdict
    shown = subprocess.run([sys.executable, "-m", "pipelines", "report", "--home", str(home), "--json"],
                           cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=WAIT_S)
    report = json.loads(shown.stdout)
    assert report["verdict"].startswith("FAILED: the night stopped on an error (KeyError: "), report["verdict"]
    (hung,) = [f for f in report["failures"] + report["infra"] if f["test_id"] == HANG]
    assert hung["classification"].startswith("killed: the night stopped on an error"), hung
    assert "until it stopped on an error" in dict(report["makespan"]), report["makespan"]


BUG_AFTER_A_SIGNAL = """
import os, signal, sys, time
import dagster
from pipelines.cli import main

real = dagster.JobDefinition.execute_in_process

def patched(self, *a, **k):
    if self.name != "calibration":
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)
        except KeyboardInterrupt:
            pass  # the signal was handled where it landed
        raise RuntimeError("a real bug in the run's setup")  # no interrupt in its chain
    return real(self, *a, **k)

dagster.JobDefinition.execute_in_process = patched
sys.exit(main(["run", "--labels", "lora"]))
"""


def test_a_real_error_after_a_handled_signal_is_the_error_not_an_interruption(tmp_path):
    """Any error that escaped the run while a signal had come was taken for the signal's interrupt a library
    had turned into its own error: exit 130 and the bug never said. Only one whose chain holds the
    interrupt is (the pydantic case above)."""
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"), "NIGHTLY_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", BUG_AFTER_A_SIGNAL], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
    assert "RuntimeError: a real bug in the run's setup" in done.stderr, done.stderr[-3000:]


SWALLOWED_IN_ONE_COMMAND = """
import sys
import pipelines.cli.catalog as catalog
from pipelines.cli import main

real = catalog.run

class Finalized:
    def __del__(self):
        raise KeyboardInterrupt  # a Ctrl-C landing in a finalizer: Python swallows it

def swallowing(args):
    Finalized()
    return real(args)

catalog.run = swallowing
first = main(["catalog", "--suite", "stage-c-8-gpu-h200"])
catalog.run = real
second = main(["catalog", "--suite", "stage-c-8-gpu-h200"])
print("RCS", first, second)
"""


def test_an_interrupt_a_finalizer_swallowed_is_its_commands_and_never_the_next_ones(tmp_path):
    """A Ctrl-C swallowed during one command (`main()` called twice in one Python, as a script or a test
    does) was kept and acted on by the next `nightly run`, which had no signal; and the command it came
    in ended 0 as if no Ctrl-C had come. It is that command's interrupt: 130 there, nothing after."""
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"), "NIGHTLY_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", SWALLOWED_IN_ONE_COMMAND], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "RCS 130 0", done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.count("nightly catalog: interrupted") == 1, done.stderr[-2000:]
