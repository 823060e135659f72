"""Ways in other than `nightly run` behave like it: a sensor's request as the daemon launches it
(the code location loaded again by the run), and run config a UI user types in the Launchpad."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from pipelines.definitions import build_definitions
from pipelines.defs.resources import NightlyResource
from pipelines.defs.tags import range_tags
from tests.support.assets import copied_example

pytestmark = pytest.mark.slow  # real tests run in a real (temporary) Dagster instance

NEW = "tests/e2e/test_zz_added_tonight.py"


@pytest.fixture
def location(tmp_path):
    repo, assets = copied_example(tmp_path)
    resource = NightlyResource(home=str(tmp_path / "home"), assets_dir=str(assets))
    return resource, repo, tmp_path / "home"


def _materialized(instance) -> dict[str, str]:
    records = instance.fetch_materializations(dg.AssetKey("test_runs"), limit=100).records
    return {r.asset_materialization.partition: r.asset_materialization.metadata["outcome"].value for r in records}


def test_a_test_file_added_after_the_code_location_loaded_runs_when_the_sensor_asks(location):
    resource, repo, _ = location
    loaded = build_definitions(nightly=resource)  # the code location, loaded before the file exists
    sensor = loaded.resolve_sensor_def("rerun_changed_tests")

    def tick(cursor):
        return sensor.evaluate_tick(dg.build_sensor_context(cursor=cursor, resources={"nightly": resource},
                                                            definitions=loaded))

    first = tick(None)
    (repo / NEW).write_text((repo / "tests/e2e/lora/test_lora_moe_6layer.py").read_text())
    [request] = tick(first.cursor).run_requests
    assert request.run_config["ops"]["test_runs"]["config"]["tests"] == [NEW]
    assert NEW > request.tags["dagster/asset_partition_range_end"]  # outside the range the location knew
    with dg.instance_for_test() as instance:
        run = build_definitions(nightly=resource).resolve_job_def("tests").execute_in_process(  # the run's own load
            run_config=request.run_config, tags=request.tags, instance=instance, raise_on_error=False)
        assert run.success
        assert _materialized(instance) == {NEW: "passed"}
    # the night's record says why it ran, as the run's tags do (the sensor's reason, not the UI's default)
    record = json.loads((location[2] / "nights" / "latest.json").read_text())
    assert record["tags"]["nightly/reason"] == request.tags["nightly/reason"], record["tags"]


@pytest.mark.parametrize("config,said", [
    ({"labels": ["nosuch"]}, "nothing to run: run config field ops.test_runs.config.labels = 'nosuch' selects none of the"),
    ({"suites": ["nosuch"]}, "run config: unknown suite(s) nosuch"),
    ({"cadence": "nighty"}, "run config: unknown cadence 'nighty'"),
])
def test_a_launchpad_typo_fails_the_run_with_the_reason_and_records_nothing(location, config, said):
    resource, _, home = location
    defs = build_definitions(nightly=resource)
    with dg.instance_for_test() as instance:
        job = defs.resolve_job_def("nightly")  # every partition picked
        run = job.execute_in_process(run_config={"ops": {"test_runs": {"config": config}}}, instance=instance,
                                     tags=range_tags(sorted(job.partitions_def.get_partition_keys())),
                                     raise_on_error=False)
        assert not run.success
        failure = run.get_run_failure_event() or next(e for e in run.all_events if e.is_step_failure)
        errors = [e.step_failure_data.error for e in run.all_events if e.is_step_failure]
        assert any(said in (err.message or "") for err in errors), [err.message for err in errors] or failure
        assert not any("Traceback" in (err.message or "") for err in errors)
        assert _materialized(instance) == {}
    assert not (home / "nights" / "latest.json").exists()  # the previous report stays the latest


DISABLED = "tests/e2e/megatron/test_multinode_sft.py"
NOT_HERE = "tests/e2e/ckpt/test_ckpt_resume.py::rocm-stage-c-4-gpu-mi300"  # the local deployment skips mi300


def _observed(instance) -> dict[str, str]:
    records = instance.fetch_observations(dg.AssetKey("test_runs"), limit=100).records
    return {r.asset_observation.partition: r.asset_observation.metadata["outcome"].value for r in records}


@pytest.mark.parametrize("keys", [(DISABLED, DISABLED), (NOT_HERE, NOT_HERE)])
def test_a_pick_of_tests_never_launched_only_is_a_success_that_observes_them_and_records_nothing(location, keys):
    """A backfill splits into one run per contiguous key range, so a disabled test (or one on hardware
    the deployment skips) alone in a UI pick gets a run of its own: never launched, never red."""
    resource, _, home = location
    with dg.instance_for_test() as instance:
        run = build_definitions(nightly=resource).resolve_job_def("tests").execute_in_process(
            instance=instance, tags={"dagster/asset_partition_range_start": keys[0],
                                     "dagster/asset_partition_range_end": keys[1]}, raise_on_error=False)
        assert run.success, [e.step_failure_data.error.message for e in run.all_events if e.is_step_failure]
        assert _observed(instance) == {keys[0]: "skipped"}
        assert _materialized(instance) == {}
    assert not (home / "nights").exists() and not (home / "runs").exists()  # no record: nothing to calibrate


def test_a_config_selection_that_launches_nothing_still_fails_the_run_as_nightly_run_does(location):
    resource, _, home = location
    with dg.instance_for_test() as instance:
        run = build_definitions(nightly=resource).resolve_job_def("tests").execute_in_process(
            instance=instance, partition_key=DISABLED, raise_on_error=False,
            run_config={"ops": {"test_runs": {"config": {"labels": ["megatron"]}}}})
        assert not run.success
        errors = [e.step_failure_data.error.message or "" for e in run.all_events if e.is_step_failure]
        assert any("nothing to run: every selected test is disabled or on hardware no pool runs: "
                   f"{DISABLED} (disabled: " in m for m in errors), errors
        assert _materialized(instance) == {}
    assert not (home / "nights").exists() and not (home / "runs").exists()


def test_a_broken_quarantine_file_stops_a_dagster_run_before_any_test_as_nightly_run_does(location):
    """Its quarantines would not hold (a quarantined test's failure would fail the night)."""
    resource, _, home = location
    (home / "quarantine").mkdir(parents=True)
    (home / "quarantine" / "minirl.json").write_text('{"version": 1, "actions_": []}')
    defs = build_definitions(nightly=resource)
    with dg.instance_for_test() as instance:
        job = defs.resolve_job_def("nightly")
        run = job.execute_in_process(instance=instance, raise_on_error=False,
                                     tags=range_tags(sorted(job.partitions_def.get_partition_keys())))
        assert not run.success
        errors = [e.step_failure_data.error.message or "" for e in run.all_events if e.is_step_failure]
        assert any(f"{home}/quarantine/minirl.json:1: actions_" in m for m in errors), errors
        assert _materialized(instance) == {}
