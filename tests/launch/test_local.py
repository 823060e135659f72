"""The local launcher: outcomes, timeouts that kill the whole process group, GPU slots, logs."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from pipelines.launch.base import LaunchRequest, tail
from pipelines.launch.local import LocalLauncher
from tests.conftest import make_test


def wait_until(done, limit_s: float = 60) -> bool:
    """Poll ``done()`` until true; the limit only stops a hang (a loaded machine is slow, not wrong)."""
    deadline = time.monotonic() + limit_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def dead(pid: int) -> bool:
    try:
        return "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]  # a zombie waits for its reaper only
    except FileNotFoundError:
        return True


def _repo(tmp_path: Path, body: str) -> Path:
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_x.py").write_text(textwrap.dedent(body))
    return repo


def _request(repo: Path, tmp_path: Path, timeout_s: int = 30, slots=(0, 1), **kw) -> LaunchRequest:
    test = make_test(id="tests/test_x.py", path="tests/test_x.py", gpus=len(slots))
    return LaunchRequest(test=test, repo_path=repo, timeout_s=timeout_s, log_path=tmp_path / "logs" / "x.log",
                         pool="h200", gpu_slots=tuple(slots), **kw)


def test_execute_runs_without_prepare_and_passes(tmp_path):
    repo = _repo(tmp_path, """
        import os
        def prepare():
            raise SystemExit("prepare must not run: the assets did its work")
        def execute():
            print("gpus", os.environ["CUDA_VISIBLE_DEVICES"], "marker", os.environ["MARK"])
        if __name__ == "__main__":
            prepare(); execute()
    """)
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path, env={"MARK": "m1"}))
    assert attempt.outcome == "passed", tail(attempt.log_path)
    assert "gpus 0,1 marker m1" in Path(attempt.log_path).read_text()
    assert attempt.gpu_slots == (0, 1) and attempt.node == "local-h200-0"


def test_a_failing_execute_is_failed_with_its_error(tmp_path):
    repo = _repo(tmp_path, """
        def execute():
            raise AssertionError("loss did not go down: 1.0 -> 1.2")
    """)
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path))
    assert attempt.outcome == "failed"
    assert attempt.exit_code == 1
    assert "loss did not go down" in attempt.reason


def test_sys_exit_256_passes_as_python3_file_exits_0_with_it(tmp_path):
    repo = _repo(tmp_path, """
        import sys
        if __name__ == "__main__":
            sys.exit(256)  # the OS keeps the low 8 bits: `python3 FILE` exits 0, green in CI
    """)
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path))
    assert (attempt.outcome, attempt.exit_code, attempt.reason) == ("passed", 0, ""), tail(attempt.log_path)


def test_a_test_that_skips_itself_with_exit_0_before_execute_is_failed_as_running_no_test(tmp_path):
    """`python3 FILE` in CI exits 0 (green) when the model is missing; a nightly that verified nothing is not."""
    repo = _repo(tmp_path, """
        import os, sys
        def prepare():
            print("downloading")
        def execute():
            raise SystemExit("accuracy 0.1 < 0.8")
        if __name__ == "__main__":
            prepare()
            if not os.path.exists("/nonexistent/models/tiny-lm"):
                print("model missing; skipping")
                sys.exit(0)
            execute()
    """)
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path))
    assert (attempt.outcome, attempt.exit_code) == ("failed", 1), tail(attempt.log_path)
    assert attempt.reason.startswith("tests/test_x.py: ran no test: it exited 0 at line 11 (`sys.exit(0)`), before its "
                                     '`if __name__ == "__main__":` block (line 7) ran execute() (line 5)'), attempt.reason
    assert "model missing; skipping" in Path(attempt.log_path).read_text()


def test_a_completion_record_that_says_failed_is_the_reason_even_when_the_process_exited_0(tmp_path):
    result_path = tmp_path / "logs" / "x.result.json"
    repo = _repo(tmp_path, """
        import json, os
        def execute():  # leaves a finished record that says not ok, then exits 0
            record = {"ok": False, "exit_code": 1, "finished": True, "token": os.environ["NIGHTLY_ATTEMPT_TOKEN"],
                      "pid": os.getpid()}
            open(os.environ["RESULT"], "w").write(json.dumps(record))
            os._exit(0)
    """)
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path, env={"RESULT": str(result_path)}))
    assert attempt.outcome == "failed"
    assert attempt.reason == ("the wrapper's completion record says the test failed (exit code 1) though its "
                              "process exited 0")


@pytest.mark.slow  # waits out a real 5 s timeout
def test_a_hanging_test_is_killed_with_its_children_at_the_timeout(tmp_path):
    repo = _repo(tmp_path, """
        import subprocess, sys, time
        def execute():
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            open("child.pid", "w").write(str(child.pid))
            time.sleep(600)
    """)
    t0 = time.monotonic()
    attempt = LocalLauncher(tmp_path / "state", kill_grace_s=1).launch(_request(repo, tmp_path, timeout_s=5))
    assert attempt.outcome == "timed_out"
    assert attempt.elapsed_s >= 5
    # killed at its timeout, not when its 600 s sleep ends: ~6 s idle, far more on a loaded machine
    assert time.monotonic() - t0 < 300
    child = int((repo / "child.pid").read_text())
    assert wait_until(lambda: dead(child)), "the child outlived its test"


def test_a_timed_out_tests_log_says_so_in_the_runners_words_and_what_was_killed(tmp_path):
    from pipelines.core.history.joblog import read_ci_log

    repo = _repo(tmp_path, """
        import time
        def execute():
            print("training step 1", flush=True)
            time.sleep(600)
    """)
    attempt = LocalLauncher(tmp_path / "state", kill_grace_s=0.5).launch(_request(repo, tmp_path, timeout_s=1))
    assert attempt.outcome == "timed_out"
    lines = Path(attempt.log_path).read_text().splitlines()
    assert "TIMEOUT: tests/test_x.py after 1 seconds" in lines  # as the framework's runner prints it
    killed = next(line for line in lines if line.startswith("# nightly: timed out after 1 s: killed 1 process(es) "))
    assert "wrapper.py --file tests/test_x.py" in killed, killed
    # a maintainer who feeds the attempt's log to `nightly history import` is told what it is, not that it is cut
    parsed = read_ci_log(Path(attempt.log_path).read_text())
    assert parsed.attempts == () and len(parsed.refused) == 1, parsed.refused
    assert "a nightly attempt log" in parsed.refused[0][2] and "cut off" not in parsed.refused[0][2]


def test_a_missing_execute_function_fails_with_a_message_that_says_so(tmp_path):
    # a prepare()/execute() test without its execute(); a plain script without both runs as `python3 FILE`
    repo = _repo(tmp_path, "def prepare():\n    pass\n")
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path))
    assert attempt.outcome == "failed"
    assert "has no function execute()" in attempt.reason


def test_test_data_never_reaches_a_shell(tmp_path):
    repo = _repo(tmp_path, "def execute():\n    pass\n")
    hostile = make_test(id="tests/test_x.py", path="tests/test_x.py", args=("; touch pwned", "$(touch pwned2)"))
    req = LaunchRequest(test=hostile, repo_path=repo, timeout_s=30, log_path=tmp_path / "l.log", gpu_slots=(0,))
    attempt = LocalLauncher(tmp_path / "state").launch(req)
    assert attempt.outcome == "passed"
    assert not any(p.name.startswith("pwned") for p in repo.iterdir())
    assert os.path.exists(tmp_path / "l.log")


def test_busy_requested_slots_are_swapped_for_free_ones_of_the_pool(tmp_path):
    from pipelines.core.model import Pool
    from pipelines.launch.gpu_slots import host_lock_dir, try_acquire

    repo = _repo(tmp_path, """
        import os
        def execute():
            print("gpus", os.environ["CUDA_VISIBLE_DEVICES"])
    """)
    state = tmp_path / "state"
    other = try_acquire(host_lock_dir(), "h200", 2, [0], 8, prefer=(0, 1))  # another night holds 0 and 1
    assert other is not None and other.slots == (0, 1)
    launcher = LocalLauncher(state, pools=[Pool("h200", 1, 8)])
    attempt = launcher.launch(_request(repo, tmp_path, slots=(0, 1)))
    other.release()
    assert attempt.outcome == "passed", tail(attempt.log_path)
    assert attempt.gpu_slots == (2, 3)
    assert "gpus 2,3" in Path(attempt.log_path).read_text()


def test_a_test_needing_more_gpus_than_a_node_has_is_an_infra_error_not_a_wait(tmp_path):
    from pipelines.core.model import Pool

    repo = _repo(tmp_path, "def execute():\n    pass\n")
    attempt = LocalLauncher(tmp_path / "state", pools=[Pool("h200", 2, 4)]).launch(
        _request(repo, tmp_path, slots=tuple(range(8))))
    assert attempt.outcome == "infra_error"
    assert attempt.reason == "needs 8 GPUs but a h200 node has 4"


def test_interrupt_kills_a_running_test_and_records_it_as_interrupted(tmp_path):
    import threading

    repo = _repo(tmp_path, """
        import os, time
        def execute():
            open("pid", "w").write(str(os.getpid()))
            time.sleep(600)
    """)
    launcher = LocalLauncher(tmp_path / "state", kill_grace_s=1)
    out = []
    t = threading.Thread(target=lambda: out.append(launcher.launch(_request(repo, tmp_path, timeout_s=600))))
    t.start()
    assert wait_until(lambda: (repo / "pid").exists() and (repo / "pid").read_text()), "the test never started"
    assert launcher.interrupt() == ["tests/test_x.py"]
    t.join(timeout=120)
    (attempt,) = out
    assert attempt.outcome == "interrupted"
    assert attempt.reason == "the night was interrupted; the test's processes were killed"
    said = [line for line in Path(attempt.log_path).read_text().splitlines() if line.startswith("# nightly: interrupted")]
    assert len(said) == 1 and "killed 1 process(es) of the test: PID" in said[0], said
    assert not Path(f"/proc/{(repo / 'pid').read_text()}/environ").exists()
    assert launcher.launch(_request(repo, tmp_path)).outcome == "interrupted"  # nothing new starts


#: how a test ends of the signal that stops its night too: killed by it, a runner's 128+N, SIGINT's
#: KeyboardInterrupt, a handler of its own (torch elastic's SignalException: exit 1; ``sys.exit(signum)``: exit 15)
STOP_DEATHS = {"sigterm": "os.kill(os.getpid(), signal.SIGTERM)", "exit 143": "os._exit(143)",
               "sigint": "os.kill(os.getpid(), signal.SIGINT); time.sleep(600)",
               "handler raises": "signal.signal(signal.SIGTERM, _raise); os.kill(os.getpid(), signal.SIGTERM); time.sleep(600)",
               "handler exits 15": "signal.signal(signal.SIGTERM, lambda n, _: sys.exit(n)); os.kill(os.getpid(), signal.SIGTERM); time.sleep(600)",
               "sigkill": "os.kill(os.getpid(), signal.SIGKILL)", "exit 1": "raise AssertionError('loss went up')"}


def _dies(tmp_path: Path, how: str) -> Path:
    return _repo(tmp_path, f"""
        import os, signal, sys, time
        class SignalException(Exception):
            pass
        def _raise(signum, frame):
            raise SignalException(f"Process {{os.getpid()}} got signal: {{signum}}")
        def execute():
            open("pid", "w").write(str(os.getpid()))
            while not os.path.exists("go"):
                time.sleep(0.01)
            {STOP_DEATHS[how]}
    """)


def test_no_test_starts_once_its_night_noted_a_stop_signal(tmp_path):
    """A test dispatched just before the signal (waiting for its GPUs or inputs) does not start in the half
    second before the night acts on it (interrupt()): nothing new starts from the moment the signal came."""
    repo = _repo(tmp_path, """
        from pathlib import Path
        Path(__file__).with_name("ran").touch()
    """)
    launcher = LocalLauncher(tmp_path / "state")
    launcher.signal_arrived(signal.SIGTERM, time.monotonic())  # the night's handler, as the signal came
    attempt = launcher.launch(_request(repo, tmp_path))
    assert (attempt.outcome, attempt.elapsed_s) == ("interrupted", 0.0), attempt
    assert not (repo / "tests" / "ran").exists() and not Path(attempt.log_path).exists()


def _launch_until_dead(tmp_path: Path, how: str, before=None, **kw):
    """The test started and ended by itself; the launcher (its launch() in a thread) and the thread.
    ``before(launcher)`` runs once the test runs, before it ends (the night noting the signal as it came)."""
    import threading

    repo = _dies(tmp_path, how)
    launcher = LocalLauncher(tmp_path / "state", kill_grace_s=1, **kw)
    out: list = []
    t = threading.Thread(target=lambda: out.append(launcher.launch(_request(repo, tmp_path, timeout_s=600))))
    t.start()
    assert wait_until(lambda: (repo / "pid").exists() and (repo / "pid").read_text()), "the test never started"
    if before is not None:
        before(launcher)
    (repo / "go").touch()
    assert wait_until(lambda: dead(int((repo / "pid").read_text()))), "the test did not end"
    return launcher, t, out


@pytest.mark.parametrize("how", ["sigterm", "exit 143", "sigint", "handler raises", "handler exits 15"])
def test_a_test_ended_by_the_signal_that_stops_its_night_is_interrupted_not_failed(tmp_path, how):
    """One signal to every process (systemctl stop, kill -TERM -1) may end the test before the night
    acts on it: the night noted the signal as it came (its handler), and its interrupt() coming after the
    test ended still makes the attempt interrupted, however the test ended of it."""
    arrived: list[float] = []

    def noted(launcher: LocalLauncher) -> None:  # the night's handler, as the same signal reaches the test
        arrived.append(time.monotonic())
        launcher.signal_arrived(signal.SIGTERM, arrived[0])

    launcher, t, out = _launch_until_dead(tmp_path, how, before=noted, signal_settle_s=60)  # the limit stops a hang
    launcher.interrupt(signum=signal.SIGTERM, at=arrived[0])  # the night acts on it a moment later
    t.join(timeout=120)
    (attempt,) = out
    assert (attempt.outcome, attempt.reason) == ("interrupted", "the night was interrupted; the test's processes were killed")
    said = [line for line in Path(attempt.log_path).read_text().splitlines() if line.startswith("# nightly: interrupted")]
    assert len(said) == 1 and "(the night was interrupted by SIGTERM, which reached the test too" in said[0], said


@pytest.mark.parametrize("how, stop", [
    ("sigkill", "a signal 0.5 s later"),  # the kernel's OOM kill, then Ctrl-C (or systemd's OOMPolicy=stop)
    ("exit 1", "a signal 3 s later"),  # a real failure, then Ctrl-C
    ("sigterm", "an error"),  # someone's kill of the test alone, then an error stops the night
])
def test_a_test_that_ended_by_itself_before_its_night_was_stopped_is_failed(tmp_path, how, stop):
    """A stop that came later than the test's end (by over a second), that is not a signal, or a SIGKILL
    (a stop sends SIGTERM first: SIGKILL is an OOM kill or someone's kill -9) relabels nothing."""
    launcher, t, out = _launch_until_dead(tmp_path, how, signal_settle_s=60)
    if stop == "an error":
        launcher.interrupt()
    else:
        time.sleep(float(stop.split()[2]))
        launcher.interrupt(signum=signal.SIGINT, at=time.monotonic())
    t.join(timeout=120)
    (attempt,) = out
    expected = {"sigkill": ("killed by signal 9", -9), "exit 1": ("AssertionError: loss went up", 1),
                "sigterm": ("killed by signal 15", -15)}[how]
    assert (attempt.outcome, attempt.reason, attempt.exit_code) == ("failed", *expected)
    assert "# nightly: interrupted" not in Path(attempt.log_path).read_text()


def test_a_test_killed_by_a_signal_while_its_night_goes_on_is_failed(tmp_path):
    """Someone killing the test alone: failed, once the night had time to show it stops; an OOM kill
    (SIGKILL) at once."""
    repo = _dies(tmp_path, "sigterm")
    (repo / "go").touch()  # it dies at once
    t0 = time.monotonic()
    attempt = LocalLauncher(tmp_path / "state", signal_settle_s=0.5).launch(_request(repo, tmp_path))
    assert (attempt.outcome, attempt.reason, attempt.exit_code) == ("failed", "killed by signal 15", -15)
    assert time.monotonic() - t0 >= 0.5
    oom = _dies(tmp_path / "oom", "sigkill")
    (oom / "go").touch()
    attempt = LocalLauncher(tmp_path / "state2", signal_settle_s=60).launch(_request(oom, tmp_path / "oom"))
    assert (attempt.outcome, attempt.reason, attempt.exit_code) == ("failed", "killed by signal 9", -9)


def test_the_log_is_streamed_and_the_running_record_removed_at_the_end(tmp_path):
    repo = _repo(tmp_path, """
        def execute():
            print("line one")
            print("line two", end="")
    """)
    lines: list[str] = []
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path), on_log=lines.append)
    assert attempt.outcome == "passed"
    assert [line for line in lines if not line.startswith("# nightly wrapper:")] == ["line one", "line two"]
    assert list((tmp_path / "state" / "running").glob("*.json")) == []


