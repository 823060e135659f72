"""The fault campaign of issue 10, one test per row, against the real local launcher.

Each row asserts the outcome a CI maintainer must see and that nothing was lost (the attempt
is returned, its log is there, no process or GPU lock is left behind). docs/reliability.md
holds the same table with each row's result.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from pipelines.core.calibrate import calibrate
from pipelines.core.history import FileHistoryStore, HistoryError, sample_from_attempt
from pipelines.core.model import Attempt, CatalogError, Requirement
from pipelines.core.specs import load_specs
from pipelines.launch.base import LaunchRequest, judge_reported_configs, tail
from pipelines.launch.gpu_slots import host_lock_dir, try_acquire
from pipelines.launch.local import LocalLauncher
from pipelines.launch.orphans import find_orphans, reap_orphans
from pipelines.launch.procs import lock_holders
from pipelines.storage.cache import AssetCache
from tests.conftest import PROJECT_ROOT, make_test
from tests.core.history.test_history_store import read_only_folder


def _repo(tmp_path: Path, body: str) -> Path:
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True, exist_ok=True)
    (repo / "tests" / "test_x.py").write_text(textwrap.dedent(body))
    return repo


def _request(repo: Path, tmp_path: Path, timeout_s: int = 60, slots=(0,), **kw) -> LaunchRequest:
    test = make_test(id="tests/test_x.py", path="tests/test_x.py", gpus=len(slots))
    return LaunchRequest(test=test, repo_path=repo, timeout_s=timeout_s, log_path=tmp_path / "logs" / "x.log",
                         pool="h200", gpu_slots=tuple(slots), night="n1", **kw)


def _wait_for(path: Path, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _gone(pid: int, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


DAEMON = """
    import os, sys, time
    def execute():
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                open("daemon.pid", "w").write(str(os.getpid()))
                time.sleep(600)
            os._exit(0)
        while not os.path.exists("daemon.pid"):
            time.sleep(0.01)
        print("started a daemon")
        {end}
"""


@pytest.mark.slow  # waits out a real 3 s timeout
def test_a_setsid_daemon_of_a_hung_test_dies_with_its_timeout(tmp_path):
    repo = _repo(tmp_path, DAEMON.format(end="time.sleep(600)"))
    attempt = LocalLauncher(tmp_path / "state", kill_grace_s=1).launch(_request(repo, tmp_path, timeout_s=3))
    assert attempt.outcome == "timed_out"
    assert _gone(int(_wait_for(repo / "daemon.pid")))
    assert "started a daemon" in Path(attempt.log_path).read_text()


def test_a_setsid_daemon_of_a_passing_test_is_killed_and_reported(tmp_path):
    repo = _repo(tmp_path, DAEMON.format(end="return"))
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path))
    daemon = int(_wait_for(repo / "daemon.pid"))
    assert attempt.outcome == "passed", tail(attempt.log_path)
    assert _gone(daemon)
    assert str(daemon) in attempt.details["killed_leftovers"]
    assert f"the test left running: {daemon}" in Path(attempt.log_path).read_text()


def test_a_daemon_that_escapes_marker_and_group_but_holds_the_gpu_locks_is_killed_at_the_end(tmp_path):
    """`env -i` drops the attempt's marker and `setsid` leaves its group; os.system hands the shell the
    test's open lock files, so the daemon would keep the GPUs locked for every later test."""
    repo = _repo(tmp_path, """
        import os, time
        def execute():
            os.system("env -i setsid sh -c 'echo $$ > daemon.tmp; mv daemon.tmp daemon.pid; exec sleep 600' "
                      ">/dev/null 2>&1 </dev/null &")
            while not os.path.exists("daemon.pid"):
                time.sleep(0.01)
    """)
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path))
    daemon = int(_wait_for(repo / "daemon.pid"))
    assert attempt.outcome == "passed", tail(attempt.log_path)
    assert _gone(daemon)
    assert str(daemon) in attempt.details["killed_leftovers"].split(",")
    assert f"still holding the test's GPU locks: PID {daemon} (sleep 600)" in Path(attempt.log_path).read_text()
    free = try_acquire(host_lock_dir(), "h200", 1, [0], 1, prefer=attempt.gpu_slots)
    assert free is not None and free.slots == attempt.gpu_slots  # the next test gets the GPU at once
    free.release()


ESCAPES_WITH_THE_OUTPUT = """
    import subprocess, sys, time
    def execute():
        # a clean environment (no marker), its own session (not the group), no GPU lock (Popen closes the
        # test's other files); stdout and stderr are the test's, inherited as Popen does by default
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep({sleep}); "
                                  "print('config cell-b: failed', flush=True)"],
                                 env={{"PATH": "/usr/bin:/bin"}}, start_new_session=True)
        open("escaped.pid", "w").write(str(child.pid))
        print("config cell-a: passed", flush=True)
"""


