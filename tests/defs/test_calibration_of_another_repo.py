"""A night of another checkout than the code location's (``nightly run --repo``) whose own calibration did not
finish is calibrated and reported by the sensors against that night's repo, from its record, not the code
location's (``NIGHTLY_REPO_NAME``): its estimates are written, the default repo's are not touched."""

from __future__ import annotations

import json
import shutil

import dagster as dg
import pytest
import yaml

from pipelines.core.specs import unconfigured_name
from pipelines.definitions import build_definitions
from pipelines.defs.keys import TAG_CALIBRATION, TAG_SOURCE_RUN
from pipelines.defs.resources import NightlyResource
from pipelines.defs.tags import range_tags
from tests.support.assets import QUICK_TEST, registry_repo

pytestmark = pytest.mark.slow  # a real (tiny) night and its calibration in a Dagster instance: a few seconds


def _checkout(tmp_path, configured: bool):
    """(the other checkout, assets/, the name its state goes by): the tiny framework as repo ``fw`` in
    assets/repos.yaml, or as a checkout nobody configured (as ``nightly run --repo examples/sglangish``)."""
    repo, assets = registry_repo(tmp_path, {"test_ok.py": QUICK_TEST.format(est=2)})
    if configured:
        return repo, assets, "fw"
    repos = assets / "repos.yaml"
    data = yaml.safe_load(repos.read_text())
    del data["repos"]["fw"]
    repos.write_text(yaml.safe_dump(data))
    return repo, assets, unconfigured_name(repo)


def _killed_command_line_night(instance, home, assets, repo):
    """A `nightly run --repo <checkout>` night, run as that command runs it (its resource names the checkout),
    whose process died before its own calibration: tagged inline, with a process that has ended."""
    from pipelines.defs.runs import TAG_HOST, TAG_PID, TAG_PID_RUN
    from tests.defs.test_automation import _ended_process

    cli = NightlyResource(home=str(home), assets_dir=str(assets), repo=str(repo))
    defs = build_definitions(nightly=cli)
    job = defs.resolve_job_def("nightly")
    night = job.execute_in_process(instance=instance, raise_on_error=False, tags={
        TAG_CALIBRATION: "inline", **range_tags(sorted(job.partitions_def.get_partition_keys()))})
    assert night.success
    run = instance.get_run_by_id(night.run_id)
    instance.add_run_tags(run.run_id, {TAG_HOST: __import__("socket").gethostname(),
                                       TAG_PID: str(_ended_process()), TAG_PID_RUN: run.run_id})
    return instance.get_run_by_id(run.run_id)


@pytest.mark.parametrize("configured", [True, False])
@pytest.mark.parametrize("sensor", ["calibrate_after_tests", "calibrate_missed_runs"])
def test_a_night_of_another_repo_is_calibrated_and_reported_against_its_own_repo(tmp_path, monkeypatch, sensor,
                                                                                configured):
    from pipelines.defs import automation
    from tests.defs.test_automation import _daemon_tick, _evaluate

    monkeypatch.setattr(automation, "CATCH_UP_GRACE_S", 0)  # the night ended long enough ago
    repo, assets, name = _checkout(tmp_path, configured)
    home = tmp_path / "home"
    location = NightlyResource(home=str(home), assets_dir=str(assets))  # the code location: the default repo
    defs = build_definitions(nightly=location)
    assert location.night().repo_spec.name == "minirl"
    with dg.instance_for_test() as instance:
        run = _killed_command_line_night(instance, home, assets, repo)
        assert json.loads((home / "runs" / f"{run.run_id}.json").read_text())["repo"] == name
        if sensor == "calibrate_missed_runs":
            [request] = _daemon_tick(defs, location, sensor, instance, None)[0].run_requests
        else:
            event = instance.get_records_for_run(run.run_id).records[-1].event_log_entry.dagster_event
            request = _evaluate(defs.resolve_sensor_def(sensor), instance, run, event, location)
        assert request.tags[TAG_SOURCE_RUN] == run.run_id
        calib = defs.resolve_job_def("calibration").execute_in_process(instance=instance, tags=request.tags,
                                                                      raise_on_error=False)
    assert calib.success
    assert (home / "estimates" / f"{name}.json").is_file()
    assert not (home / "estimates" / "minirl.json").exists()  # the code location's repo is left alone
    [report] = calib.asset_materializations_for_node("night_report")
    assert report.metadata["source_run"].value == run.run_id
    [estimates] = calib.asset_materializations_for_node("calibrated_estimates")
    assert estimates.metadata["estimates"].value == str(home / "estimates" / f"{name}.json")


def test_a_night_whose_checkout_is_gone_fails_its_calibration_saying_where_and_what_to_do(tmp_path):
    repo, assets, name = _checkout(tmp_path, configured=False)
    home = tmp_path / "home"
    location = NightlyResource(home=str(home), assets_dir=str(assets))
    defs = build_definitions(nightly=location)
    with dg.instance_for_test() as instance:
        run = _killed_command_line_night(instance, home, assets, repo)
        shutil.rmtree(repo)  # the CI workspace was cleaned before the catch-up came
        calib = defs.resolve_job_def("calibration").execute_in_process(
            instance=instance, tags={TAG_SOURCE_RUN: run.run_id}, raise_on_error=False)
    assert not calib.success
    [failure] = [e for e in calib.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    message = failure.step_failure_data.error.message
    record = home / "runs" / f"{run.run_id}.json"
    line = next(i for i, text in enumerate(record.read_text().splitlines(), 1) if '"repo_path":' in text)
    assert f"{record}:{line}: repo_path: " in message, message
    assert str(repo) in message and "nightly calibrate --repo" in message, message
    assert not (home / "estimates" / "minirl.json").exists()
