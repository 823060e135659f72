"""The framework's static shards, reproduced exactly so users can compare (or keep them).

Per suite, tests sorted by (-est_time, file path) each go to the shard with the smallest running
sum of est_time (ties to the lowest shard index); each shard runs its tests one after another
on its own runner holding the suite's GPU count. The est_time is the file's value as written
(SGLang's ``45.2``, not the whole seconds the catalog rounds it up to): the runner sorts and sums that.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pipelines.core.model import Assignment, Plan, Pool, Test, effective_timeout
from pipelines.core.plan.bounds import lower_bound, utilization

#: suite -> shards, each a tuple of tests in run order
Shards = dict[str, tuple[tuple[Test, ...], ...]]


def shard_est(t: Test) -> float:
    """The est_time the framework's runner splits on: the file's literal (``45.2``) while ``est_time`` is still
    it rounded up, else ``est_time`` (a whole number in the file, or a calibrated estimate replacing it)."""
    lit = t.est_literal
    return lit if lit is not None and math.ceil(lit) == t.est_time else t.est_time


def shard_sum(shard: Sequence[Test]) -> float:
    """A shard's running sum as the runner adds it up (:func:`shard_est` of each test)."""
    return sum(shard_est(t) for t in shard)


def static_shards(tests: Sequence[Test], shards_per_suite: Mapping[str, int]) -> Shards:
    """Split each suite of the enabled ``tests`` into its number of shards (1 when not given)."""
    suites: dict[str, list[Test]] = {}
    for t in tests:
        if t.enabled:
            suites.setdefault(t.suite, []).append(t)
    out: Shards = {}
    for suite, group in suites.items():
        n = max(1, int(shards_per_suite.get(suite, 1)))
        shards: list[list[Test]] = [[] for _ in range(n)]
        sums = [0.0] * n
        for t in sorted(group, key=lambda t: (-shard_est(t), t.path, t.id)):
            k = min(range(n), key=lambda j: (sums[j], j))
            shards[k].append(t)
            sums[k] += shard_est(t)
        out[suite] = tuple(tuple(s) for s in shards)
    return out


def shard_makespan(shards: Shards, durations: Mapping[str, float]) -> float:
    """When the last shard finishes if each test takes ``durations[test_id]``."""
    return max((sum(durations[t.id] for t in shard) for suite in shards.values() for shard in suite), default=0.0)


def shards_gpus(shards: Shards) -> int:
    """GPUs the static runners hold together (one runner per shard with the suite's GPU count)."""
    return sum(max((t.gpus for s in suite for t in s), default=0) * len(suite) for suite in shards.values())


def shards_plan(shards: Shards, *, timeout_floor_s: int = 1800, timeout_factor: float = 1.25,
                durations: Mapping[str, float] | None = None) -> Plan:
    """The static shards as a Plan: pool = suite, node = shard index, tests back to back.

    Each test takes ``durations[test_id]`` where given, else its est_time: compared with a plan made
    on the duration model's medians, the shards must run on those same medians, or the comparison
    measures est_time's 1.25 padding rather than the split. Timeouts stay on est_time."""
    durations = durations or {}
    placed = []
    rows = []
    for suite, suite_shards in shards.items():
        gpus = max((t.gpus for s in suite_shards for t in s), default=0)
        took = {t.id: float(durations.get(t.id, t.est_time)) for s in suite_shards for t in s}
        pairs = [(took[t.id], t.gpus) for s in suite_shards for t in s]
        ends = []
        for k, shard in enumerate(suite_shards):
            clock = 0.0
            for pos, t in enumerate(shard):
                placed.append((clock, pos, suite, Assignment(
                    t.id, suite, k, clock, clock + took[t.id], t.gpus,
                    effective_timeout(t.est_time, timeout_floor_s, timeout_factor))))
                clock += took[t.id]
            ends.append(clock)
        runners = Pool(suite, len(suite_shards), max(gpus, 1))
        makespan = max(ends, default=0.0)
        # on identical single-test runners only the longest test and the average load bound it
        lb = lower_bound(((d, runners.gpus_per_node) for d, _ in pairs), runners)
        rows.append((suite, makespan, lb, utilization(pairs, runners, makespan)))
    placed.sort(key=lambda x: (x[0], x[1], x[2]))
    assignments = tuple(
        Assignment(a.test_id, a.pool, a.node, a.start_s, a.end_s, a.gpus, a.timeout_s, prio)
        for prio, (*_, a) in enumerate(placed))
    return Plan(assignments, max((r[1] for r in rows), default=0.0), max((r[2] for r in rows), default=0.0),
                pools=tuple(rows))
