"""The whole night on a real temporary Dagster instance: assets, metadata, history, calibration.

One night runs with one test made to fail and one made to hang (the example's failure
injection); a second night must reuse every built input and plan with the calibrated estimates.
"""

from __future__ import annotations

import json
import shutil

import dagster as dg
import pytest

from pipelines.definitions import build_definitions
from pipelines.defs.resources import NightlyResource
from pipelines.night import Night, NightSettings

pytestmark = pytest.mark.slow

FAIL, HANG = "test_sft_math", "test_lora_math"
FAIL_ID = "tests/e2e/megatron/test_sft_math.py"
HANG_ID = "tests/e2e/lora/test_lora_math.py"
DISABLED_ID = "tests/e2e/megatron/test_multinode_sft.py"
LONG_ID = "tests/e2e/fsdp/test_fsdp_long_math.py"


def _events(instance, key: str, event_type):
    records = instance.get_event_records(dg.EventRecordsFilter(event_type=event_type, asset_key=dg.AssetKey(key)))
    return records


def _by_partition(records) -> dict[str, dict]:
    out = {}
    for r in records:
        ev = r.event_log_entry.dagster_event.event_specific_data
        mat = getattr(ev, "materialization", None) or getattr(ev, "asset_observation", None)
        out[mat.partition] = {k: v.value for k, v in mat.metadata.items()}
    return out


@pytest.fixture(scope="module")
def nights(tmp_path_factory, project_root_module):
    home = tmp_path_factory.mktemp("home")
    assets = tmp_path_factory.mktemp("assets")
    shutil.copytree(project_root_module / "assets", assets, dirs_exist_ok=True)
    repos = assets / "repos.yaml"
    repos.write_text(repos.read_text().replace("path: examples/minirl", f"path: {project_root_module}/examples/minirl")
                     .replace("hub: examples/minirl/hub", f"hub: {project_root_module}/examples/minirl/hub"))
    resource = NightlyResource(home=str(home), assets_dir=str(assets))
    with dg.instance_for_test() as instance:
        defs = build_definitions(nightly=resource)
        job = defs.resolve_job_def("nightly")
        config = {"ops": {"run_night": {"config": {
            "cadence": "nightly", "env": {"MINIRL_FAIL": FAIL, "MINIRL_HANG": HANG}, "timeout_floor_s": 35}}}}
        first = job.execute_in_process(run_config=config, instance=instance)
        calib = defs.resolve_job_def("calibration").execute_in_process(instance=instance)
        mats_first = _by_partition(_events(instance, "test_runs", dg.DagsterEventType.ASSET_MATERIALIZATION))
        built_first = _by_partition(_events(instance, "converted_checkpoints", dg.DagsterEventType.ASSET_MATERIALIZATION))
        second = job.execute_in_process(run_config={"ops": {"run_night": {"config": {"timeout_floor_s": 35}}}},
                                        instance=instance)
        yield {
            "home": home, "assets": assets, "instance": instance, "defs": defs, "first": first, "calib": calib,
            "second": second, "mats_first": mats_first, "built_first": built_first,
        }


@pytest.fixture(scope="module")
def project_root_module():
    from tests.conftest import PROJECT_ROOT

    return PROJECT_ROOT


def test_every_enabled_nightly_test_is_materialized_with_its_metadata(nights):
    mats = nights["mats_first"]
    summary = nights["first"].output_for_node("run_night")
    assert set(mats) == set(summary["selected"]) - set(summary["unplanned"])
    assert summary["unplanned"] == ["tests/e2e/ckpt/test_ckpt_resume.py::rocm-stage-c-4-gpu-mi300"]
    assert LONG_ID not in mats, "nightly must not run tests labelled long"
    for tid, meta in mats.items():
        for field in ("outcome", "elapsed_s", "est_time_s", "timeout_s", "attempt", "node", "log", "test_file_sha256"):
            assert field in meta, (tid, field)
    assert mats[FAIL_ID]["outcome"] == "failed"
    assert mats[HANG_ID]["outcome"] == "timed_out"
    passed = [t for t, m in mats.items() if m["outcome"] == "passed"]
    assert len(passed) == len(mats) - 2
    assert mats[HANG_ID]["elapsed_s"] >= 35


def test_the_disabled_test_is_shown_as_skipped_not_absent(nights):
    obs = _by_partition(_events(nights["instance"], "test_runs", dg.DagsterEventType.ASSET_OBSERVATION))
    assert obs[DISABLED_ID]["outcome"] == "skipped"
    assert "disabled" in obs[DISABLED_ID]["reason"]


def test_failed_and_timed_out_durations_are_not_used_for_calibration(nights):
    night = Night(NightSettings(home=nights["home"], assets_dir=nights["assets"]))
    estimates = {e.test_id: e for e in night.calibrate()[0]}
    samples = night.history.read()
    assert {s.outcome for s in samples if s.test_id == HANG_ID} == {"timed_out", "passed"}
    first_night_passed = [s for s in samples if s.run_id == nights["first"].run_id and s.outcome == "passed"]
    assert len(first_night_passed) >= 6
    # the second night ran the failing and hanging tests without injection: their only usable
    # samples are from that night, so exactly one sample each is used
    assert estimates[FAIL_ID].samples_used == 1
    assert estimates[HANG_ID].samples_used == 1


def test_inputs_are_built_once_and_reused_on_the_next_night(nights):
    instance = nights["instance"]
    built_after = _by_partition(_events(instance, "converted_checkpoints", dg.DagsterEventType.ASSET_MATERIALIZATION))
    assert built_after == nights["built_first"], "the second night rebuilt a converted checkpoint"
    reused = _by_partition(_events(instance, "converted_checkpoints", dg.DagsterEventType.ASSET_OBSERVATION))
    assert set(reused) == set(nights["built_first"])
    assert all(m["reused"] for m in reused.values())


def test_the_next_night_plans_with_the_calibrated_estimates(nights):
    estimates = json.loads((nights["home"] / "estimates" / "minirl.json").read_text())
    night = Night(NightSettings(home=nights["home"], assets_dir=nights["assets"]))
    tests = night.catalog.by_id()
    calibrated = list(estimates)
    assert calibrated
    for tid in calibrated:
        assert tests[tid].est_time == estimates[tid]["est_time"]
        assert tests[tid].est_source == "history"


def test_calibration_and_report_assets_are_materialized(nights):
    calib = nights["calib"]
    assert calib.success
    (report,) = calib.asset_materializations_for_node("night_report")
    path = report.metadata["report"].value
    text = open(path).read()
    assert FAIL_ID in text and "failed" in text and "timed_out" in text and "skipped" in text
    checks = {e.asset_check_key.name: e.passed for e in calib.get_asset_check_evaluations()}
    assert set(checks) == {"no_estimate_drift", "no_test_near_timeout"}


def test_predicted_and_actual_makespan_are_recorded(nights):
    summary = nights["second"].output_for_node("run_night")
    assert summary["predicted_makespan_s"] > 0 and summary["actual_makespan_s"] > 0
    latest = json.loads((nights["home"] / "nights" / "latest.json").read_text())
    assert latest["run_id"] == nights["second"].run_id