def test_a_process_that_escapes_marker_group_and_locks_but_holds_the_output_is_killed_and_named(tmp_path):
    repo = _repo(tmp_path, ESCAPES_WITH_THE_OUTPUT.format(sleep=8))
    t0 = time.monotonic()
    attempt = judge_reported_configs(LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path)))
    took = time.monotonic() - t0
    escaped = int(_wait_for(repo / "escaped.pid"))
    assert _gone(escaped, timeout_s=1)
    assert took < 6, f"the attempt waited {took:.1f} s for its output instead of killing its writer"
    assert attempt.outcome == "passed" and attempt.details["configs"] == "cell-a=passed", tail(attempt.log_path)
    assert str(escaped) in attempt.details["killed_leftovers"].split(",")
    log = Path(attempt.log_path).read_text()
    assert f"killed 1 process(es) still writing to the test's output after the test ended: PID {escaped} (" in log
    assert "log_unfinished" not in attempt.details


def test_an_attempt_whose_output_stays_open_after_its_end_is_not_passed_on_the_unfinished_log(tmp_path, monkeypatch):
    """A writer the night can neither see nor kill (stood in for by a night that finds none): the log is
    unfinished, so a failure the test reports later would come too late to count."""
    import pipelines.launch.local as local

    monkeypatch.setattr(local, "kill_pipe_writers", lambda inode: {}, raising=False)
    monkeypatch.setattr(local, "PUMP_JOIN_S", 0.5)
    repo = _repo(tmp_path, ESCAPES_WITH_THE_OUTPUT.format(sleep=3))
    try:
        attempt = judge_reported_configs(LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path)))
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(_wait_for(repo / "escaped.pid")), signal.SIGKILL)
    assert attempt.outcome == "failed" and attempt.details["log_unfinished"] == "true"
    assert attempt.reason.startswith("the test's output was still open 0.5 s after the test ended and its processes")
    assert attempt.reason.endswith("its log is unfinished, so it cannot pass")
    assert "# nightly: the test's output was still open 0.5 s after" in Path(attempt.log_path).read_text()


def test_a_launch_waits_for_gpus_held_by_a_stray_process_no_longer_than_its_timeout_and_names_it(tmp_path, caplog):
    import logging

    from pipelines.core.model import Pool

    repo = _repo(tmp_path, "def execute():\n    pass\n")
    lock = try_acquire(host_lock_dir(), "h200", 1, [0], 1)
    assert lock is not None
    stray = subprocess.Popen(["sleep", "600"], pass_fds=lock.fds)  # now the stray process holds the GPU
    lock.release()
    try:
        launcher = LocalLauncher(tmp_path / "state", pools=[Pool("h200", 1, 1)], poll_s=0.05, gpu_wait_note_s=0.2,
                                 gpu_recheck_s=0.1, stray_confirm_s=0.5)
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="pipelines.launch.local"):
            attempt = launcher.launch(_request(repo, tmp_path, timeout_s=2))
        assert time.monotonic() - t0 < 60  # bounded by the test's 2 s timeout, not by the stray process
    finally:
        stray.kill()
        stray.wait()
    assert attempt.outcome == "infra_error"
    assert f"held by PID {stray.pid} (sleep 600)" in attempt.reason and "gave up after the test's 2s timeout" in attempt.reason
    assert f"PID {stray.pid} (sleep 600) is not a nightly test" in attempt.reason
    assert float(attempt.details["gpu_wait_s"]) >= 2
    assert "waiting for GPUs" in caplog.text and f"PID {stray.pid} (sleep 600)" in caplog.text


def test_garbage_then_os_exit_0_before_the_end_is_failed_not_passed(tmp_path):
    repo = _repo(tmp_path, """
        import os
        def execute():
            print("PASSED  all 12 checks ok")
            os._exit(0)
            raise AssertionError("the real check, never reached")
    """)
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path))
    assert (attempt.outcome, attempt.exit_code) == ("failed", 0)
    assert attempt.reason.startswith("exited before the test finished")
    assert "PASSED  all 12 checks ok" in Path(attempt.log_path).read_text()


def test_a_forked_child_that_reaches_the_wrappers_end_does_not_pass_a_test_that_exited_halfway(tmp_path):
    """The child's sys.exit(0) unwinds through the wrapper's own code, which would write the attempt's
    completion record (same token); the test itself then calls os._exit(0) before its end."""
    repo = _repo(tmp_path, """
        import os, sys, time
        def execute():
            if os.fork() == 0:
                time.sleep(0.5)
                sys.exit(0)
            time.sleep(1.0)
            os._exit(0)
            raise AssertionError("the real check, never reached")
    """)
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path))
    assert (attempt.outcome, attempt.exit_code) == ("failed", 0)
    assert attempt.reason.startswith("exited before the test finished"), attempt.reason
    assert not Path(attempt.log_path).with_suffix(".result.json").exists()


def test_a_completion_record_written_by_another_process_than_the_wrapper_is_no_pass(tmp_path):
    """Belt and braces: whatever writes the attempt's record with its token, only the wrapper's own
    process (the one the launcher started) can pass the test."""
    result_path = tmp_path / "logs" / "x.result.json"
    repo = _repo(tmp_path, """
        import json, os
        def execute():
            record = {"ok": True, "exit_code": 0, "finished": True, "token": os.environ["NIGHTLY_ATTEMPT_TOKEN"],
                      "pid": os.getpid() + 1}
            open(os.environ["RESULT"], "w").write(json.dumps(record))
            os._exit(0)
    """)
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path, env={"RESULT": str(result_path)}))
    assert attempt.outcome == "failed"
    assert "was written by PID" in attempt.reason and "not by the test's wrapper" in attempt.reason, attempt.reason