def test_when_too_few_slots_are_free_the_launch_waits_for_one(tmp_path):
    import threading

    from pipelines.core.model import Pool
    from pipelines.launch.gpu_slots import host_lock_dir, try_acquire

    repo = _repo(tmp_path, "def execute():\n    pass\n")
    state = tmp_path / "state"
    busy = try_acquire(host_lock_dir(), "h200", 2, [0], 2)  # another night holds the whole node
    assert busy is not None
    launcher = LocalLauncher(state, pools=[Pool("h200", 1, 2)], poll_s=0.05)
    out = []
    t = threading.Thread(target=lambda: out.append(launcher.launch(_request(repo, tmp_path, slots=(0,)))))
    t.start()
    time.sleep(0.5)
    assert not (tmp_path / "logs" / "x.log").exists()  # not started on a GPU someone else holds
    busy.release()
    t.join(timeout=60)
    assert out and out[0].outcome == "passed" and out[0].gpu_slots == (0,)


def test_a_test_starts_when_its_gpus_are_held_and_the_wait_is_recorded_apart(tmp_path, caplog):
    """started_at is when the test got its GPUs, not when it began to wait for them (the report's timeline)."""
    import logging
    import threading
    from datetime import UTC, datetime

    from pipelines.core.model import Pool
    from pipelines.launch.gpu_slots import host_lock_dir, try_acquire

    repo = _repo(tmp_path, "def execute():\n    pass\n")
    busy = try_acquire(host_lock_dir(), "h200", 1, [0], 1)  # another night holds the only GPU
    assert busy is not None
    launcher = LocalLauncher(tmp_path / "state", pools=[Pool("h200", 1, 1)], poll_s=0.05, gpu_wait_note_s=0.05)
    out = []
    t = threading.Thread(target=lambda: out.append(launcher.launch(_request(repo, tmp_path, slots=(0,)))))
    try:
        with caplog.at_level(logging.WARNING, logger="pipelines.launch.local"):
            t.start()
            # the GPUs are let go 1.5 s into the wait: its first "waiting for GPUs" line comes once its clock
            # runs (a fixed sleep from the thread's start also counted the thread's start and the GPU hold's set-up)
            assert wait_until(lambda: "waiting for GPUs" in caplog.text), "the launch never waited for its GPUs"
            time.sleep(1.5)
            released = datetime.now(UTC).replace(microsecond=0)
    finally:
        busy.release()
    t.join(timeout=60)
    attempt = out[0]
    assert attempt.outcome == "passed", tail(attempt.log_path)
    assert datetime.fromisoformat(attempt.started_at) >= released
    assert float(attempt.details["gpu_wait_s"]) >= 1.5


