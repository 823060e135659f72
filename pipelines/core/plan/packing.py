"""GPU-aware list scheduling: the schedule a priority order produces on one pool.

Tests are taken in priority order; whenever GPUs free up, every pending test that fits on ONE
node starts (lowest priority number first), on the fullest node it fits (best fit keeps whole
nodes free for 8-GPU tests). This is exactly what the dynamic dispatcher does at run time, so a
plan's predicted makespan is what dispatch achieves when the estimates are right.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    """Start time and node of every test (indexed like the inputs) and the makespan."""

    start: tuple[float, ...]
    node: tuple[int, ...]
    makespan: float
    #: finish time of each node, largest first (the improvement step's tie-breaker)
    finish: tuple[float, ...]


def best_fit(free: Sequence[int], g: int) -> int:
    """The node with the fewest free GPUs that still fits ``g``; lowest index on ties; -1 if none."""
    best, best_free = -1, None
    for i, f in enumerate(free):
        if f >= g and (best_free is None or f < best_free):
            best, best_free = i, f
    return best


def list_schedule(durations: Sequence[float], gpus: Sequence[int], order: Sequence[int],
                  nodes: int, gpus_per_node: int) -> Schedule:
    """Simulate greedy list scheduling of ``order`` (test indices, first = highest priority).

    Every test must need at most ``gpus_per_node`` GPUs (the caller checks and reports).
    Pending tests are kept in one queue per GPU size, so each start costs O(sizes + nodes).
    """
    n = len(durations)
    start = [0.0] * n
    where = [0] * n
    queues: dict[int, deque[tuple[int, int]]] = {}
    for rank, i in enumerate(order):
        queues.setdefault(gpus[i], deque()).append((rank, i))
    free = [gpus_per_node] * nodes
    events: list[tuple[float, int, int, int]] = []
    now, seq, left = 0.0, 0, n
    node_end = [0.0] * nodes
    while left:
        while True:
            most = max(free)
            pick = None
            for g, q in queues.items():
                if q and g <= most and (pick is None or q[0][0] < queues[pick][0][0]):
                    pick = g
            if pick is None:
                break
            _, i = queues[pick].popleft()
            k = best_fit(free, pick)
            free[k] -= pick
            start[i], where[i] = now, k
            end = now + durations[i]
            node_end[k] = max(node_end[k], end)
            heapq.heappush(events, (end, seq, k, pick))
            seq += 1
            left -= 1
        if not left:
            break
        if not events:  # nothing runs and nothing fits: only possible with oversized tests
            raise ValueError("a pending test needs more GPUs than any node has")
        now = events[0][0]
        while events and events[0][0] == now:
            _, _, k, g = heapq.heappop(events)
            free[k] += g
    makespan = max((start[i] + durations[i] for i in range(n)), default=0.0)
    return Schedule(tuple(start), tuple(where), makespan, tuple(sorted(node_end, reverse=True)))


def lpt_order(durations: Sequence[float], gpus: Sequence[int], keys: Sequence[str]) -> list[int]:
    """Longest first; larger tests first among equals; then by key for a stable plan."""
    return sorted(range(len(durations)), key=lambda i: (-durations[i], -gpus[i], keys[i]))