def test_a_test_that_closes_its_stdout_and_stderr_then_raises_keeps_its_error(tmp_path):
    repo = _repo(tmp_path, """
        import os
        def execute():
            os.close(1)
            os.close(2)
            raise RuntimeError("real error")
    """)
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path))
    assert attempt.outcome == "failed"
    assert attempt.reason == "RuntimeError: real error", attempt.reason
    assert attempt.details["error"] == "RuntimeError: real error"


def test_bad_specs_are_located_errors_before_anything_runs(tmp_path):
    import shutil

    assets = tmp_path / "assets"
    shutil.copytree(PROJECT_ROOT / "assets", assets)
    (assets / "repos.yaml").write_text(textwrap.dedent("""\
        repos:
          fw:
            path: .
            roots: [1, 2]
            timout: {floor_s: 60}
            timeout: {floor_s: 0, factor: -1}
            calibration: {policy: bogus}
            format: registry
            format: bogus
    """))
    with pytest.raises(CatalogError) as exc:
        load_specs(assets)
    got = {(p.line, p.field) for p in exc.value.problems}
    assert {(4, "repos.fw.roots.0"), (5, "repos.fw.timout"), (6, "repos.fw.timeout.floor_s"),
            (6, "repos.fw.timeout.factor"), (7, "repos.fw.calibration.policy"), (9, "format")} <= got
    assert "Traceback" not in str(exc.value)


def test_a_zero_byte_history_is_an_error_and_stays_as_it_was(tmp_path):
    path = tmp_path / "history.sqlite"
    path.touch()
    os.utime(path, (time.time() - 60, time.time() - 60))  # found later, not a history another process is creating
    with pytest.raises(HistoryError, match="history file is empty \\(0 bytes\\)"):
        FileHistoryStore(path).read()
    assert path.stat().st_size == 0


def test_a_read_only_state_folder_is_named_by_the_launcher_and_the_history(tmp_path):
    repo = _repo(tmp_path, "def execute():\n    pass\n")
    state = tmp_path / "state"
    state.mkdir()
    with read_only_folder(state):
        attempt = LocalLauncher(state).launch(_request(repo, tmp_path))
        with pytest.raises(HistoryError, match=f"{state}: the state folder is not writable"):
            FileHistoryStore(state / "history.sqlite").append(
                [sample_from_attempt(Attempt("t", "passed", 1.0, "2026-12-01T00:00:00"), make_test(), "r")])
    assert attempt.outcome == "infra_error"
    assert attempt.reason.startswith(f"{state}: the state folder is not writable")


def test_a_logs_folder_gone_mid_test_is_an_infra_error_naming_the_result_file_not_a_failure(tmp_path):
    repo = _repo(tmp_path, """
        import os, shutil
        def execute():
            shutil.rmtree(os.environ["LOGS"])  # the logs folder goes away while the test runs
    """)
    request = _request(repo, tmp_path, env={"LOGS": str(tmp_path / "logs")})
    attempt = LocalLauncher(tmp_path / "state").launch(request)
    assert attempt.outcome == "infra_error", attempt.reason
    assert str(request.log_path.with_suffix(".result.json")) in attempt.reason
    assert "outcome is unknown" in attempt.reason and attempt.details["retriable"] == "false"
    assert not list((tmp_path / "state" / "running").glob("*.json"))


@pytest.mark.parametrize("end", [
    "os._exit(74)",
    "ctypes.CDLL(None).exit(74)",  # a C-level exit (a native library giving up)
    "os.execv('/bin/sh', ['sh', '-c', 'exit 74'])",  # the test's process becomes a program that exits 74
], ids=["os._exit", "C exit", "exec'd program"])
def test_a_test_that_exits_74_itself_halfway_is_failed_not_an_infra_error(tmp_path, end):
    """74 is also the wrapper's status when it cannot write the result; without the wrapper's line
    saying so (and with a writable logs folder) the status is the test's own."""
    repo = _repo(tmp_path, f"""
        import ctypes, os
        def execute():
            print("loss diverged; bailing out", flush=True)
            {end}
    """)
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path))
    assert (attempt.outcome, attempt.reason, attempt.exit_code) == ("failed", "exit code 74", 74), attempt.reason


def test_a_result_the_wrapper_cannot_write_in_a_writable_folder_is_an_infra_error_by_the_wrappers_line(tmp_path):
    """The folder is fine, but the result's path is taken by a folder: only the wrapper's line in the log
    says that the 74 is the wrapper's."""
    repo = _repo(tmp_path, """
        import os
        def execute():
            os.mkdir(os.path.join(os.environ["LOGS"], "x.result.json"))
    """)
    request = _request(repo, tmp_path, env={"LOGS": str(tmp_path / "logs")})
    attempt = LocalLauncher(tmp_path / "state").launch(request)
    assert attempt.outcome == "infra_error", attempt.reason
    assert attempt.reason.startswith(f"{request.log_path.with_suffix('.result.json')}: the test's wrapper could not "
                                     "write its result there (it said: Is a directory)"), attempt.reason