def test_nights_with_different_homes_share_the_hosts_gpu_locks(tmp_path):
    """Two nights on one host with their own --home: the second never gets the GPUs the first holds."""
    import threading

    from pipelines.core.model import Pool

    repo = _repo(tmp_path, """
        import os, time
        def execute():
            if not os.path.exists("second"):
                open("first.pid", "w").write(str(os.getpid()))
                while not os.path.exists("release"):
                    time.sleep(0.02)
    """)
    first = LocalLauncher(tmp_path / "home1", pools=[Pool("h200", 1, 8)])
    out = []
    t = threading.Thread(target=lambda: out.append(first.launch(_request(repo, tmp_path, slots=(0, 1)))))
    t.start()
    assert wait_until(lambda: (repo / "first.pid").exists()), "the first night's test never started"
    (repo / "second").touch()
    second = LocalLauncher(tmp_path / "home2", pools=[Pool("h200", 1, 8)])
    attempt = second.launch(_request(repo, tmp_path, slots=(0, 1)))
    (repo / "release").touch()
    t.join(timeout=60)
    assert attempt.outcome == "passed" and out[0].outcome == "passed", tail(attempt.log_path)
    assert (out[0].gpu_slots, attempt.gpu_slots) == ((0, 1), (2, 3))


def test_the_lock_folder_is_the_hosts_and_usable_by_every_user(tmp_path, monkeypatch):
    from pipelines.launch import gpu_slots

    monkeypatch.delenv(gpu_slots.LOCK_DIR_ENV)
    assert gpu_slots.host_lock_dir() == gpu_slots.DEFAULT_LOCK_DIR  # not under any --home
    lock_dir = tmp_path / "locks"
    monkeypatch.setenv(gpu_slots.LOCK_DIR_ENV, str(lock_dir))
    old = os.umask(0o077)
    try:
        held = gpu_slots.try_acquire(gpu_slots.host_lock_dir(), "h200", 1, [0], 8)
    finally:
        os.umask(old)
    assert held is not None
    held.release()
    assert lock_dir.stat().st_mode & 0o7777 == 0o1777  # as /tmp: any user adds locks, none removes another's
    assert {f.stat().st_mode & 0o777 for f in lock_dir.iterdir()} == {0o644}  # flock needs read access only


