"""A night's problems (a test file whose registration does not load, a test no pool runs) on every way in:
kept in the run's record, and the report's verdict is not OK, as `nightly run` exits 3."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import dagster as dg
import pytest

from pipelines.definitions import build_definitions
from pipelines.defs.automation import calibration_request
from pipelines.defs.resources import NightlyResource
from tests.support.assets import QUICK_TEST, registry_repo

pytestmark = pytest.mark.slow  # a real (tiny) night in a Dagster instance: a few seconds

BROKEN = QUICK_TEST.replace("register_cuda_ci(est_time={est},", "EST = {est}\nregister_cuda_ci(est_time=EST,")


def test_a_scheduled_night_with_a_broken_registration_records_the_problem_and_its_report_is_not_ok(tmp_path):
    _, assets = registry_repo(tmp_path, {"test_ok.py": QUICK_TEST.format(est=2),
                                         "test_broken.py": BROKEN.format(est=2)})
    home = tmp_path / "home"
    nightly = NightlyResource(home=str(home), assets_dir=str(assets), repo="fw")
    defs = build_definitions(nightly=nightly)
    with dg.instance_for_test() as instance:
        tick = defs.get_schedule_def("nightly_schedule").evaluate_tick(dg.build_schedule_context(
            instance=instance, scheduled_execution_time=datetime(2026, 12, 7, 15, tzinfo=UTC),
            resources={"nightly": nightly}))  # as the daemon gives it the definitions' resources
        [request] = tick.run_requests
        night = defs.resolve_job_def("nightly").execute_in_process(
            run_config=request.run_config, tags=request.tags, instance=instance, raise_on_error=False)
        assert night.success
        run = instance.get_run_by_id(night.run_id)
        calib = defs.resolve_job_def("calibration").execute_in_process(
            instance=instance, tags=calibration_request(instance, run, nightly.night()).tags)
    record = json.loads((home / "runs" / f"{night.run_id}.json").read_text())
    assert [a["test_id"] for a in record["attempts"]] == ["tests/e2e/test_ok.py"]
    [problem] = record["problems"]
    assert problem.startswith("catalog problem: tests/e2e/test_broken.py:4: est_time: must be a literal"), problem
    [report] = calib.asset_materializations_for_node("night_report")
    verdict = report.metadata["verdict"].value
    assert verdict == "PROBLEMS: 1 catalog problem(s); every launched test passed", verdict