def test_a_logs_folder_that_is_not_writable_is_named_and_leaves_no_running_record(tmp_path):
    repo = _repo(tmp_path, "def execute():\n    pass\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    with read_only_folder(logs):
        attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path))
    assert attempt.outcome == "infra_error"
    assert attempt.reason.startswith(f"{logs / 'x.log'}: cannot write the test's log"), attempt.reason
    assert "state folder" not in attempt.reason
    assert not list((tmp_path / "state" / "running").glob("*.json"))  # a later night must not call it interrupted


def test_a_damaged_cache_entry_is_rebuilt_as_infra_and_the_test_passes(tmp_path):
    hub = tmp_path / "hub" / "models" / "org" / "m1"
    hub.mkdir(parents=True)
    (hub / "weights.bin").write_bytes(b"w" * 1000)
    cache = AssetCache(tmp_path / "cache", tmp_path / "hub")
    model = Requirement("model", "m1", "org/m1", "/root/models/m1")
    cache.build(model)
    (tmp_path / "cache" / "models" / "m1" / "weights.bin").write_bytes(b"w" * 10)  # marker still there
    built = cache.build(model)
    assert built.repaired and "10 bytes, the manifest says 1000" in built.damage
    repo = _repo(tmp_path, """
        import os
        def execute():
            assert open(os.environ["WEIGHTS"], "rb").read() == b"w" * 1000
    """)
    weights = str(tmp_path / "cache" / "models" / "m1" / "weights.bin")
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path, env={"WEIGHTS": weights}))
    assert attempt.outcome == "passed", tail(attempt.log_path)


def test_a_billion_second_sample_never_becomes_a_timeout(tmp_path):
    test = make_test(est_time=600)
    store = FileHistoryStore(tmp_path / "history.sqlite")
    for i, elapsed in enumerate((400.0, 410.0, 1e9)):
        store.append([sample_from_attempt(Attempt(test.id, "passed", elapsed, f"2026-12-01T00:0{i}:00+00:00"),
                                          test, f"r{i}")])
    assert [s.outlier for s in store.read()] == ["", "", "elapsed 1e+09 s is over the ceiling of 86400 s"]
    (e,) = calibrate([test], store.read())
    assert e.proposed == 600 and e.max_s == 410  # bucket125: 513 -> 600
    assert e.outliers and "over the ceiling" in e.outliers[0]


def test_a_flood_of_output_is_capped_to_head_and_tail(tmp_path):
    repo = _repo(tmp_path, """
        import sys
        def execute():
            print("FIRST LINE")
            for i in range(40_000):
                sys.stdout.write(f"line {i:06d} " + "x" * 100 + "\\n")
            print("LAST LINE")
    """)
    lines: list[str] = []
    cap = 256 * 1024
    attempt = LocalLauncher(tmp_path / "state", log_cap_bytes=cap).launch(_request(repo, tmp_path), lines.append)
    text = Path(attempt.log_path).read_text()
    assert attempt.outcome == "passed"
    assert Path(attempt.log_path).stat().st_size < cap + 1024
    assert "FIRST LINE" in text and text.rstrip().endswith("LAST LINE")
    assert "# nightly: output cut here:" in text and int(attempt.details["log_cut_bytes"]) > 4_000_000
    assert len(lines) < 3000 and lines[-1].startswith("# nightly: output over")


def test_a_failed_configuration_reported_in_the_cut_middle_of_a_flood_still_fails_the_test(tmp_path):
    repo = _repo(tmp_path, """
        import sys
        def execute():
            for i in range(40_000):
                sys.stdout.write(f"line {i:06d} " + "x" * 100 + "\\n")
                if i == 20_000:
                    print("[minirl] config fsdp-tp1: failed")
            print("config megatron-tp2: passed")
    """)
    cap = 256 * 1024
    attempt = judge_reported_configs(LocalLauncher(tmp_path / "state", log_cap_bytes=cap).launch(_request(repo, tmp_path)))
    assert int(attempt.details["log_cut_bytes"]) > 4_000_000 and Path(attempt.log_path).stat().st_size < cap + 1024
    assert attempt.outcome == "failed" and attempt.reason == "config fsdp-tp1 reported failed"
    assert attempt.details["configs"] == "fsdp-tp1=failed,megatron-tp2=passed"


_NIGHT = """
import sys
from pathlib import Path
from pipelines.launch.base import LaunchRequest
from pipelines.launch.local import LocalLauncher
from tests.conftest import make_test
tmp, timeout, backstop = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
test = make_test(id="tests/test_x.py", path="tests/test_x.py", gpus=1)
LocalLauncher(tmp / "state", kill_grace_s=0.5, backstop_s=backstop, night="n-killed").launch(LaunchRequest(
    test=test, repo_path=tmp / "repo", timeout_s=timeout, log_path=tmp / "logs" / "x.log", pool="h200",
    gpu_slots=(3,)))
"""
HANG = """
    import os, time
    def execute():
        open("test.pid", "w").write(str(os.getpid()))
        time.sleep(600)
"""


def _night(tmp_path: Path, timeout_s: int, backstop_s: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _NIGHT, str(tmp_path), str(timeout_s), str(backstop_s)],
                            cwd=PROJECT_ROOT, start_new_session=True)


