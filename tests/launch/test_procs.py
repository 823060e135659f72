"""Finding an attempt's processes by what they hold: the write end of its output pipe."""

from __future__ import annotations

import contextlib
import os
import subprocess

from pipelines.launch.procs import pipe_writers


def test_a_pipes_writers_are_found_and_its_readers_are_not():
    read, write = os.pipe()
    inode = os.fstat(read).st_ino
    reader = subprocess.Popen(["sleep", "30"], pass_fds=(read,))
    writer = subprocess.Popen(["sleep", "30"], pass_fds=(write,))
    try:
        assert pipe_writers(inode, exclude=(os.getpid(),)) == [writer.pid]  # this process holds both ends
        assert os.getpid() in pipe_writers(inode)
    finally:
        for proc in (reader, writer):
            proc.kill()
            proc.wait()
        os.close(read)
        os.close(write)
    assert pipe_writers(inode) == []


def test_a_child_of_the_night_between_fork_and_exec_is_no_leftover_holding_its_gpu_lock(tmp_path):
    """When attempt X ends, the night kills what still holds X's GPU lock. A test another thread starts
    meanwhile is, between fork and exec, a copy of the night holding every file of it, X's lock too: it
    must not be killed as X's leftover. A process that exec'd a program (the night's own python) and
    holds the lock is one, and is killed."""
    import fcntl
    import signal
    import sys
    import time

    from pipelines.launch.procs import kill_lock_holders

    lock = tmp_path / "h200-node0-gpu0.lock"
    fd = os.open(lock, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # attempt X's lock, held by the night (this process)
    forked = os.fork()
    if forked == 0:  # a Popen's child before its exec: the night's program, its command line, its files
        try:
            time.sleep(30)
        finally:
            os._exit(0)
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], pass_fds=(fd,))
    try:
        killed = kill_lock_holders([lock])
        assert list(killed) == [leftover.pid]
        assert leftover.wait(timeout=10) == -signal.SIGKILL
        assert os.waitpid(forked, os.WNOHANG) == (0, 0)  # still running, never signalled
    finally:
        os.close(fd)
        for pid in (forked, leftover.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(forked, 0)
        leftover.wait()


def test_a_pid_or_group_no_process_can_have_is_gone_and_ending_it_is_a_no_op(tmp_path):
    """A damaged record's pid (`99999999999999999999`) raised OverflowError out of os.kill and os.killpg, and
    out of the night's start: a build record's owner or group, a `.partial-<pid>` folder of the cache."""
    import json

    from pipelines.launch.procs import kill_attempt, pid_alive
    from pipelines.storage.cache import AssetCache

    assert pid_alive(99999999999999999999) is False
    assert kill_attempt("no-such-token", 2**63) == []
    cache = AssetCache(tmp_path / "c")
    partial = tmp_path / "c" / "models" / ".m.partial-99999999999999999999"
    partial.mkdir(parents=True)
    cache.running_dir.mkdir(parents=True)
    (cache.running_dir / "b.json").write_text(json.dumps({"owner_pid": 99999999999999999999, "token": "t"}))
    assert cache.clean_partials() == [partial] and cache.reap_builds() == []
    assert not partial.exists() and not list(cache.running_dir.iterdir())


def test_a_record_naming_init_s_or_the_night_s_own_group_never_has_it_signalled(monkeypatch):
    """A damaged or hostile running record's pgid (1, or the night's own group) reached os.killpg in
    kill_attempt's last sweep: a SIGKILL to init's group or to the night itself."""
    from pipelines.launch import procs

    sent = []
    monkeypatch.setattr(procs.os, "killpg", lambda group, sig: sent.append(group))
    monkeypatch.setattr(procs, "marked_pids", lambda token: [])
    for pgid in (1, os.getpgrp()):
        procs.kill_attempt("t", pgid)
        procs.signal_attempt("t", pgid, 9)
    assert sent == []
    procs.kill_attempt("t", 4_000_000)  # any other group is still swept
    assert set(sent) == {4_000_000}
