"""Dynamic dispatch, pure: which planned tests start now, on which node and GPUs.

Tests start in plan priority as soon as enough GPUs are free on ONE node; a later test may
start while an earlier one waits for a whole node, when it fits in the GPUs left over (the
same greedy rule the planner simulates, so with exact estimates dispatch replays the plan).
The threaded launch loop and the benchmark's event-clock simulator both drive this class.
``backfill=False`` gives strict list order (nothing starts before every earlier test has
started), kept for comparison.

Given a ``clock`` the queue re-plans at every call from what has happened so far: each running
test's predicted end is its conditional median given how long it has already run (a test past
its median is expected to run on, not to end now), scaled by the night's observed speed, and
when the highest-priority pending test (the head) cannot start, the node and time it will
start are reserved: a later test may take that node's GPUs only if it is predicted to end
before then, or needs only GPUs the head leaves over. So an early finish is used at once, a
late one moves the reservation, and small tests never starve a large one. Of the two highest-priority
tests that may start in the head's place, the second goes first when it fills its node's free GPUs
exactly and the first would leave some over: 4 GPUs freed beside a long 2-GPU test went to a 2-GPU test
(priority 11) rather than the 4-GPU one after it (12), and from then on only 2-GPU tests fitted there,
one after another, until none was left and the 4-GPU tests ran beside a 2-GPU hole for a third of the
night (bench/plan.py realistic, sigma 0.5: 1.0408 -> 1.0390 x the lower bound on seeds 200-299; the
choice of looking 2, 4 or 8 tests deep made no difference, so the smallest step from priority order).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from pipelines.core.model import Assignment, Plan
from pipelines.core.plan.cluster import PoolShape, as_pool
from pipelines.core.plan.live import LiveModel
from pipelines.core.plan.packing import best_fit

#: pending tests per GPU size a reserving queue looks through for one that may start
BACKFILL_SCAN = 64


class _PoolState:
    def __init__(self, nodes: int, gpus_per_node: int):
        self.free = [set(range(gpus_per_node)) for _ in range(nodes)]
        self.queues: dict[int, deque[Assignment]] = {}
        self.retries: deque[tuple[Assignment, int]] = deque()  # (assignment, the node it left)

    def counts(self) -> list[int]:
        return [len(f) for f in self.free]


class DispatchQueue:
    """Pending, running and finished tests of one plan over its pools. Not thread-safe: the
    caller holds its lock around every call."""

    def __init__(self, plan: Plan, pools: Sequence[PoolShape], *, backfill: bool = True,
                 clock: Callable[[], float] | None = None):
        self._backfill = backfill
        self._clock = clock
        self._live = LiveModel(plan) if clock is not None else None
        shapes = {p.name: as_pool(p) for p in pools}
        self._pools: dict[str, _PoolState] = {n: _PoolState(p.nodes, p.gpus_per_node) for n, p in shapes.items()}
        bad = []
        for a in plan.ordered():
            p = shapes.get(a.pool)
            if p is None:
                bad.append(f"{a.test_id}: pool {a.pool!r} is not one of {sorted(shapes)}")
            elif a.gpus > p.gpus_per_node:
                bad.append(f"{a.test_id}: needs {a.gpus} GPUs, pool {a.pool} nodes have {p.gpus_per_node}")
            else:
                self._pools[a.pool].queues.setdefault(a.gpus, deque()).append(a)
        if bad:
            raise ValueError("plan does not fit its pools: " + "; ".join(bad))
        self._running: dict[str, tuple[Assignment, int, tuple[int, ...]]] = {}
        self._pending = len(plan.assignments)

    def start_ready(self) -> list[tuple[Assignment, int, tuple[int, ...]]]:
        """Mark as running, and return, every pending test that can start now (priority order)."""
        started = []
        now = self._clock() if self._clock is not None else 0.0
        for name, st in self._pools.items():
            held = self._start_retries(st, now, started)
            while True:
                counts = [0 if k in held else c for k, c in enumerate(st.counts())]
                most = max(counts, default=0)
                if self._live is not None and self._backfill:
                    pick = self._reserving_pick(name, st, counts, now)
                    if pick is None:
                        break
                    head, node = pick
                else:
                    head = None
                    for g, q in st.queues.items():
                        if q and (g <= most or not self._backfill) and (head is None or q[0].priority < head.priority):
                            head = q[0]
                    if head is None or head.gpus > most:
                        break
                    node = best_fit(counts, head.gpus)
                q = st.queues[head.gpus]
                if q[0] is head:
                    q.popleft()
                else:  # a reserving queue may start a test from deeper in its size's queue
                    q.remove(head)
                started.append(self._start(st, head, node, now))
        started.sort(key=lambda x: x[0].priority)
        return started

    def requeue(self, assignment: Assignment, left: int) -> None:
        """Run a finished test once more, first in priority, on a node other than ``left`` (the
        retry of a failure on a node found bad): it waits for freed GPUs like any pending test, so
        the pool is never oversubscribed. A one-node pool has no other node: refused."""
        if assignment.test_id in self._running:
            raise ValueError(f"{assignment.test_id} is still running")
        st = self._pools[assignment.pool]
        if len(st.free) < 2:
            raise ValueError(f"{assignment.test_id}: pool {assignment.pool} has no node other than {left}")
        st.retries.append((assignment, left))
        self._pending += 1

    def _start_retries(self, st: _PoolState, now: float, started: list) -> set[int]:
        """Start the requeued retries that fit on a node they did not leave; returns the nodes held
        for the ones still waiting (their best node: nothing else starts there until they do)."""
        held: set[int] = set()
        for a, left in list(st.retries):
            counts = [0 if k == left or k in held else c for k, c in enumerate(st.counts())]
            node = best_fit(counts, a.gpus)
            if node < 0:
                held.add(max((k for k in range(len(counts)) if k != left and k not in held),
                             key=lambda k: counts[k], default=-1))
                continue
            st.retries.remove((a, left))
            started.append(self._start(st, a, node, now))
        return held - {-1}

    def _start(self, st: _PoolState, a: Assignment, node: int, now: float) -> tuple[Assignment, int, tuple[int, ...]]:
        """Take ``a``'s GPUs on ``node`` (the lowest free slots) and mark it running."""
        slots = tuple(sorted(st.free[node])[: a.gpus])
        st.free[node].difference_update(slots)
        self._running[a.test_id] = (a, node, slots)
        if self._live is not None:
            self._live.started(a.test_id, now)
        self._pending -= 1
        return a, node, slots

    def _reserving_pick(self, name: str, st: _PoolState, counts: list[int], now: float) -> tuple[Assignment, int] | None:
        """The test to start now and its node: the head if it fits; else the highest-priority
        test that fits without delaying the head's reserved start."""
        heads = [q[0] for q in st.queues.values() if q]
        if not heads:
            return None
        head = min(heads, key=lambda a: a.priority)
        most = max(counts)
        if head.gpus <= most:
            return head, best_fit(counts, head.gpus)
        if self._live.waited(head.test_id, now) < self._live.patience(head.test_id):
            r, at, spare = -1, now, 0  # not starving yet: any test that fits may start, as greedy
        else:
            running = [(a, node) for a, node, _ in self._running.values() if a.pool == name]
            r, at, spare = self._live.reservation(head.gpus, counts, running, now)
        # within one size the first allowed test is the one to start; look BACKFILL_SCAN deep
        later = sorted((a for g, q in st.queues.items() if q and g <= most
                        for a in itertools.islice(q, BACKFILL_SCAN) if a is not head), key=lambda a: a.priority)
        first = None
        for a in later:
            ok = [f if k != r or a.gpus <= spare or self._live.ends_by(a.test_id, now, at) else -1
                  for k, f in enumerate(counts)]
            node = best_fit(ok, a.gpus)
            if node < 0:
                continue
            if first is None and ok[node] != a.gpus and len(later) > 1:
                first = (a, node)  # it would leave a hole: the next test that fits may fill the node instead
                continue
            if first is None or ok[node] == a.gpus:
                return a, node
            return first
        return first

    def finish(self, test_id: str) -> None:
        """Give the finished test's GPUs back (unknown or already finished ids are an error).

        With a clock, the time it took updates the night's speed the re-planning assumes."""
        if test_id not in self._running:
            raise KeyError(f"{test_id} is not running")
        a, node, slots = self._running.pop(test_id)
        self._pools[a.pool].free[node].update(slots)
        if self._live is not None:
            self._live.finished(test_id, self._clock())

    def done(self) -> bool:
        return not self._pending and not self._running

    def running(self) -> list[tuple[Assignment, int, tuple[int, ...]]]:
        return sorted(self._running.values(), key=lambda x: x[0].priority)

    def pending(self) -> list[Assignment]:
        """Waiting tests, requeued retries first."""
        return [a for st in self._pools.values() for a, _ in st.retries] + sorted(
            (a for st in self._pools.values() for q in st.queues.values() for a in q), key=lambda a: a.priority)


