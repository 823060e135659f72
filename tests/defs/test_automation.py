"""Sensors and schedules request ONE run of test_runs over the key range, with the selection as config."""


import json
from pathlib import Path

import dagster as dg
import pytest
import yaml

from pipelines.definitions import build_definitions
from pipelines.defs.resources import NightlyResource
from tests.support.assets import QUICK_TEST, copied_example, registry_repo

pytestmark = pytest.mark.slow  # sensor ticks over a copied repo and Dagster instances: ~10 s, not the edit loop

FIRST = "tests/e2e/ckpt/test_ckpt_resume.py::cuda-stage-c-4-gpu-h200"


@pytest.fixture
def setup(tmp_path):
    repo, assets = copied_example(tmp_path)
    digest = tmp_path / "digest.txt"
    digest.write_text("sha256:" + "a" * 64 + "\n")
    cluster = assets / "cluster.yaml"
    data = yaml.safe_load(cluster.read_text())
    # the local pool's image is looked up as a maintainer would (`crane digest IMAGE`); here: a file
    data["deployments"]["local"]["pools"]["h200"]["image_digest_command"] = ["cat", str(digest)]
    cluster.write_text(yaml.safe_dump(data))
    resource = NightlyResource(home=str(tmp_path / "home"), assets_dir=str(assets))
    defs = build_definitions(nightly=resource)
    return defs, resource, repo, digest


def _tick(defs, resource, name, cursor):
    sensor = defs.resolve_sensor_def(name)
    ctx = dg.build_sensor_context(cursor=cursor, resources={"nightly": resource}, definitions=defs)
    result = sensor.evaluate_tick(ctx)
    return result, result.cursor


def _config(request) -> dict:
    return request.run_config["ops"]["test_runs"]["config"]


def test_a_changed_test_file_requests_one_run_of_only_that_test_over_the_whole_range(setup):
    defs, resource, repo, _ = setup
    result, cursor = _tick(defs, resource, "rerun_changed_tests", None)
    assert result.run_requests == [] and "first evaluation" in result.skip_message
    result, cursor = _tick(defs, resource, "rerun_changed_tests", cursor)
    assert result.run_requests == [] and result.skip_message == "no enabled, plannable test file changed"
    for name in ("megatron/test_sft_math.py", "lora/test_lora_math.py"):
        f = repo / "tests" / "e2e" / name
        f.write_text(f.read_text() + "\n# tweaked\n")
    result, _ = _tick(defs, resource, "rerun_changed_tests", cursor)
    [request] = result.run_requests
    assert _config(request)["tests"] == ["tests/e2e/lora/test_lora_math.py", "tests/e2e/megatron/test_sft_math.py"]
    assert request.tags["dagster/asset_partition_range_start"] == FIRST
    assert request.tags["dagster/asset_partition_range_end"] == "tests/e2e/test_backend_matrix.py"
    assert request.tags["nightly/reason"].startswith("test file changed")


def test_a_new_digest_under_the_same_tag_requests_one_run_of_that_pools_nightly_tests(setup):
    defs, resource, _, digest = setup
    result, cursor = _tick(defs, resource, "infra_change_backfill", None)
    assert result.run_requests == [] and "first evaluation" in result.skip_message
    result, cursor = _tick(defs, resource, "infra_change_backfill", cursor)
    assert result.run_requests == [] and "no pool" in result.skip_message
    digest.write_text("sha256:" + "b" * 64 + "\n")
    result, _ = _tick(defs, resource, "infra_change_backfill", cursor)
    [request] = result.run_requests
    assert _config(request)["pools"] == ["h200"] and _config(request)["cadence"] == "nightly"
    assert "image_digest sha256:aaaa" in request.tags["nightly/reason"]
    assert "-> sha256:bbbb" in request.tags["nightly/reason"]
    assert request.tags["nightly/pools"] == "h200"


def test_the_nightly_schedule_requests_one_run_with_the_nightly_selection(setup):
    defs, resource, _, _ = setup
    schedule = defs.resolve_schedule_def("nightly_schedule")
    ctx = dg.build_schedule_context(scheduled_execution_time=__import__("datetime").datetime(2026, 12, 3, 15),
                                    resources={"nightly": resource})
    [request] = schedule.evaluate_tick(ctx).run_requests
    assert _config(request)["cadence"] == "nightly"
    assert request.tags["nightly/cadence"] == "nightly" and request.tags["nightly/deployment"] == "local"
    assert request.tags["dagster/asset_partition_range_start"] == FIRST


