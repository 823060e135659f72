"""All Dagster definitions in one place; ``workspace.yaml`` loads ``defs`` from here.

The partitions come from the catalog of the configured repo (``assets/repos.yaml``, or
``$NIGHTLY_REPO_NAME`` / ``$NIGHTLY_ASSETS_DIR``), read when the code location loads.
"""

from __future__ import annotations

import os

import dagster as dg

from pipelines.core.model import Catalog
from pipelines.defs.assets import CALIBRATED, NIGHT_REPORT, TEST_RUNS, build_assets
from pipelines.defs.automation import build_schedules, build_sensors
from pipelines.defs.checks import calibration_checks
from pipelines.defs.nightly_job import build_jobs
from pipelines.defs.resources import NightlyResource


def build_definitions(catalog: Catalog | None = None, nightly: NightlyResource | None = None) -> dg.Definitions:
    nightly = nightly or NightlyResource(
        home=os.environ.get("NIGHTLY_HOME", ""), assets_dir=os.environ.get("NIGHTLY_ASSETS_DIR", ""),
        repo=os.environ.get("NIGHTLY_REPO_NAME", ""), deployment=os.environ.get("NIGHTLY_DEPLOYMENT", ""),
    )
    if catalog is None:
        catalog = nightly.night().catalog
    resources = {"nightly": nightly}
    assets = build_assets(catalog)
    nightly_job, weekly_job = build_jobs(resources)
    calibration_job = dg.define_asset_job(
        "calibration", selection=dg.AssetSelection.assets(CALIBRATED, NIGHT_REPORT),
        description="Recalibrate est_time from history and write the night report.",
    )
    test_runs_job = dg.define_asset_job(
        "rerun_tests", selection=dg.AssetSelection.assets(TEST_RUNS),
        description="Run single test partitions (reruns, backfills, changed tests).",
    )
    return dg.Definitions(
        assets=assets,
        asset_checks=[calibration_checks],
        jobs=[nightly_job, weekly_job, calibration_job, test_runs_job],
        schedules=build_schedules(nightly_job, weekly_job),
        sensors=build_sensors(nightly_job, weekly_job, calibration_job, test_runs_job),
        resources=resources,
    )


defs = build_definitions()