@pytest.mark.slow  # a night killed -9 in a subprocess
def test_after_kill_9_of_the_night_the_test_keeps_its_gpu_and_the_next_night_reaps_it(tmp_path):
    repo = _repo(tmp_path, HANG)
    night = _night(tmp_path, 600, 600)
    test_pid = int(_wait_for(repo / "test.pid"))
    night.send_signal(signal.SIGKILL)
    night.wait()
    assert not _gone(test_pid, 0.5)
    other = try_acquire(host_lock_dir(), "h200", 1, [0], 4, prefer=(3,))
    assert other is not None and other.slots == (0,)  # GPU 3 is still locked by the orphaned test
    other.release()
    (orphan,) = find_orphans(tmp_path / "state")
    assert orphan.record["test_id"] == "tests/test_x.py" and test_pid in orphan.pids
    recorded: list[Attempt] = []
    (attempt,) = reap_orphans(tmp_path / "state", record=recorded.append)
    assert recorded == [attempt]
    assert (attempt.outcome, attempt.test_id, attempt.gpu_slots) == ("interrupted", "tests/test_x.py", (3,))
    assert "the night n-killed" in attempt.reason and "killed by a later night" in attempt.reason
    assert _gone(test_pid)
    held = try_acquire(host_lock_dir(), "h200", 1, [0], 4, prefer=(3,))
    assert held is not None and held.slots == (3,)
    held.release()
    assert find_orphans(tmp_path / "state") == []


@pytest.mark.slow  # a night killed -9 in a subprocess
def test_after_kill_9_the_next_night_kills_the_daemon_that_escaped_marker_and_group_and_frees_the_gpu(tmp_path):
    """The test's `env -i setsid sleep` daemon carries no marker and left the group, but holds the test's
    GPU lock: the reaper kills it by that lock, as the live night would have at the attempt's end."""
    repo = _repo(tmp_path, """
        import os, time
        def execute():
            os.system("env -i setsid sh -c 'echo $$ > daemon.tmp; mv daemon.tmp daemon.pid; exec sleep 302' "
                      ">/dev/null 2>&1 </dev/null &")
            while not os.path.exists("daemon.pid"):
                time.sleep(0.01)
            open("test.pid", "w").write(str(os.getpid()))
            time.sleep(600)
    """)
    night = _night(tmp_path, 600, 600)
    _wait_for(repo / "test.pid")
    daemon = int(_wait_for(repo / "daemon.pid"))
    night.send_signal(signal.SIGKILL)
    night.wait()
    try:
        (attempt,) = reap_orphans(tmp_path / "state")
        assert _gone(daemon)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon, signal.SIGKILL)
    assert attempt.details["reaped"] == "killed" and str(daemon) in attempt.details["killed_leftovers"].split(",")
    assert f"still holding its GPU locks were killed: PID {daemon} (sleep 302)" in attempt.reason
    held = try_acquire(host_lock_dir(), "h200", 1, [0], 4, prefer=(3,))
    assert held is not None and held.slots == (3,)  # the next night's test gets the GPU at once
    held.release()


_LIVE_NIGHT = """
import subprocess, sys, time
from pathlib import Path
from pipelines.launch import gpu_slots
lock_dir = gpu_slots.host_lock_dir()
gpu_slots.mark_launcher(lock_dir)
held = gpu_slots.try_acquire(lock_dir, "h200", 1, [0], 4, prefer=(3,))
daemon = subprocess.Popen(["sleep", "600"], pass_fds=held.fds, start_new_session=True, env={})
Path(sys.argv[1]).write_text(str(daemon.pid))
time.sleep(600)
"""