def test_the_schedule_still_runs_once_the_last_test_file_was_deleted_after_the_location_loaded(setup):
    """The code location (hours old) lists a test file deleted since, last in sorted order: the schedule's
    range ended at it, and the run (its worker loads the location afresh) failed before any test, every night,
    until someone reloaded. The range now ends at the last test both list; the night runs."""
    defs, resource, repo, _ = setup
    schedule = defs.resolve_schedule_def("nightly_schedule")
    keys = defs.resolve_assets_def("test_runs").partitions_def.get_partition_keys()
    last = keys[-1].split("::")[0]
    (repo / last).unlink()
    ctx = dg.build_schedule_context(scheduled_execution_time=__import__("datetime").datetime(2026, 12, 3, 15),
                                    resources={"nightly": resource})
    [request] = schedule.evaluate_tick(ctx).run_requests
    end = request.tags["dagster/asset_partition_range_end"]
    assert end in keys and not end.startswith(last), end  # both the old location and the run's own list it
    fresh = build_definitions(nightly=resource)  # what the run worker loads
    assert end in fresh.resolve_assets_def("test_runs").partitions_def.get_partition_keys()
    with dg.instance_for_test() as instance:
        run = fresh.resolve_job_def("nightly").execute_in_process(
            run_config=request.run_config, tags=request.tags, instance=instance, raise_on_error=False)
        assert not [e for e in run.all_events if e.event_type_value == "RESOURCE_INIT_FAILURE"]
        assert [e for e in run.all_events if e.event_type_value == "STEP_START"]


def _failed_run(instance, kind: str):
    """A real failed run: a job of that name, or an asset launch whose selection holds test_runs."""
    @dg.op
    def boom():
        raise RuntimeError("a test failed")

    if kind == "asset pick":
        @dg.asset(name="test_runs")
        def test_runs():
            raise RuntimeError("a test failed")

        result = dg.materialize([test_runs], selection=[test_runs], instance=instance, raise_on_error=False)
    else:
        result = dg.GraphDefinition(name=kind, node_defs=[boom]).to_job().execute_in_process(
            instance=instance, raise_on_error=False)
    return instance.get_run_by_id(result.run_id), result.get_run_failure_event()


def _evaluate(sensor, instance, run, event, resource):
    ctx = dg.build_run_status_sensor_context(sensor_name=sensor.name, dagster_instance=instance, dagster_run=run,
                                             dagster_event=event, resources={"nightly": resource})
    return sensor(ctx)


@pytest.mark.parametrize("kind,expected", [("nightly", True), ("asset pick", True), ("calibration", False)])
def test_calibration_follows_any_run_that_ran_tests(setup, kind, expected):
    defs, resource, _, _ = setup
    sensor = defs.resolve_sensor_def("calibrate_after_failed_tests")
    with dg.instance_for_test() as instance:
        run, event = _failed_run(instance, kind)
        resource.night().state.put(f"runs/{run.run_id}.json", "{}")  # the night's record: tests ran
        result = _evaluate(sensor, instance, run, event, resource)
    if expected:
        assert isinstance(result, dg.RunRequest) and result.tags["nightly/source_run"] == run.run_id
    else:
        assert isinstance(result, dg.SkipReason)


def test_a_run_that_ended_before_any_test_started_is_not_calibrated(setup):
    """No night record (a config error, an unreadable history): nothing to report, no red calibration run."""
    defs, resource, _, _ = setup
    sensor = defs.resolve_sensor_def("calibrate_after_failed_tests")
    with dg.instance_for_test() as instance:
        run, event = _failed_run(instance, "nightly")
        result = _evaluate(sensor, instance, run, event, resource)
    assert isinstance(result, dg.SkipReason) and "wrote no night record" in result.skip_message


def test_a_ui_re_execution_of_a_command_line_night_is_calibrated(setup):
    """`nightly run` calibrates inline and tags its run so; Re-execute copies that tag but calibrates nothing."""
    defs, resource, _, _ = setup
    sensor = defs.resolve_sensor_def("calibrate_after_failed_tests")
    with dg.instance_for_test() as instance:
        run, event = _failed_run(instance, "nightly")
        instance.add_run_tags(run.run_id, {"nightly/calibration": "inline"})
        resource.night().state.put(f"runs/{run.run_id}.json", "{}")
        cli = instance.get_run_by_id(run.run_id)
        assert isinstance(_evaluate(sensor, instance, cli, event, resource), dg.SkipReason)
        again = cli.with_status(cli.status)._replace(run_id="re-" + cli.run_id, parent_run_id=cli.run_id,
                                                     root_run_id=cli.run_id)
        resource.night().state.put(f"runs/{again.run_id}.json", "{}")
        result = _evaluate(sensor, instance, again, event, resource)
    assert isinstance(result, dg.RunRequest) and result.tags["nightly/source_run"] == again.run_id


def test_sensors_that_feed_back_are_running_by_default(setup):
    defs, _, _, _ = setup
    for name in ("calibrate_after_tests", "calibrate_after_failed_tests", "calibrate_after_canceled_tests",
                 "calibrate_missed_runs", "infra_change_backfill"):
        assert defs.resolve_sensor_def(name).default_status == dg.DefaultSensorStatus.RUNNING, name


def _daemon_tick(defs, resource, name, instance, cursor):
    """A tick as the daemon runs it: inside the code location's repository, so origins are compared."""
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor, repository_name="__repository__",
                                  resources={"nightly": resource}, definitions=defs)
    result = defs.resolve_sensor_def(name).evaluate_tick(ctx)
    return result, result.cursor


