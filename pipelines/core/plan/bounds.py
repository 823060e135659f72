"""How short a night can possibly be: the figure every plan is measured against."""

from __future__ import annotations

from collections.abc import Iterable

from pipelines.core.model import Pool


def lower_bound(durations_and_gpus: Iterable[tuple[float, int]], pool: Pool) -> float:
    """``max(longest test, GPU-seconds / GPUs, time of tests needing > G/2 GPUs / nodes)``.

    Two tests that each need more than half a node can never run side by side, so those tests
    alone keep the nodes busy for their summed time divided by the node count.
    """
    longest = work = big = 0.0
    half = pool.gpus_per_node / 2
    for d, g in durations_and_gpus:
        longest = max(longest, float(d))
        work += float(d) * g
        if g > half:
            big += float(d)
    if pool.nodes <= 0 or pool.gpus_per_node <= 0:
        return longest
    return max(longest, work / (pool.nodes * pool.gpus_per_node), big / pool.nodes)


def utilization(durations_and_gpus: Iterable[tuple[float, int]], pool: Pool, makespan: float) -> float:
    """Busy GPU-seconds over available GPU-seconds until the makespan."""
    if makespan <= 0 or pool.gpus <= 0:
        return 0.0
    return sum(float(d) * g for d, g in durations_and_gpus) / (pool.gpus * makespan)
