"""Asset and check keys, in one place so jobs, sensors and tests name them alike."""

import dagster as dg

MODEL_WEIGHTS = dg.AssetKey("model_weights")
DATASETS = dg.AssetKey("datasets")
CONVERTED = dg.AssetKey("converted_checkpoints")
TEST_RUNS = dg.AssetKey("test_runs")
CALIBRATED = dg.AssetKey("calibrated_estimates")
NIGHT_REPORT = dg.AssetKey("night_report")
TEST_PASSED = dg.AssetCheckKey(TEST_RUNS, "test_passed")
#: the Dagster concurrency pool of test_runs: every run of it, whichever way in (a UI pick or a backfill
#: of the implicit asset job included, which carries none of our run tags when it is queued), is in it
#: from its creation, so the run queue limits them together (k8s/helm/values.yaml, concurrency.pools)
TEST_RUNS_POOL = "nightly-test-runs"

#: run tags every way in sets (schedules, sensors, the CLI; the asset adds what it observes)
TAG_CADENCE = "nightly/cadence"
TAG_DEPLOYMENT = "nightly/deployment"
TAG_POOLS = "nightly/pools"
TAG_IMAGE = "nightly/image_digest"
TAG_COMMIT = "nightly/framework_commit"
TAG_REASON = "nightly/reason"
#: a run whose calibration the caller runs itself (the CLI): the sensor leaves it alone
TAG_CALIBRATION = "nightly/calibration"
#: the calibration run's source: the run whose tests it recalibrates after
TAG_SOURCE_RUN = "nightly/source_run"
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
