"""Asset checks on calibration: warn when estimates drift or a test ran close to its timeout.

Both come from one look at the history (one multi-asset check), so a night is calibrated once.
"""

from collections.abc import Iterable

import dagster as dg

from pipelines.core.calibrate.evidence import seconds
from pipelines.defs.assets import CALIBRATED, source_night
from pipelines.defs.keys import TAG_SOURCE_RUN
from pipelines.defs.resources import NightlyResource

DRIFT = dg.AssetCheckSpec("no_estimate_drift", asset=CALIBRATED,
                          description="est_time proposals that move by at least 30 s and 30 % (the registry is stale).")
NEAR_TIMEOUT = dg.AssetCheckSpec("no_test_near_timeout", asset=CALIBRATED,
                                 description="Tests whose last run used over 90 % of its timeout (the next slow night kills them).")


def _result(spec: dg.AssetCheckSpec, found: list, label: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=spec.name, asset_key=CALIBRATED, passed=not found, severity=dg.AssetCheckSeverity.WARN,
        metadata={label: len(found), "tests": dg.MetadataValue.md("\n".join(f"- {x}" for x in found) or "none")},
    )


@dg.multi_asset_check(specs=[DRIFT, NEAR_TIMEOUT], name="calibration_checks")
def calibration_checks(context: dg.AssetCheckExecutionContext, nightly: NightlyResource) -> Iterable[dg.AssetCheckResult]:
    night = source_night(context, nightly)  # the repo of the night this calibration follows
    estimates = night.estimates()
    # near timeout with the floor the night this calibration follows ran with (its record's), as its report
    drifted, near = night.checks(estimates, context.run.tags.get(TAG_SOURCE_RUN) or None)
    yield _result(DRIFT, [f"{e.test_id}: {seconds(e.registered)} -> {seconds(e.registered_proposed)}" for e in drifted],
                  "drifted")
    yield _result(NEAR_TIMEOUT, [str(n) for n in near], "near_timeout")
