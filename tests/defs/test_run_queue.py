"""The run queue limits every run of test_runs when it is queued, a UI pick or a backfill included.

A pick or a backfill runs Dagster's implicit asset job (``__ASSET_JOB``), whose runs the backfill daemon
creates with Dagster's own tags only (``build_run_requests_with_backfill_policies``, then
``submit_asset_run``): none of ours, which the step adds once it starts. The limit is test_runs's
concurrency pool, which a run has from its creation. The runs here are made as the daemon makes them,
on an instance configured as the Helm values configure the cluster's, and dequeued as the run queue does.
"""

from __future__ import annotations

import dagster as dg
import yaml
from dagster._core.definitions.automation_tick_evaluation_context import (
    build_run_requests_with_backfill_policies,
)
from dagster._core.definitions.events import AssetKeyPartitionKey
from dagster._core.op_concurrency_limits_counter import GlobalOpConcurrencyLimitsCounter

from pipelines.definitions import build_definitions
from pipelines.defs.keys import TEST_RUNS, TEST_RUNS_POOL
from pipelines.defs.resources import NightlyResource
from tests.conftest import PROJECT_ROOT
from tests.support.assets import example_assets


def _cluster_concurrency() -> dict:
    """The instance's `concurrency` settings as the Helm chart renders them from k8s/helm/values.yaml:
    nothing unless the block says `enabled: true` (the chart's concurrency schema defaults it to false)."""
    block = yaml.safe_load((PROJECT_ROOT / "k8s" / "helm" / "values.yaml").read_text())["concurrency"]
    if block.get("enabled") is not True:
        return {}
    pools = block["pools"]
    return {"pools": {"granularity": pools["granularity"], "default_limit": pools["defaultLimit"]}}


def _dequeued(instance, runs) -> list[bool]:
    """Which queued runs the run queue starts, in order (its pool counter, as the daemon's second pass sees it)."""
    storage, granularity = instance.event_log_storage, instance.get_concurrency_config().pool_config.pool_granularity
    for _ in range(2):  # the first pass sets the pool's limit to the default; the next ones enforce it
        counter = GlobalOpConcurrencyLimitsCounter(instance, runs, [], concurrency_keys=storage.get_concurrency_keys(),
                                                   pool_limits=storage.get_pool_limits(), pool_granularity=granularity)
    out = []
    for run in runs:
        out.append(not counter.is_blocked(run))
        if out[-1]:
            counter.update_counters_with_launched_item(run)
    return out


def test_a_scattered_ui_pick_is_queued_in_the_test_runs_pool_and_at_most_its_limit_start(tmp_path):
    defs = build_definitions(nightly=NightlyResource(home=str(tmp_path / "home"),
                                                     assets_dir=str(example_assets(tmp_path / "assets"))))
    job = defs.get_implicit_global_asset_job_def()
    keys = defs.resolve_assets_def(TEST_RUNS).partitions_def.get_partition_keys()
    picked = keys[:12:2]  # every other key: one run per key, as the backfill daemon splits a scattered pick
    concurrency = _cluster_concurrency()
    events = {"module": "dagster.core.storage.event_log", "class": "ConsolidatedSqliteEventLogStorage",
              "config": {"base_dir": str(tmp_path / "events")}}  # one database, not one per run: fast
    with dg.instance_for_test(overrides={"concurrency": concurrency, "event_log_storage": events}) as instance:
        requests = build_run_requests_with_backfill_policies(
            [AssetKeyPartitionKey(TEST_RUNS, k) for k in picked], job.asset_layer.asset_graph, instance)
        assert len(requests) == len(picked) > concurrency["pools"]["default_limit"]
        runs = [instance.create_run_for_job(job_def=job.get_subset(asset_selection={TEST_RUNS}),
                                            tags={**r.tags, "dagster/backfill": "b1"}) for r in requests]
        assert all(run.run_op_concurrency.all_pools == {TEST_RUNS_POOL} for run in runs)
        assert instance.get_run_tags([f".dagster/pool/{TEST_RUNS_POOL}"]) == [(f".dagster/pool/{TEST_RUNS_POOL}", {"true"})]
        started = _dequeued(instance, runs)
        scheduled = instance.create_run_for_job(job_def=defs.resolve_job_def("nightly"))  # a schedule's: the same pool
    assert started == [True] * 4 + [False] * (len(runs) - 4)
    assert scheduled.run_op_concurrency.all_pools == {TEST_RUNS_POOL}