@pytest.mark.parametrize("inline", [False, True])
def test_a_run_executed_in_process_is_calibrated_once(setup, inline):
    """`dagster asset materialize` / execute_in_process: no code location origin, still calibrated; a
    `nightly run` (tagged inline, it calibrated itself) is not calibrated a second time."""
    defs, resource, _, _ = setup
    with dg.instance_for_test() as instance:
        _, cursor = _daemon_tick(defs, resource, "calibrate_after_failed_tests", instance, None)
        run, _ = _failed_run(instance, "nightly")
        assert run.remote_job_origin is None
        if inline:
            instance.add_run_tags(run.run_id, {"nightly/calibration": "inline"})
        resource.night().state.put(f"runs/{run.run_id}.json", "{}")
        result, _ = _daemon_tick(defs, resource, "calibrate_after_failed_tests", instance, cursor)
    if inline:
        assert result.run_requests == []
    else:
        [request] = result.run_requests
        assert request.run_key == f"calibrate-{run.run_id}" and request.tags["nightly/source_run"] == run.run_id


def test_an_image_digest_command_outage_between_two_good_ticks_requests_nothing(setup):
    """The digest command failing once is not a new image: the last observed digest is kept."""
    defs, resource, _, digest = setup
    _, cursor = _tick(defs, resource, "infra_change_backfill", None)
    good = digest.read_text()
    digest.unlink()  # `crane digest` down: `cat` exits 1
    result, cursor = _tick(defs, resource, "infra_change_backfill", cursor)
    assert result.run_requests == [] and "h200 image_digest: cat" in result.skip_message
    digest.write_text(good)
    result, _ = _tick(defs, resource, "infra_change_backfill", cursor)
    assert result.run_requests == [] and result.skip_message == "no pool's image digest, driver or spec changed"


def test_an_nvidia_smi_outage_requests_nothing_and_says_so(setup, tmp_path, monkeypatch):
    defs, resource, _, _ = setup
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho 570.86.15\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{__import__('os').environ['PATH']}")
    _, cursor = _tick(defs, resource, "infra_change_backfill", None)
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    result, cursor = _tick(defs, resource, "infra_change_backfill", cursor)
    assert result.run_requests == [] and "h200 driver: nvidia-smi" in result.skip_message
    assert "exit 9" in result.skip_message
    smi.write_text("#!/bin/sh\necho 570.86.15\n")
    result, _ = _tick(defs, resource, "infra_change_backfill", cursor)
    assert result.run_requests == [] and result.skip_message == "no pool's image digest, driver or spec changed"


def test_each_driver_state_of_an_upgrade_gets_its_own_run_key(setup, monkeypatch):
    """Half the nodes upgraded, then all: both states end in the same characters, yet both are requested."""
    from pipelines.launch import infra

    defs, resource, _, _ = setup
    states = iter(["550.54.15/12.4", "550.54.15/12.4,570.86.15/12.8", "570.86.15/12.8"])
    monkeypatch.setattr(infra, "local_driver", lambda: (next(states), ""))
    _, cursor = _tick(defs, resource, "infra_change_backfill", None)
    result, cursor = _tick(defs, resource, "infra_change_backfill", cursor)
    [mixed] = result.run_requests
    result, _ = _tick(defs, resource, "infra_change_backfill", cursor)
    [upgraded] = result.run_requests
    assert mixed.run_key != upgraded.run_key
    assert "-> 570.86.15/12.8" in upgraded.tags["nightly/reason"]


def test_a_corrupt_estimates_file_skips_the_changed_tests_tick_without_moving_the_cursor(setup):
    defs, resource, repo, _ = setup
    _, cursor = _tick(defs, resource, "rerun_changed_tests", None)
    night = resource.night()
    night.state.put(night.calibration_keys()["estimates"], "{not json")
    f = repo / "tests" / "e2e" / "lora" / "test_lora_math.py"
    f.write_text(f.read_text() + "\n# tweaked\n")
    result, after = _tick(defs, resource, "rerun_changed_tests", cursor)
    assert result.run_requests == [] and after == cursor
    assert "corrupt estimates file" in result.skip_message and "delete it" in result.skip_message


def test_a_test_file_edited_into_a_broken_registration_is_named_with_its_problem(setup):
    defs, resource, repo, _ = setup
    _, cursor = _tick(defs, resource, "rerun_changed_tests", None)
    f = repo / "tests" / "e2e" / "lora" / "test_lora_math.py"
    f.write_text(f.read_text() + "\ndef broken(:\n")
    line = len(f.read_text().splitlines())
    result, _ = _tick(defs, resource, "rerun_changed_tests", cursor)
    assert result.run_requests == []
    assert f"tests/e2e/lora/test_lora_math.py:{line}: syntax: invalid syntax" in result.skip_message


