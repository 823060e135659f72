"""Find and kill every process of one attempt, wherever it went.

A test's process group is not enough: a daemon that double-forks and calls ``setsid`` leaves
the group, and after a ``kill -9`` of the night its children are re-parented to PID 1. Every
process the launcher starts carries ``NIGHTLY_ATTEMPT_TOKEN=<uuid>`` in its environment, which
children inherit across fork, exec and setsid; scanning ``/proc/*/environ`` for it finds them all.
A process that wipes its own environment at exec escapes that scan, and one that also calls
``setsid`` leaves the process group too; if it still holds the attempt's GPU locks (inherited with
the test's open lock files), :func:`lock_holders` finds it by those, and if it still writes to the
test's output (stdout and stderr, inherited as they are by default), :func:`pipe_writers` finds it by
that pipe. One that escapes all four (no marker, its own session, the lock files and the output
closed) holds nothing of the night: no GPU lock, and no say in the attempt's log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

MARKER = "NIGHTLY_ATTEMPT_TOKEN"

#: held around the launcher's process starts and around each scan for an ended attempt's lock holders:
#: a child between fork and exec holds a copy of every open file of the night, the locks of an attempt
#: being ended included, and must not be taken for a leftover of that attempt (see :func:`start_process`)
_STARTING = threading.Lock()


def start_process(argv: Sequence[str], **popen_kwargs) -> subprocess.Popen:
    """``subprocess.Popen`` that no lock-holder scan of this process overlaps: Popen returns only once
    the child has exec'd (or failed to), and exec closes the night's close-on-exec lock files, so a scan
    never sees the new child with the copy of another attempt's GPU lock it briefly held after fork."""
    with _STARTING:
        return subprocess.Popen(argv, **popen_kwargs)


def marked_pids(token: str, proc: Path = Path("/proc")) -> list[int]:
    """Live processes whose environment carries this attempt's token (zombies excluded)."""
    needle = f"{MARKER}={token}".encode()
    found = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
            if needle not in env.split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone, or another user's process
            continue
        if state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


#: no pid or process group is above it: Linux's PID_MAX_LIMIT on 64-bit (``/proc/sys/kernel/pid_max`` is at
#: most this); a record naming a larger one is damaged
PID_LIMIT = 4_194_304


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's too); a pid no C int holds (a damaged record's
    ``99999999999999999999``) names none, not an OverflowError out of the night."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def start_time(pid: int) -> str:
    """The kernel's start time of ``pid`` (clock ticks since boot): tells a reused pid apart."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def signal_attempt(token: str, pgid: int | None, sig: int) -> list[int]:
    """Send ``sig`` to the attempt's process group and to every marked process and its group."""
    hit = marked_pids(token)
    groups = {pgid} if pgid else set()
    for pid in hit:
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(pid))
    groups -= {0, 1, os.getpgrp()}  # never init's group nor our own (a damaged record may name either)
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError, OverflowError):  # a damaged record's pgid
            os.killpg(group, sig)
    for pid in hit:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    return hit


