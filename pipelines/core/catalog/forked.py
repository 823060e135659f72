"""Parsing many files on every CPU with ``os.fork``: the parent takes one share, children the rest.

A cold catalog of a big framework is bound by ``ast.parse`` (about 0.2 ms a file); on a 2-CPU
machine two processes halve it. ``fork`` starts a child in microseconds with the parent's
imports already loaded (a ``forkserver`` or ``spawn`` pool costs more than it saves at this
size). Fork is only used where it is safe: the platform has it and the calling process runs a
single thread (a Dagster code server has threads, which fork can deadlock); otherwise, and on any
failure of a child, the work is simply done in this process. Results come back in input order,
so the answer never depends on how the work was split.
"""

from __future__ import annotations

import os
import pickle
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: below this many items the fork and the pickling of results cost more than they save
FORK_MIN_ITEMS = 600


def cpus() -> int:
    """CPUs this process may run on (the affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def os_threads() -> int:
    """Threads of this process as the kernel counts them: native threads (gRPC's, a BLAS pool)
    hold locks too, and ``threading`` does not see them. Falls back to Python's count off Linux."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def can_fork() -> bool:
    """Whether forking is available and safe here (one thread: no lock another thread might hold)."""
    return hasattr(os, "fork") and threading.active_count() == 1 and os_threads() == 1


def default_workers(n_items: int) -> int:
    """How many processes a batch of ``n_items`` deserves: every CPU when big enough, else 1."""
    if n_items < FORK_MIN_ITEMS or not can_fork():
        return 1
    return min(cpus(), 8)


def _child(fn: Callable[[T], R], share: Sequence[T], write_fd: int) -> None:
    """Run in the forked child: compute the share, send it pickled, never return to the caller."""
    code = 1
    try:
        data = pickle.dumps([fn(item) for item in share], protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(write_fd, "wb") as out:
            out.write(data)
        code = 0
    finally:
        os._exit(code)  # no atexit handlers, no flushing of the parent's buffers


def fork_map(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None) -> list[R]:
    """``[fn(x) for x in items]`` spread over ``workers`` processes (default: :func:`default_workers`).

    Item ``i`` goes to share ``i % workers`` (neighbouring files are alike in size); this process
    computes share 0 while the children compute the others. A child that fails in any way has
    its share recomputed here, so the result is always complete and in input order.
    """
    workers = default_workers(len(items)) if workers is None else min(workers, len(items))
    if workers <= 1 or not can_fork():
        return [fn(item) for item in items]
    shares = [items[k::workers] for k in range(workers)]
    children: list[tuple[int, int]] = []  # (pid, read end)
    for share in shares[1:]:
        read_fd, write_fd = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            children.append((-1, -1))
            continue
        if pid == 0:
            os.close(read_fd)
            _child(fn, share, write_fd)
        os.close(write_fd)
        children.append((pid, read_fd))
    results: list[list[R]] = []
    try:
        results.append([fn(item) for item in shares[0]])
    finally:  # reap every child, even when this share raised
        collected = [_collect(pid, read_fd, len(share)) for (pid, read_fd), share in zip(children, shares[1:], strict=True)]
    for part, share in zip(collected, shares[1:], strict=True):
        results.append(part if part is not None else [fn(item) for item in share])
    out: list[R] = [None] * len(items)  # type: ignore[list-item]
    for k, part in enumerate(results):
        out[k::workers] = part
    return out


def _collect(pid: int, read_fd: int, expected: int) -> list | None:
    """A child's results, or None when it failed (the caller recomputes its share)."""
    if pid < 0:
        return None
    try:
        with os.fdopen(read_fd, "rb") as src:
            data = src.read()
    finally:
        _, status = os.waitpid(pid, 0)
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        return None
    try:
        part = pickle.loads(data)
    except Exception:  # noqa: BLE001 - a truncated or garbled result: recompute it here
        return None
    return part if isinstance(part, list) and len(part) == expected else None