def test_a_rollback_and_the_upgrade_again_is_requested_again(setup, monkeypatch):
    """a -> b -> a -> b: the second upgrade must not reuse the first one's run key (Dagster drops a
    request whose key a run of the sensor already has); ticks are minutes apart as the sensor's are."""
    import datetime as real

    from pipelines.defs import automation
    from pipelines.launch import infra

    defs, resource, _, _ = setup
    states = iter(["550.54.15/12.4", "570.86.15/12.8", "550.54.15/12.4", "570.86.15/12.8"])
    monkeypatch.setattr(infra, "local_driver", lambda: (next(states), ""))
    ticks = iter(real.datetime(2026, 12, 1, 15, m, tzinfo=real.UTC) for m in (0, 5, 10, 15))

    class Clock(real.datetime):
        @classmethod
        def now(cls, tz=None):
            return next(ticks)

    monkeypatch.setattr(automation, "datetime", Clock)
    _, cursor = _tick(defs, resource, "infra_change_backfill", None)
    keys = []
    for _ in range(3):
        result, cursor = _tick(defs, resource, "infra_change_backfill", cursor)
        [request] = result.run_requests
        keys.append(request.run_key)
    assert len(set(keys)) == 3, keys


def test_an_image_digest_command_outage_on_the_first_tick_is_no_change_once_it_answers(setup):
    """Nothing was observed on the first tick, so the first answer is an observation, not a new image."""
    defs, resource, _, digest = setup
    good = digest.read_text()
    digest.unlink()
    result, cursor = _tick(defs, resource, "infra_change_backfill", None)
    assert result.run_requests == [] and "h200 image_digest: cat" in result.skip_message
    digest.write_text(good)
    result, cursor = _tick(defs, resource, "infra_change_backfill", cursor)
    assert result.run_requests == [] and result.skip_message == "no pool's image digest, driver or spec changed"
    digest.write_text("sha256:" + "c" * 64 + "\n")  # a real change after that is still one
    result, _ = _tick(defs, resource, "infra_change_backfill", cursor)
    [request] = result.run_requests
    assert "sha256:cccc" in request.tags["nightly/reason"]


def test_a_changed_test_file_seen_while_the_quarantine_file_is_broken_runs_once_it_is_fixed(setup):
    """The tick that cannot read the quarantine (run_quarantined off: the run's tests depend on it)
    skips without moving the cursor, so the change is still a change on the tick after the fix."""
    from pipelines.reporting.state import quarantine_key

    defs, resource, repo, _ = setup
    repos = __import__("pathlib").Path(resource.assets_dir) / "repos.yaml"
    data = yaml.safe_load(repos.read_text())
    data["repos"]["minirl"]["flaky"] = {"run_quarantined": False}
    repos.write_text(yaml.safe_dump(data))
    _, cursor = _tick(defs, resource, "rerun_changed_tests", None)
    f = repo / "tests" / "e2e" / "lora" / "test_lora_math.py"
    f.write_text(f.read_text() + "\n# tweaked\n")
    state, key = resource.night().state, quarantine_key("minirl")
    state.put(key, "{not json")
    result, after = _tick(defs, resource, "rerun_changed_tests", cursor)
    assert result.run_requests == [] and "nightly state unreadable" in result.skip_message
    assert f"{state.uri(key)}:1: quarantine: not valid JSON" in result.skip_message and after == cursor
    state.delete(key)
    result, _ = _tick(defs, resource, "rerun_changed_tests", after)
    [request] = result.run_requests
    assert _config(request)["tests"] == ["tests/e2e/lora/test_lora_math.py"]


def test_a_test_file_reverted_then_relanded_is_requested_again(setup, monkeypatch):
    """A -> B -> A -> B: each change is requested, though the file's content (hence its digest)
    repeats; a key Dagster saw before would drop the request. Ticks are minutes apart."""
    import datetime as real

    from pipelines.defs import automation

    defs, resource, repo, _ = setup
    ticks = iter(real.datetime(2026, 12, 1, 15, m, tzinfo=real.UTC) for m in (0, 5, 10, 15))

    class Clock(real.datetime):
        @classmethod
        def now(cls, tz=None):
            return next(ticks)

    monkeypatch.setattr(automation, "datetime", Clock)
    f = repo / "tests" / "e2e" / "lora" / "test_lora_math.py"
    a, b = f.read_text(), f.read_text() + "\n# tweaked\n"
    _, cursor = _tick(defs, resource, "rerun_changed_tests", None)
    keys = []
    for text in (b, a, b):
        f.write_text(text)
        result, cursor = _tick(defs, resource, "rerun_changed_tests", cursor)
        [request] = result.run_requests
        keys.append(request.run_key)
    assert len(set(keys)) == 3 and all(len(k) <= 64 for k in keys), keys


def _edit_pool(resource, **fields) -> None:
    path = __import__("pathlib").Path(resource.assets_dir) / "cluster.yaml"
    data = yaml.safe_load(path.read_text())
    data["deployments"]["local"]["pools"]["h200"].update(fields)
    path.write_text(yaml.safe_dump(data))


