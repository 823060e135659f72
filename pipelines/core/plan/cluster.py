"""Which pool a test runs on, and pool literals from the command line.

A suite names its hardware (``stage-c-4-gpu-h200`` -> ``h200``); a pool lists the hardware it
runs (by default its own name). The planner and the dispatcher only need a pool's shape.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Protocol

from pipelines.core.model import UNTYPED_RUNNER, Pool, Test
from pipelines.core.specs import PoolSpec

_SUITE_HW = re.compile(r"-gpu-([A-Za-z0-9_.-]+)$")
_POOL_ARG = re.compile(r"^([A-Za-z0-9_.-]+)=(\d+)x(\d+)$")


class PoolShape(Protocol):
    name: str
    nodes: int
    gpus_per_node: int


def hardware_of(test: Test) -> str:
    """The test's hardware: its own field, else the suite name's suffix, else ``cpu``."""
    if test.hardware:
        return test.hardware
    m = _SUITE_HW.search(test.suite)
    if m:
        return m.group(1)
    return "cpu" if test.backend == "cpu" or test.gpus == 0 else ""


def pool_hardware(pool: PoolSpec) -> tuple[str, ...]:
    return tuple(pool.hardware) or (pool.name,)


def pool_for(test: Test, pools: Sequence[PoolSpec]) -> PoolSpec | None:
    """The first pool, in the deployment's order, that runs the test's hardware and whose nodes hold
    its GPUs; when none of those nodes do, the first that runs its hardware (where the caller leaves
    the test unplanned as too wide, saying why).

    A test that names no hardware (framework S's template entries), only a runner size
    (``1-gpu-large``), or needs no GPU may run on any pool: the first whose nodes hold it (an 8-GPU
    template test skips a pool of 4-GPU nodes listed first). A test naming hardware that no pool
    runs is left unplanned by the caller.
    """
    hw = hardware_of(test)
    runs = [p for p in pools if hw in pool_hardware(p)] or (list(pools) if any_pool(test) else [])
    return next((p for p in runs if test.gpus <= p.gpus_per_node), runs[0] if runs else None)


def any_pool(test: Test) -> bool:
    """Whether ``test`` may run on any pool (:func:`pool_for` picks the first whose nodes fit it)."""
    hw = hardware_of(test)
    return test.gpus == 0 or not hw or (test.backend == "cuda" and bool(UNTYPED_RUNNER.match(hw)))


def ran_on(test: Test, pool: PoolSpec | None) -> str:
    """The hardware ``test``'s runs on ``pool`` are keyed by (history samples, the duration model):
    its own when the pool runs it by name, else the pool's first hardware. A test that names no GPU
    type runs on whatever the pool has: an L40S night's durations are no evidence for an H200 night.
    ``test.hardware`` when no pool takes it."""
    if pool is None:
        return test.hardware
    hw, listed = hardware_of(test), pool_hardware(pool)
    return hw if hw in listed else listed[0]


def as_pool(p: PoolShape) -> Pool:
    """A bare ``Pool`` from a ``PoolSpec`` or ``Pool``."""
    return Pool(p.name, int(p.nodes), int(p.gpus_per_node))


#: the largest pool a plan is made for: far above any fleet, far below what exhausts memory
MAX_POOL_NODES = 4096
MAX_GPUS_PER_NODE = 64


def parse_pool_arg(text: str) -> PoolSpec:
    """``h200=4x8`` -> a pool named h200 of 4 nodes with 8 GPUs each (hardware h200)."""
    m = _POOL_ARG.match(text.strip())
    if not m or int(m.group(2)) <= 0 or int(m.group(3)) <= 0:
        raise ValueError(f"--pool {text!r}: expected NAME=NODESxGPUS with positive numbers, e.g. h200=4x8")
    nodes, gpus = int(m.group(2)), int(m.group(3))
    if nodes > MAX_POOL_NODES or gpus > MAX_GPUS_PER_NODE:
        raise ValueError(f"--pool {text!r}: at most {MAX_POOL_NODES} nodes of at most {MAX_GPUS_PER_NODE} GPUs "
                         f"per pool; give a real fleet's shape, e.g. {m.group(1)}=4x8")
    return PoolSpec(name=m.group(1), nodes=nodes, gpus_per_node=gpus, hardware=(m.group(1),))


def pools_no_test_uses(tests: Sequence[Test], pools: Sequence[PoolSpec], names: Sequence[str]) -> list[str]:
    """Which of the pools ``names`` no test would be planned on (``pool_for`` never picks them)."""
    used = {p.name for t in tests if (p := pool_for(t, pools)) is not None}
    return [n for n in names if n not in used]


def override_pools(base: Sequence[PoolSpec], overrides: Sequence[PoolSpec]) -> tuple[PoolSpec, ...]:
    """Replace the shape of same-named pools (keeping their hardware list); add new ones."""
    out = {p.name: p for p in base}
    for o in overrides:
        if o.name in out:
            out[o.name] = dataclasses.replace(out[o.name], nodes=o.nodes, gpus_per_node=o.gpus_per_node)
        else:
            out[o.name] = o
    return tuple(out.values())
