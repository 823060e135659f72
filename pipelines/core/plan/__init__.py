"""The planner: pools, lower bound, GPU-aware packing, static shards, dynamic dispatch, and the
duration model and prediction error that let it plan from history instead of padded est_time."""

from pipelines.core.plan.accuracy import (
    NightPrediction,
    PredictionError,
    error_lines,
    night_record,
    prediction_error,
    record_from_json,
    record_to_json,
)
from pipelines.core.plan.bounds import lower_bound, utilization
from pipelines.core.plan.cluster import as_pool, hardware_of, override_pools, parse_pool_arg, pool_for
from pipelines.core.plan.dispatch import DispatchQueue, simulate, simulate_trace
from pipelines.core.plan.durations import Duration, duration_model
from pipelines.core.plan.packing import Schedule, list_schedule, lpt_order
from pipelines.core.plan.planner import check_fit, make_plan
from pipelines.core.plan.shards import (
    Shards,
    shard_est,
    shard_makespan,
    shard_sum,
    shards_gpus,
    shards_plan,
    static_shards,
)

__all__ = [
    "DispatchQueue", "Duration", "NightPrediction", "PredictionError", "Schedule", "Shards", "as_pool",
    "check_fit", "duration_model", "error_lines", "hardware_of", "list_schedule", "lower_bound", "lpt_order",
    "make_plan", "night_record", "override_pools", "parse_pool_arg", "pool_for", "prediction_error", "record_from_json", "record_to_json",
    "shard_est", "shard_makespan", "shard_sum", "shards_gpus", "shards_plan", "simulate", "simulate_trace", "static_shards",
    "utilization",
]