def test_a_scheduling_only_edit_of_a_pool_requests_nothing_a_node_edit_does(setup):
    """Queue, priority, tolerations and the node count change where and when pods run, not what a test
    sees on its node: no full nightly run for them. A node selector, or a pod's /dev/shm or memory
    limit (a conversion that fit can fail after a cut), is a change."""
    defs, resource, _, _ = setup
    _, cursor = _tick(defs, resource, "infra_change_backfill", None)
    _edit_pool(resource, nodes=2, queue="h200-nightly", priority_class="nightly-e2e",
               tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    result, cursor = _tick(defs, resource, "infra_change_backfill", cursor)
    assert result.run_requests == [] and result.skip_message == "no pool's image digest, driver or spec changed"
    for change in ({"node_selector": {"nvidia.com/gpu.product": "NVIDIA-H200"}}, {"shm_size": "1Gi"},
                   {"memory_per_gpu": "4Gi"}):
        _edit_pool(resource, **change)
        result, cursor = _tick(defs, resource, "infra_change_backfill", cursor)
        [request] = result.run_requests
        assert "spec node-v1:" in request.tags["nightly/reason"], change


def test_a_pool_field_added_with_a_default_leaves_the_spec_digest_as_it_was():
    """A pipeline upgrade that adds a defaulted PoolSpec field must not read as a spec change on every pool."""
    import dataclasses

    from pipelines.core.specs import PoolSpec
    from pipelines.launch.infra import spec_digest

    upgraded = dataclasses.make_dataclass("PoolSpec", [("runtime_hint", str, dataclasses.field(default=""))],
                                          bases=(PoolSpec,), frozen=True)
    shape = {"name": "h200", "nodes": 4, "gpus_per_node": 8, "image": "ghcr.io/x:nightly"}
    assert spec_digest(upgraded(**shape)) == spec_digest(PoolSpec(**shape))


def test_the_first_tick_after_the_spec_digest_changed_form_re_baselines_without_a_run(setup):
    """A cursor written before the upgrade holds the old digest of every field: not comparable, so it is
    replaced, not reported as a change; a real change after that is one."""
    defs, resource, _, _ = setup
    _, cursor = _tick(defs, resource, "infra_change_backfill", None)
    old = __import__("json").loads(cursor)
    old["h200"]["spec"] = "sha256:d52e60f2e650ab12"  # the old form: a digest of the whole PoolSpec
    result, cursor = _tick(defs, resource, "infra_change_backfill", __import__("json").dumps(old))
    assert result.run_requests == [] and result.skip_message == "no pool's image digest, driver or spec changed"
    assert __import__("json").loads(cursor)["h200"]["spec"].startswith("node-v1:")
    _edit_pool(resource, gpus_per_node=4)
    result, _ = _tick(defs, resource, "infra_change_backfill", cursor)
    [request] = result.run_requests
    assert "spec node-v1:" in request.tags["nightly/reason"]


def _calibration_run_for(instance, source_run_id: str) -> str:
    """A calibration run as a sensor's request (or `nightly run`) creates it: tagged with its source run."""
    @dg.op
    def calibrate():
        pass

    job = dg.GraphDefinition(name="calibration", node_defs=[calibrate]).to_job()
    return job.execute_in_process(instance=instance, tags={"nightly/source_run": source_run_id}).run_id


def test_a_run_made_before_the_daemon_first_started_is_calibrated_once(setup, monkeypatch):
    """`dagster asset materialize` right after `nightly ui --print-command`, then `dagster dev`: the
    run-status sensors start after the newest run and never see it; the catch-up requests its
    calibration once, and leaves alone what calibrated itself, what has no record and what is calibrated."""
    from pipelines.defs import automation

    defs, resource, _, _ = setup
    monkeypatch.setattr(automation, "CATCH_UP_GRACE_S", 0)  # the runs below ended long enough ago
    state = resource.night().state
    with dg.instance_for_test() as instance:
        missed, _ = _failed_run(instance, "nightly")
        cli, _ = _failed_run(instance, "nightly")
        instance.add_run_tags(cli.run_id, {"nightly/calibration": "inline"})
        calibrated, _ = _failed_run(instance, "nightly")
        _calibration_run_for(instance, calibrated.run_id)
        no_record, _ = _failed_run(instance, "nightly")
        for run in (missed, cli, calibrated):
            state.put(f"runs/{run.run_id}.json", "{}")
        # the daemon starts: the run-status sensor's first tick sets its cursor after the newest run
        first, cursor = _daemon_tick(defs, resource, "calibrate_after_failed_tests", instance, None)
        assert "Initiating" in first.skip_message
        assert _daemon_tick(defs, resource, "calibrate_after_failed_tests", instance, cursor)[0].run_requests == []
        result, cursor = _daemon_tick(defs, resource, "calibrate_missed_runs", instance, None)
        [request] = result.run_requests
        assert request.run_key == f"calibrate-{missed.run_id}" and request.tags["nightly/source_run"] == missed.run_id
        assert _daemon_tick(defs, resource, "calibrate_missed_runs", instance, cursor)[0].run_requests == []
        _calibration_run_for(instance, missed.run_id)  # the daemon launched it; a fresh cursor still asks nothing
        assert _daemon_tick(defs, resource, "calibrate_missed_runs", instance, None)[0].run_requests == []


def test_a_run_that_just_ended_is_left_to_its_run_status_sensor_and_calibrated_once(setup, monkeypatch):
    """The run-status sensor asks within seconds; the catch-up waits, then finds the calibration there.
    Whichever sensor asks first, the other one sees the calibration run and asks nothing."""
    from pipelines.defs import automation

    defs, resource, _, _ = setup
    sensor = defs.resolve_sensor_def("calibrate_after_failed_tests")
    with dg.instance_for_test() as instance:
        run, event = _failed_run(instance, "nightly")
        resource.night().state.put(f"runs/{run.run_id}.json", "{}")
        result, cursor = _daemon_tick(defs, resource, "calibrate_missed_runs", instance, None)
        assert result.run_requests == [] and "left to the run-status sensors" in result.skip_message
        assert isinstance(_evaluate(sensor, instance, run, event, resource), dg.RunRequest)
        calibration = _calibration_run_for(instance, run.run_id)
        again = _evaluate(sensor, instance, run, event, resource)
        assert isinstance(again, dg.SkipReason) and f"calibrated by run {calibration}" in again.skip_message
        monkeypatch.setattr(automation, "CATCH_UP_GRACE_S", 0)  # the grace is over
        assert _daemon_tick(defs, resource, "calibrate_missed_runs", instance, cursor)[0].run_requests == []



def _command_line_night(instance, resource, pid: int):
    """A `nightly run` night as its process leaves it: tagged inline and with that process, record written."""
    from pipelines.defs.runs import process_tags

    run, event = _failed_run(instance, "nightly")
    instance.add_run_tags(run.run_id, {"nightly/calibration": "inline",
                                       **process_tags(run.run_id), "nightly/pid": str(pid)})
    resource.night().state.put(f"runs/{run.run_id}.json", "{}")
    return instance.get_run_by_id(run.run_id), event


def _ended_process() -> int:
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


@pytest.mark.parametrize("its_calibration", ["left STARTED", "failed by the next run", "never created"])
def test_a_command_line_night_killed_before_its_calibration_finished_is_calibrated_by_the_sensors(
        setup, monkeypatch, its_calibration):
    """`nightly run` killed (OOM, a CI hard kill) after its night, before its own calibration ended: the
    night is not calibrated and has no report unless a sensor asks, once."""
    from pipelines.defs import automation
    from pipelines.defs.runs import fail_stale_runs, process_tags

    defs, resource, _, _ = setup
    monkeypatch.setattr(automation, "CATCH_UP_GRACE_S", 0)
    sensor = defs.resolve_sensor_def("calibrate_after_failed_tests")
    dead = _ended_process()
    with dg.instance_for_test() as instance:
        night, event = _command_line_night(instance, resource, dead)
        if its_calibration != "never created":
            calib_id = "c" * 8 + "-calibration-of-the-killed-night"
            instance.add_run(dg.DagsterRun(job_name="calibration", run_id=calib_id, status=dg.DagsterRunStatus.STARTED,
                                           tags={"nightly/source_run": night.run_id, **process_tags(calib_id),
                                                 "nightly/pid": str(dead)}))
        if its_calibration == "failed by the next run":
            assert len(fail_stale_runs(instance, "the-next-run")) == 1
        request = _evaluate(sensor, instance, night, event, resource)
        assert isinstance(request, dg.RunRequest), request
        assert request.tags["nightly/source_run"] == night.run_id
        result, cursor = _daemon_tick(defs, resource, "calibrate_missed_runs", instance, None)
        [caught_up] = result.run_requests
        assert caught_up.tags["nightly/source_run"] == night.run_id
        _calibration_run_for(instance, night.run_id)  # the sensor's calibration: calibrated once
        assert isinstance(_evaluate(sensor, instance, night, event, resource), dg.SkipReason)
        assert _daemon_tick(defs, resource, "calibrate_missed_runs", instance, None)[0].run_requests == []


def test_a_command_line_night_is_left_to_its_own_calibration_while_its_process_runs(setup, monkeypatch):
    """Between the night's end and its calibration's, `nightly run` still calibrates it: no sensor asks
    then, nor once that calibration succeeded; the catch-up looks again, so a process killed after its
    first look still gets its night calibrated."""
    import subprocess
    import sys

    from pipelines.defs import automation

    defs, resource, _, _ = setup
    monkeypatch.setattr(automation, "CATCH_UP_GRACE_S", 0)
    sensor = defs.resolve_sensor_def("calibrate_after_failed_tests")
    calibrates, killed = (subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in "ab")
    try:
        with dg.instance_for_test() as instance:
            done, event = _command_line_night(instance, resource, calibrates.pid)
            lost, _ = _command_line_night(instance, resource, killed.pid)
            for night in (done, lost):
                skip = _evaluate(sensor, instance, night, event, resource)
                assert isinstance(skip, dg.SkipReason) and "nightly run" in skip.skip_message, skip
            result, cursor = _daemon_tick(defs, resource, "calibrate_missed_runs", instance, None)
            assert result.run_requests == []
            _calibration_run_for(instance, done.run_id)  # its own calibration succeeded, then its process ended
            for process in (calibrates, killed):  # killed: before its calibration run was made
                process.kill()
                process.wait()
            result, _ = _daemon_tick(defs, resource, "calibrate_missed_runs", instance, cursor)
            [request] = result.run_requests
            assert request.tags["nightly/source_run"] == lost.run_id
            assert isinstance(_evaluate(sensor, instance, done, event, resource), dg.SkipReason)
    finally:
        for process in (calibrates, killed):
            process.kill()
            process.wait()

def test_sensor_ticks_read_the_est_time_rewrites_once_and_still_see_a_new_one(setup, monkeypatch):
    """An estimates entry made for an older digest of its file (so from any test edit until the next
    calibration) needs the history's record of calibrate's rewrites. A code server plans at every tick:
    it reads that record once, not at every tick (on S3 a LIST and a GET per calibration), and a rewrite
    another process records later (a night's calibration in its run worker) is still seen."""
    from pipelines.core.calibrate import Succession
    from pipelines.core.history import FileHistoryStore

    defs, resource, _, _ = setup
    night = resource.night()
    first, second = [t for t in night.registered.tests if t.enabled and t.est_time > 0][:2]
    old_first, old_second = "1" * 64, "2" * 64  # the digests each file had before calibrate rewrote it
    night.state.put(night.calibration_keys()["estimates"], json.dumps({
        first.id: {"est_time": first.est_time + 111, "sha256": old_first, "hardware": first.hardware},
        second.id: {"est_time": second.est_time + 222, "sha256": old_second, "hardware": second.hardware}}))
    history = FileHistoryStore(Path(resource.home) / "history.sqlite")
    history.add_successions([Succession(old_first, first.sha256, first.path)])
    reads = []
    read = FileHistoryStore.successions
    monkeypatch.setattr(FileHistoryStore, "successions", lambda self: reads.append(1) or read(self))

    cursor = None
    for _ in range(3):
        _, cursor = _tick(defs, resource, "rerun_changed_tests", cursor)
    planned = resource.night().catalog.by_id()
    assert len(reads) == 1
    assert (planned[first.id].est_time, planned[second.id].est_time) == (first.est_time + 111, second.est_time)

    # recorded by another process: not through this one's record_successions
    FileHistoryStore(history.path).add_successions([Succession(old_second, second.sha256, second.path)])
    _tick(defs, resource, "rerun_changed_tests", cursor)
    planned = resource.night().catalog.by_id()
    assert planned[second.id].est_time == second.est_time + 222
    assert len(reads) == 2


def test_a_broken_changed_file_is_named_when_another_changed_file_runs(setup):
    """Two files changed in one tick, one edited into a broken registration: the run was requested for
    the other and said nothing of the broken one (only a skip reason ever named it)."""
    defs, resource, repo, _ = setup
    _, cursor = _tick(defs, resource, "rerun_changed_tests", None)
    broken = repo / "tests" / "e2e" / "lora" / "test_lora_math.py"
    broken.write_text(broken.read_text().replace('labels=["lora", "fsdp"])', 'labels=["lora", "fsdp"], bogus=1)'))
    fine = repo / "tests" / "e2e" / "megatron" / "test_sft_math.py"
    fine.write_text(fine.read_text() + "\n# tweaked\n")
    result, _ = _tick(defs, resource, "rerun_changed_tests", cursor)
    [request] = result.run_requests
    assert _config(request)["tests"] == ["tests/e2e/megatron/test_sft_math.py"]
    assert "registration does not load" in request.tags["nightly/reason"]
    assert "tests/e2e/lora/test_lora_math.py" in request.tags["nightly/reason"]


@pytest.fixture
def quick(tmp_path):
    """A framework of one 2-GPU h200 test that ends at once (a requested run is executed, not only
    requested), with the local pool's image digest read from a file, as ``setup``'s."""
    repo, assets = registry_repo(tmp_path, {"test_ok.py": QUICK_TEST.format(est=2)})
    digest = tmp_path / "digest.txt"
    digest.write_text("sha256:" + "a" * 64 + "\n")
    cluster = assets / "cluster.yaml"
    data = yaml.safe_load(cluster.read_text())
    data["deployments"]["local"]["pools"]["h200"]["image_digest_command"] = ["cat", str(digest)]
    cluster.write_text(yaml.safe_dump(data))
    resource = NightlyResource(home=str(tmp_path / "home"), assets_dir=str(assets), repo="fw")
    return build_definitions(nightly=resource), resource, repo, digest


def _execute(defs, request) -> tuple[bool, list[str]]:
    """The requested run executed as the daemon would launch it: (its success, the tests it ran)."""
    with dg.instance_for_test() as instance:
        run = defs.resolve_job_def("tests").execute_in_process(
            run_config=request.run_config, tags=request.tags, instance=instance, raise_on_error=False)
    return run.success, sorted(m.partition for m in run.asset_materializations_for_node("test_runs"))


def _break_start(kind: str, resource, tmp_path, monkeypatch) -> tuple:
    """Something the run refuses at its start, before any test: (the located message, its fix)."""
    from pipelines.reporting.state import quarantine_key

    state, key = resource.night().state, quarantine_key("fw")
    if kind == "quarantine file":  # run_quarantined is on (the default): only the run reads the file
        state.put(key, json.dumps({"version": 1, "actions": [{"bogus": 1}]}))
        return f"{state.uri(key)}:1: actions[0].bogus: unknown key", lambda: state.delete(key)
    if kind == "corrupt estimates":
        night = resource.night()
        estimates = night.calibration_keys()["estimates"]
        night.state.put(estimates, "{")
        return "corrupt estimates file", lambda: night.state.delete(estimates)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("NIGHTLY_GPU_LOCK_DIR", str(blocker))
    return f"{blocker}: the host's GPU lock folder is not a folder", lambda: monkeypatch.undo()


@pytest.mark.parametrize("kind", ["quarantine file", "GPU lock folder"])
def test_a_changed_test_file_whose_run_would_be_refused_is_requested_once_that_is_fixed(quick, kind, tmp_path,
                                                                                       monkeypatch):
    """The run refuses to start on a broken quarantine file (run_quarantined on: the tick's selection never
    reads it) or an unusable GPU lock folder: the tick requested it and moved its cursor, the run failed
    before any test, and after the fix the edit was no change any more: it never ran."""
    defs, resource, repo, _ = quick
    _, cursor = _tick(defs, resource, "rerun_changed_tests", None)
    f = repo / "tests" / "e2e" / "test_ok.py"
    f.write_text(f.read_text() + "\n# tweaked\n")
    where, fix = _break_start(kind, resource, tmp_path, monkeypatch)
    result, after = _tick(defs, resource, "rerun_changed_tests", cursor)
    assert result.run_requests == [] and after == cursor, result
    assert where in result.skip_message, result.skip_message
    fix()
    result, _ = _tick(defs, resource, "rerun_changed_tests", after)
    [request] = result.run_requests
    assert _execute(defs, request) == (True, ["tests/e2e/test_ok.py"])


@pytest.mark.parametrize("kind", ["corrupt estimates", "quarantine file", "GPU lock folder"])
def test_an_infra_change_whose_run_would_be_refused_is_requested_once_that_is_fixed(quick, kind, tmp_path,
                                                                                   monkeypatch):
    """The cursor moved before anything could raise: the run failed (a raw CatalogError for the estimates)
    and after the fix the new digest was the cursor's: the pool's tests never ran on the new image."""
    defs, resource, _, digest = quick
    _, cursor = _tick(defs, resource, "infra_change_backfill", None)
    digest.write_text("sha256:" + "b" * 64 + "\n")
    where, fix = _break_start(kind, resource, tmp_path, monkeypatch)
    result, after = _tick(defs, resource, "infra_change_backfill", cursor)
    assert result.run_requests == [] and after == cursor, result
    assert where in result.skip_message, result.skip_message
    fix()
    result, _ = _tick(defs, resource, "infra_change_backfill", after)
    [request] = result.run_requests
    assert "-> sha256:bbbb" in request.tags["nightly/reason"]
    assert _execute(defs, request) == (True, ["tests/e2e/test_ok.py"])


def test_an_infra_change_on_a_pool_no_nightly_test_runs_on_requests_no_run(quick, tmp_path):
    """A run of such a pool fails with 'nothing to run' and paints every partition of the range Failed;
    with the local launcher one pip install changes every pool's digest. The pool is skipped, named, and
    its change is taken (nothing to rerun is no lost change); a pool with tests is still requested."""
    defs, resource, _, digest = quick
    other = tmp_path / "h100-digest.txt"
    other.write_text("sha256:" + "1" * 64 + "\n")
    cluster = Path(resource.assets_dir) / "cluster.yaml"
    data = yaml.safe_load(cluster.read_text())
    data["deployments"]["local"]["pools"]["h100"] = {"nodes": 1, "gpus_per_node": 8,
                                                     "image_digest_command": ["cat", str(other)]}
    cluster.write_text(yaml.safe_dump(data))
    _, cursor = _tick(defs, resource, "infra_change_backfill", None)
    other.write_text("sha256:" + "2" * 64 + "\n")
    result, cursor = _tick(defs, resource, "infra_change_backfill", cursor)
    assert result.run_requests == [] and "no nightly test runs on pool h100" in result.skip_message
    result, cursor = _tick(defs, resource, "infra_change_backfill", cursor)
    assert result.run_requests == [] and result.skip_message == "no pool's image digest, driver or spec changed"
    other.write_text("sha256:" + "3" * 64 + "\n")
    digest.write_text("sha256:" + "b" * 64 + "\n")
    result, cursor = _tick(defs, resource, "infra_change_backfill", cursor)
    [request] = result.run_requests
    assert _config(request)["pools"] == ["h200"]
    result, _ = _tick(defs, resource, "infra_change_backfill", cursor)
    assert result.run_requests == [] and result.skip_message == "no pool's image digest, driver or spec changed"


def test_a_backfill_run_does_not_claim_the_ui_launched_it(quick):
    """`dagster job backfill -j tests --partitions ...` (daemon running) makes one run per partition tagged
    dagster/backfill as a UI backfill's run is: its reason said `backfill ID (UI)`, though launched from
    the command line. A run cannot tell which, so the reason names the backfill only."""
    defs, _, _, _ = quick
    with dg.instance_for_test() as instance:
        run = defs.resolve_job_def("tests").execute_in_process(
            instance=instance, partition_key="tests/e2e/test_ok.py", raise_on_error=False,
            tags={"dagster/backfill": "tkvmoeei", "dagster/partition": "tests/e2e/test_ok.py"})
        assert run.success
        assert instance.get_run_by_id(run.run_id).tags["nightly/reason"] == "backfill tkvmoeei"
