"""The planner: pools, lower bound, GPU-aware packing, static shards and dynamic dispatch."""

from pipelines.core.plan.bounds import lower_bound, utilization
from pipelines.core.plan.cluster import as_pool, hardware_of, override_pools, parse_pool_arg, pool_for
from pipelines.core.plan.dispatch import DispatchQueue, simulate, simulate_trace
from pipelines.core.plan.packing import Schedule, list_schedule, lpt_order
from pipelines.core.plan.planner import check_fit, make_plan
from pipelines.core.plan.shards import Shards, shard_makespan, shards_gpus, shards_plan, static_shards

__all__ = [
    "DispatchQueue", "Schedule", "Shards", "as_pool", "check_fit", "hardware_of", "list_schedule",
    "lower_bound", "lpt_order", "make_plan", "override_pools", "parse_pool_arg", "pool_for",
    "shard_makespan", "shards_gpus", "shards_plan", "simulate", "simulate_trace", "static_shards",
    "utilization",
]
