"""All Dagster definitions in one place; ``workspace.yaml`` loads ``defs`` from here.

The partitions come from the catalog of the configured repo (``assets/repos.yaml``, or
``$NIGHTLY_REPO_NAME`` / ``$NIGHTLY_ASSETS_DIR``), read when the code location loads. The one
resource (``nightly``) points at the deployment (``$NIGHTLY_DEPLOYMENT``, local by default), which
chooses the launcher and the stores. Broken ``assets/`` (or a repo path that cannot be used) stops the
code location with the located message only (see the end of this file).
"""

from __future__ import annotations

import os

import dagster as dg

from pipelines.core.model import Catalog, CatalogError
from pipelines.defs.assets import build_assets, partitions
from pipelines.defs.automation import build_schedules, build_sensors
from pipelines.defs.checks import calibration_checks
from pipelines.defs.jobs import build_jobs
from pipelines.defs.resources import NightlyResource


def build_definitions(catalog: Catalog | None = None, nightly: NightlyResource | None = None) -> dg.Definitions:
    nightly = nightly or NightlyResource(
        home=os.environ.get("NIGHTLY_HOME", ""), assets_dir=os.environ.get("NIGHTLY_ASSETS_DIR", ""),
        repo=os.environ.get("NIGHTLY_REPO_NAME", ""), deployment=os.environ.get("NIGHTLY_DEPLOYMENT", ""),
    )
    night = nightly.night()
    if catalog is None:  # as registered: est_time shapes no partition, and a corrupt estimates file (state)
        catalog = night.registered  # fails the run or tick that plans with it, with its located message,
        # not the whole code location (its schedules and sensors with it)
    deployment = night.deployment
    pools = [p.name for p in deployment.pools]
    keys = partitions(catalog)["test"].get_partition_keys()
    assets, checks = build_assets(catalog)
    jobs = build_jobs(deployment.name, pools)
    return dg.Definitions(
        assets=assets,
        asset_checks=[calibration_checks, *checks],
        jobs=list(jobs.values()),
        schedules=build_schedules(jobs, keys, deployment.name, pools),
        sensors=build_sensors(jobs, keys, deployment.name, pools),
        resources={"nightly": nightly},
    )


try:
    defs = build_definitions()
except CatalogError as exc:
    # The located message (file:line: field: what to do) is the whole error. Raised afresh here, Dagster
    # shows it with this one line as its stack trace, not the project frames that found the problem.
    raise exc.with_traceback(None) from None
