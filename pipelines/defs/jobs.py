"""Jobs: thin selections of the one ``test_runs`` asset, plus calibration and the report.

``nightly`` and ``weekly`` differ only in their default selection (the cadence); ``tests`` is
what sensors and the CLI request with a selection of their own. Every request covers the whole
partition range, so one selection is one run, and carries the tags the run queue limits on.
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from pipelines.core.runset import RunSelection
from pipelines.defs.keys import CALIBRATED, NIGHT_REPORT, TAG_REASON, TEST_RUNS
from pipelines.defs.tags import range_tags, request_tags

TEST_JOBS = ("nightly", "weekly", "tests")
#: the cadence each test job selects; the run keeps it when its config leaves ``cadence`` empty (the
#: Launchpad applies a job's config only to a single picked partition, not to a range or all of them)
JOB_CADENCE = {"nightly": "nightly", "weekly": "weekly", "tests": ""}


def selection_config(selection: RunSelection, *, env_from: Sequence[str] = (), timeout_floor_s: int = 0,
                     all_registered: bool = True) -> dict:
    """Run config of ``test_runs`` for a selection (env values never go in here, only names);
    ``all_registered``: over every test registered when the run starts, not only the partition keys."""
    cfg = {"cadence": selection.cadence, "labels": list(selection.labels), "suites": list(selection.suites),
           "pools": list(selection.pools), "tests": list(selection.tests), "env_from": list(env_from),
           "timeout_floor_s": timeout_floor_s, "all_registered": all_registered}
    return {"ops": {"test_runs": {"config": cfg}}}


def run_request(keys: Sequence[str], selection: RunSelection, deployment: str, pools: Sequence[str], *,
                run_key: str | None = None, reason: str = "") -> dg.RunRequest:
    """ONE run over every key with the selection as config (schedules, sensors)."""
    tags = {**range_tags(keys), **request_tags(deployment, selection, pools)}
    if reason:
        tags[TAG_REASON] = reason[:255]
    return dg.RunRequest(run_key=run_key, run_config=selection_config(selection), tags=tags)


def build_jobs(deployment: str, pools: Sequence[str]) -> dict[str, dg.UnresolvedAssetJobDefinition]:
    def tests_job(name: str, cadence: str, description: str):
        return dg.define_asset_job(
            name, selection=dg.AssetSelection.assets(TEST_RUNS).without_checks(), description=description,
            # the Launchpad's config: its picked partitions decide (all of them: every registered test);
            # schedules, sensors and the CLI ask for every registered test in their own requests
            config=selection_config(RunSelection(cadence=cadence), all_registered=False),
            tags=request_tags(deployment, RunSelection(cadence=cadence), pools),
        )

    return {
        "nightly": tests_job("nightly", JOB_CADENCE["nightly"], "Every enabled test of the nightly cadence (all labels but "
                                                   "long/ft-long) in one run, planned GPU-aware, longest first."),
        "weekly": tests_job("weekly", JOB_CADENCE["weekly"], "The full suite, long tests included, in one run."),
        "tests": tests_job("tests", JOB_CADENCE["tests"], "The picked test_runs partitions, or the selection in the run config "
                                        "(sensors: changed files, an infra change)."),
        "calibration": dg.define_asset_job(
            "calibration", selection=dg.AssetSelection.assets(CALIBRATED, NIGHT_REPORT),
            description="Recalibrate est_time from history and write the report of the run that ran tests."),
    }
