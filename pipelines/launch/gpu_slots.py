"""GPU slots held as ``flock`` locks on per-GPU files, shared by every nightly on this host.

The lock folder belongs to the host, not to a night's state folder: two nights with different
``--home`` folders on one machine still share its GPUs. It is ``$NIGHTLY_GPU_LOCK_DIR``, else
:data:`DEFAULT_LOCK_DIR`; a folder this module creates is world-writable with the sticky bit (as
``/tmp``), and lock files are opened read-only (``flock`` needs no write access), so the nights of
two users on one host lock the same files.

Why the child holds the lock: the lock lives on the open file, and the test process inherits
that file (``pass_fds``). If the night is killed with ``kill -9``, its copy goes away but the
test's copy keeps the GPU locked until the test itself dies, so the next night cannot start a
test on GPUs that are still busy.

The other side of that choice: every process the test starts inherits the lock too, so one that
outlives the test (a daemon that also left the attempt's process group and environment marker)
would keep the GPUs locked. At each attempt's end the launcher kills every process still holding
the attempt's locks (:func:`pipelines.launch.procs.lock_holders`). A launch waits for busy GPUs
(saying every minute who holds them) as long as nightly tests hold them, whichever night's (a
test of another night may rightly run for hours); past the test's own timeout it gives up only
when a process that is not a nightly test holds one (a stray that escaped a kill), naming it.

The night's own process holds its tests' locks too (it takes them, and lets go only once the
attempt's processes are killed and its output read), so a process holding a GPU lock may be a
night: every launcher holds a shared lock on :data:`LAUNCHERS_FILE` of the lock folder while any of
its launches is in progress (:func:`mark_launcher`), and :func:`launcher_pids` lists them for the others to tell it apart
from a stray (its environment carries no attempt marker: a running process cannot add one).

Why take any free slot instead of the dispatcher's choice: two nights (or a night and a
developer) on one host each plan as if the whole pool were theirs; taking whichever slots are
free right now (the requested ones first) shares the host without waiting on a busy slot
while another sits idle.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

LOCK_DIR_ENV = "NIGHTLY_GPU_LOCK_DIR"
#: the host's lock folder when $NIGHTLY_GPU_LOCK_DIR is not set (one per host, whoever runs the night)
DEFAULT_LOCK_DIR = Path("/tmp/nightly-gpu-locks")
#: every nightly launcher process holds a shared ``flock`` on this file of the lock folder while it lives
LAUNCHERS_FILE = "launchers.lock"
#: per lock folder of this process: the open launchers file and how many launches are in progress
_launcher_marks: dict[str, tuple[int, int]] = {}
_marking = threading.Lock()


def host_lock_dir() -> Path:
    """The folder of this host's GPU locks: $NIGHTLY_GPU_LOCK_DIR, else :data:`DEFAULT_LOCK_DIR`."""
    return Path(os.environ.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR)