def kill_attempt(token: str, pgid: int | None, grace_s: float = 0.0, rounds: int = 20) -> list[int]:
    """SIGTERM (when ``grace_s`` > 0), wait, then SIGKILL until no marked process is left.

    Returns the pids that were still alive when the kill started (for the log).
    """
    first = marked_pids(token)
    if grace_s > 0 and first:
        signal_attempt(token, pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and marked_pids(token):
            time.sleep(0.05)
    for _ in range(rounds):
        if not signal_attempt(token, pgid, signal.SIGKILL):
            break
        time.sleep(0.05)
    if pgid and pgid > 1 and pgid != os.getpgrp():  # whatever is left in the group without the marker
        with contextlib.suppress(ProcessLookupError, PermissionError, OverflowError):
            os.killpg(pgid, signal.SIGKILL)
    return first


def lock_holders(paths: Sequence[Path], exclude: Sequence[int] = (), proc: Path = Path("/proc")) -> list[int]:
    """Live processes holding the ``flock`` of one of ``paths``, except the pids in ``exclude``."""
    return sorted({pid for pids in holders_by_lock(paths, exclude, proc).values() for pid in pids})


def holders_by_lock(paths: Sequence[Path], exclude: Sequence[int] = (),
                    proc: Path = Path("/proc")) -> dict[str, list[int]]:
    """For each of ``paths`` (real path) held by a process this user can see, the processes holding its ``flock``.

    A flock belongs to the open file that took it, which every process that inherited the file
    shares; ``/proc/PID/fdinfo/FD`` shows a ``lock:`` line only on such a file. So a process of
    another night that merely opened a lock file to try it is never taken for a holder. Nor is a child
    of this process between fork and exec (:func:`forked_not_yet_execed`): it holds a copy of every
    file this process has open, close-on-exec lock files too, until its exec closes them.
    """
    targets = {os.path.realpath(p) for p in paths}
    found: dict[str, list[int]] = {}
    if not targets:  # a test without GPUs holds no lock
        return found
    for pid, target, info in _open_files(proc, exclude, targets.__contains__):
        if any(line.startswith("lock:") for line in info.splitlines()) and not forked_not_yet_execed(pid, proc):
            pids = found.setdefault(target, [])
            if pid not in pids:
                pids.append(pid)
    return found


def forked_not_yet_execed(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether ``pid`` is a child of this process that has not exec'd yet (a ``subprocess.Popen`` of any
    thread, e.g. a test's start or a ``git``, between its fork and its exec): its parent is this process
    and its program and command line are still this process's own. A test's leftover never is: it ran
    the test's code, so it was exec'd (the wrapper) or forked by such a process."""
    me = os.getpid()
    try:
        parent = int((proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        if parent != me:
            return False
        return (os.readlink(proc / str(pid) / "exe") == os.readlink(proc / str(me) / "exe")
                and (proc / str(pid) / "cmdline").read_bytes() == (proc / str(me) / "cmdline").read_bytes())
    except (OSError, IndexError, ValueError):
        return False


def _open_files(proc: Path, exclude: Sequence[int],
                wanted: Callable[[str], bool]) -> Iterator[tuple[int, str, str]]:
    """(pid, link target, fdinfo text) of each open file whose target is ``wanted``, of every live
    process this user can see but those in ``exclude``; a process or file gone meanwhile is skipped."""
    skip = {str(pid) for pid in exclude}
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or entry.name in skip:
            continue
        try:
            fds = os.listdir(entry / "fd")
        except OSError:  # gone, or another user's process
            continue
        for fd in fds:
            try:
                target = os.readlink(entry / "fd" / fd)
                if not wanted(target):
                    continue
                info = (entry / "fdinfo" / fd).read_text()
            except OSError:
                continue
            yield int(entry.name), target, info


def pipe_writers(inode: int, exclude: Sequence[int] = (), proc: Path = Path("/proc")) -> list[int]:
    """Live processes, but those in ``exclude``, holding the write end of the pipe ``inode`` (its
    ``os.fstat().st_ino``; ``/proc/PID/fd/N`` links to ``pipe:[INODE]``). The write end only: the
    reader (the night's log pump) is no writer, so a night process that inherited it is never one."""
    found: list[int] = []
    for pid, _, info in _open_files(proc, exclude, f"pipe:[{inode}]".__eq__):
        flags = next((line.split()[1] for line in info.splitlines() if line.startswith("flags:")), "0")
        if (int(flags, 8) & os.O_ACCMODE) != os.O_RDONLY and pid not in found:
            found.append(pid)
    return found


def kill_pipe_writers(inode: int, rounds: int = 20) -> dict[int, str]:
    """SIGKILL every process but this one still writing to the pipe ``inode``: the attempt's output,
    held by a process that left the marker and the group (``start_new_session=True`` with a clean
    environment) and would write into the log after the attempt was judged. Returns the pids found,
    each described (:func:`describe`)."""
    return _kill_until_gone(lambda: pipe_writers(inode, exclude=(os.getpid(),)), rounds)


def _kill_until_gone(find: Callable[[], Sequence[int]], rounds: int) -> dict[int, str]:
    """SIGKILL what ``find`` names, again until it names nothing (a killed process's children may take
    its place) or ``rounds`` run out; returns every pid found, each described (:func:`describe`)."""
    found: dict[int, str] = {}
    for _ in range(rounds):
        left = find()
        if not left:
            break
        for pid in left:
            found.setdefault(pid, describe(pid))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    return found


def lock_taker(pid: int, path: Path, proc: Path = Path("/proc")) -> int | None:
    """Who took the ``flock`` that ``pid`` holds on ``path``: the process that called ``flock()``, as the
    kernel shows it in ``/proc/PID/fdinfo`` (a flock belongs to the open file, so every process that
    inherited it shows the same taker). 0 when the taker is gone and is seen from a nested pid
    namespace (a container); the host's namespace keeps the dead taker's number. None when it cannot
    be read (``pid`` gone, another user's, or no longer holding the lock)."""
    target = os.path.realpath(path)
    try:
        fds = os.listdir(proc / str(pid) / "fd")
    except OSError:
        return None
    for fd in fds:
        try:
            if os.readlink(proc / str(pid) / "fd" / fd) != target:
                continue
            info = (proc / str(pid) / "fdinfo" / fd).read_text()
        except OSError:
            continue
        for line in info.splitlines():
            # lock:\t1: FLOCK  ADVISORY  WRITE 4242 fe:00:2146511 0 EOF
            words = line.split()
            if words[:1] == ["lock:"] and "FLOCK" in words and "->" not in words:
                at = words.index("FLOCK") + 3
                if at < len(words) and words[at].lstrip("-").isdigit():
                    return int(words[at])
    return None


def is_stray(pid: int) -> bool:
    """Whether ``pid`` is known to be no nightly attempt's process (any night's): its environment is
    readable and has no attempt marker, and it is not the test wrapper. One that cannot be read
    (another user's, or one exiting right now) is not called a stray: it cannot be told apart."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    if not env and not cmd:  # exiting: its memory is gone
        return False
    marked = any(v.startswith(f"{MARKER}=".encode()) for v in env.split(b"\0"))
    return not marked and b"pipelines.launch.wrapper" not in cmd and b"pipelines/launch/wrapper.py" not in cmd


def describe(pid: int, limit: int = 80) -> str:
    """``PID 123 (sleep 45)``: a process as a maintainer can find it (its command line, cut)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = ""
    cmd = cmd if len(cmd) <= limit else cmd[: limit - 3] + "..."
    return f"PID {pid} ({cmd})" if cmd else f"PID {pid}"


def kill_lock_holders(paths: Sequence[Path], rounds: int = 20,
                      spare: Callable[[str, list[int]], bool] | None = None) -> dict[int, str]:
    """SIGKILL every process but this one still holding a lock of ``paths``: what an attempt left
    behind that the marker scan and the process group missed (a daemon started with an empty
    environment in its own session). ``spare(path, holders)``, asked of each lock (its real path) and
    its holders at every round, says a lock is no longer the attempt's (someone took it once it was
    free): its holders are left alone. Returns the pids found, each described (:func:`describe`)."""
    me = os.getpid()

    def holders() -> list[int]:
        with _STARTING:  # no test of this night is between fork and exec meanwhile (start_process)
            by_lock = holders_by_lock(paths)
        return sorted({pid for path, pids in by_lock.items() if not (spare and spare(path, pids))
                       for pid in pids if pid != me})

    return _kill_until_gone(holders, rounds)


def attempt_token_of(pid: int) -> str | None:
    """The attempt marker's value in ``pid``'s environment: "" when it has none, None when its
    environment cannot be read (another user's process, or gone)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = f"{MARKER}=".encode()
    for var in env.split(b"\0"):
        if var.startswith(prefix):
            return var[len(prefix):].decode(errors="replace")
    return ""


#: clears the signal mask, then becomes the command (argv[1:]); see :func:`with_signals_unblocked`
_UNBLOCK = ("import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, set()); "
            "os.execv(sys.argv[1], sys.argv[1:])")


def with_signals_unblocked(argv: list[str], env: dict[str, str] | None = None) -> list[str]:
    """``argv``, started through a trampoline that clears the signal mask when this thread blocks any.

    A signal mask survives fork and exec: a build started while ``nightly run`` keeps SIGINT from
    Dagster's helpers (cli/run_console.py) would otherwise run with SIGINT blocked and ignore it.
    The command is looked up on ``env``'s PATH first, so a missing one still fails in the parent
    (FileNotFoundError) exactly as without the trampoline.
    """
    import shutil
    import sys

    if not hasattr(signal, "pthread_sigmask") or not signal.pthread_sigmask(signal.SIG_BLOCK, set()):
        return list(argv)
    path = (env or os.environ).get("PATH", os.defpath)
    found = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=path)
    if not found:
        return list(argv)
    return [sys.executable, "-c", _UNBLOCK, found, *argv[1:]]