def test_a_cpu_only_test_needs_no_gpu_lock_folder(tmp_path, monkeypatch):
    """A 0-GPU test takes no GPU lock, so a lock folder it cannot use (another user's, or a path under
    a file) is none of its business: it runs and passes."""
    from pipelines.launch import gpu_slots

    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(gpu_slots.LOCK_DIR_ENV, str(blocker / "locks"))
    repo = _repo(tmp_path, "def execute():\n    print('ok')\n")
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path, slots=()))
    assert attempt.outcome == "passed", attempt.reason


def test_a_gpu_lock_folder_that_is_a_file_fails_the_gpu_test_saying_so_not_advising_chmod(tmp_path, monkeypatch):
    """The launch's own words, by cause: a file where the folder should be is no chmod's business."""
    from pipelines.launch import gpu_slots

    blocker = tmp_path / "passwd"
    blocker.write_text("")
    monkeypatch.setenv(gpu_slots.LOCK_DIR_ENV, str(blocker))
    repo = _repo(tmp_path, "def execute():\n    print('ok')\n")
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path, slots=(0,)))
    assert attempt.outcome == "infra_error"
    assert attempt.reason.startswith(f"{blocker}: the host's GPU lock folder is not a folder; ")
    assert "chmod" not in attempt.reason


def test_a_launchers_file_that_cannot_be_made_is_a_warning_and_the_gpu_test_still_runs(tmp_path, monkeypatch, caplog):
    """The GPU locks are what a launch needs; the launchers file only tells other nights this process
    apart from a stray, so failing to make it is said, not a failed test."""
    import logging

    from pipelines.launch import gpu_slots

    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / gpu_slots.LAUNCHERS_FILE).symlink_to(tmp_path / "nowhere" / "launchers.lock")  # cannot be opened or made
    monkeypatch.setenv(gpu_slots.LOCK_DIR_ENV, str(locks))
    repo = _repo(tmp_path, "def execute():\n    print('ok')\n")
    with caplog.at_level(logging.WARNING, logger="pipelines.launch.local"):
        attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path, slots=(0,)))
    assert attempt.outcome == "passed", attempt.reason
    assert f"{locks / gpu_slots.LAUNCHERS_FILE}: cannot mark this night as a launcher" in caplog.text


