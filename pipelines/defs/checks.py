"""Asset checks on calibration: warn when estimates drift or a test ran close to its timeout."""


import dagster as dg

from pipelines.defs.assets import CALIBRATED
from pipelines.defs.resources import NightlyResource


@dg.asset_check(asset=CALIBRATED, name="no_estimate_drift",
                description="est_time proposals that move by at least 30 s and 30 % (the registry is stale).")
def no_estimate_drift(nightly: NightlyResource) -> dg.AssetCheckResult:
    night = nightly.night()
    estimates, _ = night.calibrate()
    drifted, _ = night.checks(estimates)
    return dg.AssetCheckResult(
        passed=not drifted, severity=dg.AssetCheckSeverity.WARN,
        metadata={"drifted": len(drifted),
                  "tests": dg.MetadataValue.md("\n".join(f"- {e.test_id}: {e.current} -> {e.proposed}" for e in drifted) or "none")},
    )


@dg.asset_check(asset=CALIBRATED, name="no_test_near_timeout",
                description="Tests whose last run used over 90 % of its timeout (the next slow night kills them).")
def no_test_near_timeout(nightly: NightlyResource) -> dg.AssetCheckResult:
    night = nightly.night()
    estimates, _ = night.calibrate()
    _, near = night.checks(estimates)
    return dg.AssetCheckResult(
        passed=not near, severity=dg.AssetCheckSeverity.WARN,
        metadata={"near_timeout": len(near), "tests": dg.MetadataValue.md("\n".join(f"- {n}" for n in near) or "none")},
    )