@dataclass
class HeldSlots:
    """Slots this process holds, with the open lock files to pass to the test."""

    node: int
    slots: tuple[int, ...]
    fds: tuple[int, ...]
    #: the lock files (to find every process that still holds them when the attempt ends)
    paths: tuple[Path, ...] = ()

    def release(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = ()


def lock_path(lock_dir: Path, pool: str, node: int, slot: int) -> Path:
    return lock_dir / f"{pool}-node{node}-gpu{slot}.lock"


def _ensure_dir(lock_dir: Path) -> None:
    """Create the folder for every user of the host (mode 1777, as /tmp); an existing one is left as it is."""
    try:
        lock_dir.mkdir(parents=True)
    except FileExistsError:
        return
    os.chmod(lock_dir, 0o1777)


def check_dir(lock_dir: Path) -> None:
    """Create the lock folder when missing and make (and remove) a file in it, as a launch would;
    raises the ``OSError`` a launch would meet (a file in its place, a folder this user cannot write).
    A folder this user cannot write but whose lock files someone made (an admin's 0755 folder, a
    read-only mount) is fine: flock needs only to open them, so its launchers' file opening is enough."""
    _ensure_dir(lock_dir)
    try:
        fd, probe = tempfile.mkstemp(dir=lock_dir, prefix=".writable-")
    except PermissionError:
        try:
            os.close(os.open(lock_dir / LAUNCHERS_FILE, os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            raise PermissionError(errno.EACCES, "Permission denied", str(lock_dir)) from None
        return
    os.close(fd)
    os.unlink(probe)


def _open(path: Path) -> int:
    """The lock file, read-only; created readable by all. An existing file is opened without O_CREAT:
    in a sticky world-writable folder Linux refuses O_CREAT on another user's file (protected_regular)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:  # another night created it just now
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    os.fchmod(fd, 0o644)  # whatever the umask: other users must be able to open it
    return fd


def mark_launcher(lock_dir: Path) -> None:
    """Say that this process is a nightly launcher until as many :func:`unmark_launcher` calls (one per
    launch in progress): a shared lock on the folder's :data:`LAUNCHERS_FILE`, which the kernel drops
    if the process dies (no record to go stale, a reused pid never inherits it). The file is
    close-on-exec and never passed to a test."""
    key = os.path.realpath(lock_dir)
    with _marking:
        if key in _launcher_marks:
            fd, count = _launcher_marks[key]
            _launcher_marks[key] = (fd, count + 1)
            return
        _ensure_dir(lock_dir)
        fd = _open(lock_dir / LAUNCHERS_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError:
            os.close(fd)
            raise
        _launcher_marks[key] = (fd, 1)


def unmark_launcher(lock_dir: Path) -> None:
    """One launch of this process ended (its GPU locks already let go): the last one drops the mark."""
    key = os.path.realpath(lock_dir)
    with _marking:
        fd, count = _launcher_marks.get(key, (-1, 0))
        if count > 1:
            _launcher_marks[key] = (fd, count - 1)
        elif count == 1:
            del _launcher_marks[key]
            with contextlib.suppress(OSError):
                os.close(fd)


def launchers_path(lock_dir: Path) -> Path:
    """The file every nightly launcher of this lock folder holds a shared lock on (:func:`mark_launcher`)."""
    return lock_dir / LAUNCHERS_FILE


def _try_lock(path: Path) -> int | None:
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def try_acquire(lock_dir: Path, pool: str, count: int, nodes: Sequence[int], gpus_per_node: int,
                prefer: tuple[int, ...] = ()) -> HeldSlots | None:
    """``count`` slots of one node that are free right now, or None; never blocks.

    Nodes are tried in the given order; on each node the preferred slots first, then the rest.
    """
    _ensure_dir(lock_dir)
    for node in nodes:
        order = [s for s in prefer if 0 <= s < gpus_per_node]
        order += [s for s in range(gpus_per_node) if s not in order]
        got: list[tuple[int, int]] = []
        for slot in order:
            fd = _try_lock(lock_path(lock_dir, pool, node, slot))
            if fd is not None:
                got.append((slot, fd))
                if len(got) == count:
                    got.sort()
                    return HeldSlots(node, tuple(s for s, _ in got), tuple(fd for _, fd in got),
                                     tuple(lock_path(lock_dir, pool, node, s) for s, _ in got))
        for _, fd in got:
            os.close(fd)
    return None


def acquire(lock_dir: Path, pool: str, count: int, nodes: Sequence[int], gpus_per_node: int,
            prefer: tuple[int, ...] = (), stop: threading.Event | None = None,
            poll_s: float = 0.2, timeout_s: float | None = None,
            on_wait: Callable[[float], None] | None = None, note_after_s: float = 5.0,
            note_every_s: float = 60.0, keep_waiting: Callable[[], bool] | None = None,
            recheck_s: float = 5.0) -> HeldSlots | None:
    """Like :func:`try_acquire`, polling until enough slots are free; None once ``stop`` is set or
    ``timeout_s`` has passed and ``keep_waiting()`` (asked then and every ``recheck_s`` after) says
    the holders are not worth waiting for. ``on_wait(seconds waited)`` is called after
    ``note_after_s`` of waiting, then every ``note_every_s``: a wait is said, never silent."""
    if count == 0:
        return HeldSlots(nodes[0] if nodes else 0, (), ())
    started = time.monotonic()
    give_up_at = None if timeout_s is None else started + timeout_s
    note_at = started + note_after_s
    while True:
        held = try_acquire(lock_dir, pool, count, nodes, gpus_per_node, prefer)
        if held is not None:
            return held
        now = time.monotonic()
        if give_up_at is not None and now >= give_up_at:
            if keep_waiting is None or not keep_waiting():
                return None
            give_up_at = now + recheck_s
        if on_wait is not None and now >= note_at:
            on_wait(now - started)
            note_at = now + note_every_s
        if stop is not None and stop.wait(poll_s):
            return None
        if stop is None:
            time.sleep(poll_s)