@pytest.mark.parametrize(("test_env", "night_env", "named"), [
    ((("a=b", "x"),), {}, "'a=b'"),                    # a template matrix key turned into a variable
    ((), {"A=B": "1"}, "'A=B'"),                       # the night's env (repos.yaml env:, --env)
    ((("GOOD", "nul\0here"),), {}, "'GOOD'"),          # a value Popen cannot pass
])
def test_an_environment_the_os_refuses_fails_that_test_only_naming_the_variable(tmp_path, test_env, night_env, named):
    repo = _repo(tmp_path, """
        def execute():
            print("ran")
    """)
    test = make_test(id="tests/test_x.py", path="tests/test_x.py", gpus=1, env=test_env)
    req = LaunchRequest(test=test, repo_path=repo, timeout_s=30, log_path=tmp_path / "logs" / "x.log",
                        pool="h200", gpu_slots=(0,), env=night_env)
    attempt = LocalLauncher(tmp_path / "state").launch(req)
    assert attempt.outcome == "infra_error" and attempt.details["retriable"] == "false"
    assert named in attempt.reason and "could not start the test" in attempt.reason
    assert named in Path(attempt.log_path).read_text()
    assert not list((tmp_path / "state").glob("running/*")), "no running record may say it ran"


def test_an_attempt_starts_on_the_timeline_to_the_millisecond_not_the_whole_second(tmp_path, monkeypatch):
    """started_at was cut to the second: a test started half a second after another was drawn at the
    same second as it (or a whole second later), and a retry on a freed GPU started before the test
    that held it had ended on the report's Gantt chart."""
    import dataclasses
    import threading
    from datetime import datetime

    from pipelines.core.model import Pool
    from pipelines.core.report import build_report
    from pipelines.launch.gpu_hold import GpuHold

    repo = _repo(tmp_path, "import time\n\ndef execute():\n    time.sleep(1.0)\n")
    launcher = LocalLauncher(tmp_path / "state", pools=[Pool("h200", 1, 2)], poll_s=0.05)
    out: dict = {}
    # per launch, time.time() as its GPUs were held (GpuHold.wait returned) and as the attempt began to run
    # on them (LocalLauncher._run, handed started_at): the stamp falls between, whatever the load
    held_at: dict[str, float] = {}
    run_at: dict[str, float] = {}
    current = threading.local()
    real_wait, real_run = GpuHold.wait, LocalLauncher._run

    def wait(self, *args, **kwargs):
        held = real_wait(self, *args, **kwargs)
        held_at[current.name] = time.time()
        return held

    def run(self, *args, **kwargs):
        run_at[current.name] = time.time()
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(GpuHold, "wait", wait)
    monkeypatch.setattr(LocalLauncher, "_run", run)

    def launch(name: str, slot: int) -> None:
        current.name = name
        out[name] = launcher.launch(dataclasses.replace(
            _request(repo, tmp_path, slots=(slot,)), log_path=tmp_path / "logs" / f"{name}.log"))

    first = threading.Thread(target=launch, args=("a", 0))
    first.start()
    time.sleep(0.5)
    launch("b", 1)
    first.join(timeout=60)
    assert {a.outcome for a in out.values()} == {"passed"}, [tail(a.log_path) for a in out.values()]
    started_ms = {name: round(datetime.fromisoformat(a.started_at).timestamp() * 1000) for name, a in out.items()}
    for name in out:  # to the millisecond (cut to the second, it fell up to 1 s before its GPUs were held)
        assert int(held_at[name] * 1000) <= started_ms[name] <= int(run_at[name] * 1000), (
            name, out[name].started_at, held_at[name], run_at[name])
    summary = {"night": "n", "attempts": [dataclasses.asdict(out["a"]), dataclasses.asdict(out["b"])]}
    a, b = build_report(summary).gantt
    # the report's timeline keeps those milliseconds (the half second between the two, not 0 or 1 s)
    assert b.start_s - a.start_s == pytest.approx((started_ms["b"] - started_ms["a"]) / 1000, abs=1e-6), (a, b)