def test_the_reaper_leaves_alone_a_gpu_lock_that_a_live_night_holds_now(tmp_path):
    """A dead night's record names GPU 3's lock, but that GPU was freed and a live night holds it now,
    with a daemon of its test (no marker, its own session) sharing the lock: none of them is killed."""
    from pipelines.launch.gpu_slots import lock_path
    from pipelines.launch.orphans import write_record

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    pid_file = tmp_path / "daemon.pid"
    live = subprocess.Popen([sys.executable, "-c", _LIVE_NIGHT, str(pid_file)], cwd=PROJECT_ROOT, start_new_session=True)
    try:
        daemon = int(_wait_for(pid_file))
        write_record(tmp_path / "state", {"token": "dead", "test_id": "tests/test_x.py", "attempt": 1, "pid": 0,
                                          "pgid": 0, "owner_pid": gone.pid, "owner_start": "0",
                                          "lock_paths": [str(lock_path(host_lock_dir(), "h200", 0, 3))]})
        (attempt,) = reap_orphans(tmp_path / "state")
        assert not _gone(daemon, 0.3) and live.poll() is None
        assert attempt.details["reaped"] == "ended" and "killed_leftovers" not in attempt.details
    finally:
        os.killpg(live.pid, signal.SIGKILL)
        live.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_the_reaper_spares_a_process_that_took_the_dead_attempts_gpu_lock_after_the_night_died(tmp_path, monkeypatch):
    """The night died and its test ended, so GPU 3 was free; a developer then ran `flock LOCK sleep 600`
    on its lock. That lock is no longer the attempt's (its taker is the live flock, not the dead night):
    the next night's reaper leaves it alone, as a launch waits for such a stray and never kills it."""
    import uuid

    from pipelines.launch import gpu_slots
    from pipelines.launch.orphans import write_record

    locks = tmp_path / "locks"
    monkeypatch.setenv("NIGHTLY_GPU_LOCK_DIR", str(locks))
    lock = gpu_slots.lock_path(locks, "h200", 0, 3)
    locks.mkdir()
    lock.touch()
    dead = subprocess.Popen(["true"])
    dead.wait()
    write_record(tmp_path / "state", {
        "token": uuid.uuid4().hex, "pid": dead.pid, "pgid": dead.pid, "test_id": "tests/test_x.py", "attempt": 1,
        "night": "n0", "run_id": "r0", "log_path": str(tmp_path / "x.log"), "started_at": "2026-01-01T00:00:00+00:00",
        "timeout_s": 60, "node": "h200-0", "gpu_slots": [3], "lock_paths": [str(lock)], "owner_pid": dead.pid,
        "owner_start": "gone"})
    # its own session, so the cleanup ends flock's `sleep` child too (it holds the lock as well)
    developer = subprocess.Popen(["flock", str(lock), "sleep", "600"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not lock_holders([lock]) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lock_holders([lock]), "flock never took the lock"
        (attempt,) = reap_orphans(tmp_path / "state")
        assert developer.poll() is None and not _gone(developer.pid, 0.3)
        assert attempt.details["reaped"] == "ended" and "killed_leftovers" not in attempt.details
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(developer.pid, signal.SIGKILL)
        developer.wait()


def test_the_reaper_never_kills_the_holders_of_a_lock_file_outside_the_gpu_lock_folder(tmp_path):
    """A record naming any file as its lock and that file's locker as its dead night (`flock FILE sleep`,
    owner_start not its own): the reaper killed whatever held the file. Only the GPU lock folder's files
    are the attempt's locks; the others are left alone and said."""
    import uuid

    from pipelines.launch.orphans import write_record

    outside = tmp_path / "someone-elses.lock"
    outside.touch()
    holder = subprocess.Popen(["flock", str(outside), "sleep", "600"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not lock_holders([outside]) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lock_holders([outside]), "flock never took the lock"
        write_record(tmp_path / "state", {
            "token": uuid.uuid4().hex, "pid": 0, "pgid": 0, "test_id": "tests/test_x.py", "attempt": 1,
            "started_at": "2026-01-01T00:00:00+00:00", "lock_paths": [str(outside)], "owner_pid": holder.pid,
            "owner_start": "not its start"})
        (attempt,) = reap_orphans(tmp_path / "state")
        assert holder.poll() is None and not _gone(holder.pid, 0.3)
        assert "killed_leftovers" not in attempt.details
        assert f"outside the GPU lock folder were left alone (another NIGHTLY_GPU_LOCK_DIR, or not a lock): {outside}" \
            in attempt.reason
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


def test_a_running_file_that_is_no_record_is_set_aside_and_said_never_reaped(tmp_path):
    """Garbage and a hand-made record naming `../../etc/passwd` became interrupted samples of made-up tests
    (`unknown (deadbeef.json)`) and were deleted; now each is named with what is wrong and renamed beside it."""
    running = tmp_path / "state" / "running"
    running.mkdir(parents=True)
    (running / "deadbeef.json").write_text('{"pid": "x", garbage\n')
    (running / "cafe.json").write_text(json.dumps({"owner_pid": 999999, "test_id": "../../etc/passwd\n; $(id)",
                                                   "run_id": "r", "started_at": "x", "lock_paths": ["/etc/passwd"]}))
    (running / "f00d.json").write_text(json.dumps({"owner_pid": "x", "test_id": "tests/test_x.py"}))
    said: list[str] = []
    recorded: list[Attempt] = []
    assert reap_orphans(tmp_path / "state", record=recorded.append, refused=said.append) == [] and recorded == []
    assert sorted(p.name for p in running.iterdir()) == ["cafe.json.refused", "deadbeef.json.refused",
                                                        "f00d.json.refused"]
    assert said == [
        f"{running / name}: {why}; not a record of an attempt a night started: nothing was killed or recorded for "
        f"it; set aside as {running / name}.refused (delete it once read)" for name, why in (
            ("cafe.json", "test_id: '../../etc/passwd\\n; $(id)' is not a test id (contains '..')"),
            ("deadbeef.json", "cannot be read as JSON (Expecting property name enclosed in double quotes: line 1 "
                              "column 14 (char 13))"),
            ("f00d.json", "owner_pid: expected the night's pid (a whole number from 1 to 4194304), got 'x'"))]
    assert reap_orphans(tmp_path / "state", refused=said.append) == [] and len(said) == 3  # said once


@pytest.mark.slow  # a night killed -9 in a subprocess, then its test's timeout
def test_after_kill_9_of_the_night_a_hung_test_still_dies_near_its_timeout(tmp_path):
    repo = _repo(tmp_path, HANG)
    night = _night(tmp_path, 1, 1)  # the wrapper kills itself 1 + 2 x 0.5 + 1 = 3 s after start
    test_pid = int(_wait_for(repo / "test.pid"))
    night.send_signal(signal.SIGKILL)
    night.wait()
    assert _gone(test_pid, 60)
    (attempt,) = reap_orphans(tmp_path / "state")
    assert "no longer running; its result was never observed" in attempt.reason
    assert json.loads(next((tmp_path / "state" / "running" / "reaped").glob("*.json")).read_text())["pid"]


def test_a_live_nights_attempts_are_not_orphans(tmp_path):
    repo = _repo(tmp_path, HANG)
    night = _night(tmp_path, 600, 600)
    try:
        _wait_for(repo / "test.pid")
        assert find_orphans(tmp_path / "state") == []
    finally:
        os.killpg(night.pid, signal.SIGKILL)
        night.wait()
        reap_orphans(tmp_path / "state")


def test_a_test_that_finished_after_its_night_died_is_recorded_with_what_its_wrapper_saw(tmp_path):
    repo = _repo(tmp_path, """
        import os, time
        def execute():
            open("test.pid", "w").write(str(os.getpid()))
            while not os.path.exists("go"):
                time.sleep(0.02)
    """)
    night = _night(tmp_path, 600, 600)
    test_pid = int(_wait_for(repo / "test.pid"))
    night.send_signal(signal.SIGKILL)
    night.wait()
    (repo / "go").touch()
    assert _gone(test_pid, 60)
    (attempt,) = reap_orphans(tmp_path / "state")
    assert attempt.outcome == "interrupted" and attempt.details["wrapper_result"] == "ok"


def test_an_orphan_that_ended_unobserved_is_timed_by_its_wrapper_or_its_log_not_by_the_reaping(tmp_path):
    """A later night reaps it long after it ended: until-now would be the gap between the nights,
    and the night's "killed N test(s)" line would count tests that were already gone."""
    from datetime import UTC, datetime, timedelta

    from pipelines.launch.orphans import write_record

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a night that was killed: its pid is no longer alive
    started = datetime.now(UTC) - timedelta(seconds=100)
    for token, result in (("quiet", None), ("finished", 7.5)):
        log = tmp_path / "logs" / f"{token}.log"
        log.parent.mkdir(exist_ok=True)
        log.write_text("# nightly: ...\n")
        os.utime(log, (started.timestamp() + 12, started.timestamp() + 12))
        if result is not None:
            log.with_suffix(".result.json").write_text(json.dumps(
                {"finished": True, "ok": True, "token": token, "elapsed_s": result}))
        write_record(tmp_path / "state", {"token": token, "test_id": f"tests/{token}.py", "attempt": 1,
                                          "started_at": started.isoformat(timespec="seconds"), "log_path": str(log),
                                          "owner_pid": gone.pid, "owner_start": 0, "pid": 0, "pgid": 0})

    reaped = {a.test_id: a for a in reap_orphans(tmp_path / "state")}

    quiet, finished = reaped["tests/quiet.py"], reaped["tests/finished.py"]
    assert 11 <= quiet.elapsed_s <= 13 and finished.elapsed_s == 7.5
    assert quiet.details["reaped"] == finished.details["reaped"] == "ended"
    assert finished.details["wrapper_result"] == "ok"


def test_a_launch_waits_past_its_timeout_while_another_nights_test_holds_the_gpus(tmp_path, caplog):
    """Another night's legitimate long test holds the GPUs: the wait is not bounded by this test's
    timeout. A nightly holder is simulated by a process with the attempt marker in its environment
    (a plain `flock ... sleep`, as in the test above, is a stray by that definition)."""
    import logging

    from pipelines.core.model import Pool

    repo = _repo(tmp_path, "def execute():\n    print('trained')\n")
    lock = try_acquire(host_lock_dir(), "h200", 2, [0], 2)
    assert lock is not None
    other_night = subprocess.Popen(["sleep", "600"], pass_fds=lock.fds,
                                   env={**os.environ, "NIGHTLY_ATTEMPT_TOKEN": "other-night"})
    lock.release()
    ends = threading.Event()
    try:
        launcher = LocalLauncher(tmp_path / "state", pools=[Pool("h200", 1, 2)], poll_s=0.05, gpu_wait_note_s=0.2,
                                 gpu_recheck_s=0.2)
        with caplog.at_level(logging.WARNING, logger="pipelines.launch.local"):
            ends = _into_the_wait(caplog, 2.5, other_night.kill)  # the other night's test ends well into the wait
            attempt = launcher.launch(_request(repo, tmp_path, timeout_s=1, slots=(0, 1)))
    finally:
        ends.set()
        other_night.kill()
        other_night.wait()
    assert attempt.outcome == "passed", attempt.reason
    assert float(attempt.details["gpu_wait_s"]) >= 2.5  # well past the 1 s timeout
    assert f"PID {other_night.pid} (sleep 600)" in caplog.text


_OTHER_NIGHT = """
import json, sys
from pathlib import Path
from pipelines.core.model import Pool
from pipelines.launch.base import LaunchRequest
from pipelines.launch.local import LocalLauncher
from tests.conftest import make_test
tmp, timeout_s, kill_grace_s = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
test = make_test(id="tests/test_x.py", path="tests/test_x.py", gpus=1)
attempt = LocalLauncher(tmp / "state-a", kill_grace_s=kill_grace_s, pools=[Pool("h200", 1, 1)], night="A").launch(
    LaunchRequest(test=test, repo_path=tmp / "repo", timeout_s=timeout_s, log_path=tmp / "logs-a" / "x.log",
                  pool="h200", gpu_slots=(0,)))
print(json.dumps({"outcome": attempt.outcome, "started_at": attempt.started_at, "elapsed_s": attempt.elapsed_s}))
"""


@pytest.mark.slow  # another night in a subprocess, through its test's timeout and kill grace
def test_another_nights_launcher_holding_its_timed_out_tests_gpus_while_it_kills_it_is_waited_for(tmp_path):
    """Night A's test times out and leaves a child that ignores SIGTERM: A keeps the GPU lock for the
    kill's grace with only its own process holding it. Night B (another home, the same host's locks),
    past its own test's timeout, must wait for that night, not call it a stray and give up."""
    from datetime import datetime

    from pipelines.core.model import Pool

    repo = _repo(tmp_path, """
        import os, subprocess, sys, time
        def execute():
            subprocess.Popen([sys.executable, "-c", "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                              "open('child.tmp', 'w').write(str(os.getpid())); os.rename('child.tmp', 'child.pid'); time.sleep(600)"])
            while not os.path.exists("child.pid"):
                time.sleep(0.01)
            open("test.pid", "w").write(str(os.getpid()))
            time.sleep(600)
    """)
    # A's timeout leaves its test (two interpreters) time to write test.pid on a busy machine, and B, which
    # starts waiting then, time to be past its own timeout and stray_confirm_s while A kills its test
    a_timeout_s, a_grace_s, b_timeout_s, b_confirm_s = 5, 2.0, 1, 0.5
    night_a = subprocess.Popen([sys.executable, "-c", _OTHER_NIGHT, str(tmp_path), str(a_timeout_s), str(a_grace_s)],
                               cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for(repo / "test.pid")
        launcher = LocalLauncher(tmp_path / "state-b", pools=[Pool("h200", 1, 1)], poll_s=0.05, gpu_recheck_s=0.1,
                                 stray_confirm_s=b_confirm_s)
        attempt = launcher.launch(_request(_repo(tmp_path / "b", "def execute():\n    pass\n"), tmp_path,
                                           timeout_s=b_timeout_s))
        out, _ = night_a.communicate(timeout=60)
    finally:
        if night_a.poll() is None:
            os.killpg(night_a.pid, signal.SIGKILL)
            night_a.wait()
    a = json.loads(out.strip().splitlines()[-1])
    assert a["outcome"] == "timed_out", out
    assert attempt.outcome == "passed", attempt.reason
    # B got the GPU only once A had killed its timed-out test (the child ignoring SIGTERM kept A killing for its
    # whole grace), and it waited past its own timeout and stray_confirm_s: a B that took A for a stray gave up then
    a_killed = datetime.fromisoformat(a["started_at"]).timestamp() + a["elapsed_s"] + a_grace_s
    assert datetime.fromisoformat(attempt.started_at).timestamp() >= a_killed - 0.01, (a, attempt.started_at)
    assert float(attempt.details["gpu_wait_s"]) > b_timeout_s + b_confirm_s, attempt.details


def _into_the_wait(caplog, after_s: float, act) -> threading.Event:
    """Call ``act`` ``after_s`` into a launch's wait for GPUs, timed from its first "waiting for GPUs" line
    (said once the wait's clock runs: give the launcher a short ``gpu_wait_note_s``, and ``caplog`` the
    launcher's warnings); a timer started before the launch also counted its thread's start and its GPU
    hold's set-up, on a busy machine a good part of the time. Set the returned event to call it off."""
    off = threading.Event()

    def run() -> None:
        deadline = time.monotonic() + 60
        while "waiting for GPUs" not in caplog.text:
            if off.wait(0.05) or time.monotonic() > deadline:
                return
        if not off.wait(after_s):
            act()

    threading.Thread(target=run, daemon=True).start()
    return off


def test_a_holder_that_looks_stray_is_given_time_to_go_before_the_launch_gives_up(tmp_path, caplog):
    """A process without the marker holding the GPU past the test's timeout may be a night between
    killing its test and letting go of its locks: the launch gives up only when it still holds it
    ``stray_confirm_s`` later."""
    import logging

    from pipelines.core.model import Pool

    repo = _repo(tmp_path, "def execute():\n    pass\n")
    lock = try_acquire(host_lock_dir(), "h200", 1, [0], 1)
    assert lock is not None
    holder = subprocess.Popen(["sleep", "600"], pass_fds=lock.fds)
    lock.release()
    ends = threading.Event()
    try:
        launcher = LocalLauncher(tmp_path / "state", pools=[Pool("h200", 1, 1)], poll_s=0.05, gpu_wait_note_s=0.05,
                                 gpu_recheck_s=0.1, stray_confirm_s=3)
        with caplog.at_level(logging.WARNING, logger="pipelines.launch.local"):
            ends = _into_the_wait(caplog, 1.5, holder.kill)  # past the 1 s timeout, within the 3 s to confirm
            attempt = launcher.launch(_request(repo, tmp_path, timeout_s=1))
    finally:
        ends.set()
        holder.kill()
        holder.wait()
    assert attempt.outcome == "passed", attempt.reason
    assert float(attempt.details["gpu_wait_s"]) >= 1.5