def simulate(plan: Plan, pools: Sequence[PoolShape], actual_durations: Mapping[str, float], *,
             backfill: bool = True, live: bool = False) -> float:
    """The makespan dynamic dispatch of ``plan`` reaches when each test takes its actual time;
    ``live=True``: the re-planning, reserving dispatcher (a queue given a clock)."""
    return simulate_trace(plan, pools, actual_durations, backfill=backfill, live=live)[0]


def simulate_trace(plan: Plan, pools: Sequence[PoolShape], actual_durations: Mapping[str, float], *,
                   backfill: bool = True,
                   live: bool = False) -> tuple[float, list[tuple[Assignment, int, tuple[int, ...], float, float]]]:
    """Makespan and (assignment, node, slots, start, end) of every test, on an event clock."""
    now, seq = 0.0, 0
    q = DispatchQueue(plan, pools, backfill=backfill, clock=(lambda: now) if live else None)
    events: list[tuple[float, int, str]] = []
    trace = []
    while not q.done():
        for a, node, slots in q.start_ready():
            end = now + float(actual_durations[a.test_id])
            heapq.heappush(events, (end, seq, a.test_id))
            trace.append((a, node, slots, now, end))
            seq += 1
        if not events:
            raise ValueError("dispatch is stuck: pending tests but nothing running")
        now = events[0][0]
        while events and events[0][0] == now:
            q.finish(heapq.heappop(events)[2])
    return max((t[4] for t in trace), default=0.0), trace
