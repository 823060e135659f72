"""Hold GPUs the way a nightly test does: the one sequence a local test attempt and a local checkpoint
conversion go through to hold the host's GPU locks (:mod:`gpu_slots`).

This process is marked as a night's launcher first (another night must not take it for a stray while
it holds GPU locks), the wait says who holds the GPUs, past its timeout it waits on only while nightly
tests or builds hold them (any night's) and gives up on a stray, naming it; at the end the GPUs are let
go, then the mark. What each caller makes of a give-up, a stop, a broken lock folder and the leftovers
it kills stays the caller's (a test's attempt, a conversion's ``BuildError``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pipelines.launch import gpu_slots
from pipelines.launch.procs import describe, holders_by_lock, is_stray, lock_holders, start_time


class GpuHold:
    """``count`` GPUs of one node of ``pool`` (the first of ``nodes`` that has them free), for a
    ``subject`` (a test id, "conversion") as the busy messages name it. Use it as a context: inside,
    :meth:`mark`, then :meth:`wait`; leaving it lets go of the GPUs, then of the launcher mark."""

    def __init__(self, lock_dir: Path, pool: str, count: int, nodes: Sequence[int], per_node: int, *,
                 subject: str, confirm_s: float, log: logging.Logger):
        self.lock_dir = lock_dir
        self.pool = pool
        self.count = count
        self.nodes = list(nodes)
        self.per_node = per_node
        self.subject = subject
        #: a stray must still hold a lock this long after it was first seen before a wait gives up on it
        self.confirm_s = confirm_s
        #: where the waiting messages go (the caller's logger)
        self.log = log
        #: every GPU lock file of these nodes: who holds them is what a wait says and watches
        self.paths = [gpu_slots.lock_path(lock_dir, pool, n, s) for n in self.nodes for s in range(per_node)]
        self.held: gpu_slots.HeldSlots | None = None
        #: how long the last :meth:`wait` waited
        self.waited_s = 0.0
        self._strays: list[int] = []
        self._marked = False

    def __enter__(self) -> GpuHold:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.held is not None:
            self.held.release()
        if self._marked:
            self._marked = False
            gpu_slots.unmark_launcher(self.lock_dir)

    def mark(self) -> None:
        """Say this process is a night's launcher (before any GPU lock is taken, until they are let go), so
        another night does not take it for a stray holding GPUs; raises the lock folder's ``OSError``."""
        gpu_slots.mark_launcher(self.lock_dir)
        self._marked = True

    def busy(self, waited_s: float) -> str:
        """What a wait for busy GPUs says: how long, for what, and who holds them."""
        return (f"{self.subject}: waited {waited_s:.0f} s for {self.count} free GPU(s) of a {self.pool} node "
                f"({self.lock_dir}); {holders_text(self.lock_dir, self.paths)}")

    def wait(self, timeout_s: float, *, stop: threading.Event | None = None, prefer: tuple[int, ...] = (),
             poll_s: float = 0.2, note_after_s: float = 5.0, recheck_s: float = 5.0) -> gpu_slots.HeldSlots | None:
        """The GPUs once free (see :func:`gpu_slots.acquire`), saying who holds them while they are busy. Past
        ``timeout_s`` it waits on only while nightly tests (any night's) hold them: a stray that escaped a kill
        and keeps a lock must not stall the night, another night's long test may. None once ``stop`` is set or
        it gave up on a stray (:meth:`strays_text` names it); raises the lock folder's ``OSError``."""
        started = time.monotonic()
        keep_waiting, self._strays = stray_watch(self.lock_dir, self.paths, self.confirm_s)
        self.held = gpu_slots.acquire(self.lock_dir, self.pool, self.count, self.nodes, self.per_node,
                                      prefer=prefer, stop=stop, poll_s=poll_s, timeout_s=timeout_s,
                                      note_after_s=note_after_s,
                                      on_wait=lambda s: self.log.warning("waiting for GPUs: %s", self.busy(s)),
                                      keep_waiting=keep_waiting, recheck_s=recheck_s)
        self.waited_s = time.monotonic() - started
        return self.held

    def strays_text(self) -> str:
        """The strays a wait gave up on, for its reason ("a process" when they are gone)."""
        return ", ".join(describe(pid) for pid in self._strays) or "a process"


def holders_text(lock_dir: Path, paths: Sequence[Path]) -> str:
    """Who holds the GPU locks ``paths`` of ``lock_dir``, for a maintainer to find (or kill) them."""
    holders = lock_holders(paths)
    if not holders:
        return "their locks are held by processes this user cannot see (another user's night?)"
    mine, nights = os.getpid(), _launchers(lock_dir)

    def who(pid: int) -> str:
        if pid == mine:
            return "this night"
        return f"another night's {describe(pid)}" if pid in nights else describe(pid)

    return "held by " + ", ".join(who(pid) for pid in sorted(holders))


def _launchers(lock_dir: Path) -> set[int]:
    """The nightly launcher processes of this lock folder (any night's, this one's too)."""
    return set(lock_holders([gpu_slots.launchers_path(lock_dir)]))


def stray_holders(lock_dir: Path, paths: Sequence[Path]) -> list[int]:
    """Processes this user can see that hold a GPU lock of ``paths`` where no nightly test and no
    night does (a night's own process holds the locks of the tests it runs until it has killed what
    they left and read their output). A lock whose holders cannot be seen (another user's night) is
    waited for: it cannot be told from a stray."""
    found: set[int] = set()
    nights = _launchers(lock_dir)
    for others in holders_by_lock(paths, exclude=(os.getpid(),)).values():
        if others and all(pid not in nights and is_stray(pid) for pid in others):
            found.update(others)
    return sorted(found)


def stray_watch(lock_dir: Path, paths: Sequence[Path], confirm_s: float) -> tuple[Callable[[], bool], list[int]]:
    """(keep_waiting, strays) for :func:`gpu_slots.acquire`: keep_waiting() says no while a stray
    (:func:`stray_holders`) has held a lock of ``paths`` for ``confirm_s`` (a process being killed
    right now is not one yet); strays then lists them, for the reason of giving up."""
    strays: list[int] = []
    first_seen: dict[tuple[int, str], float] = {}  # (pid, start time): when it first looked stray

    def only_nightly_holders() -> bool:
        now = time.monotonic()
        seen = {(pid, start_time(pid)): pid for pid in stray_holders(lock_dir, paths)}
        for key in set(first_seen) - set(seen):
            del first_seen[key]
        strays[:] = sorted(pid for key, pid in seen.items() if now - first_seen.setdefault(key, now) >= confirm_s)
        return not strays

    return only_nightly_holders, strays
