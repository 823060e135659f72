"""test_runs on Kubernetes: which launcher a run takes, and what Dagster records of each attempt.

The Pipes path (dagster-k8s ``PipesK8sClient``) reports the step's own result, which Dagster applies
to every partition of the run: it is for a run of exactly one partition. The pods are scripted here
(no cluster): the Pipes stand-in opens a real Pipes session in the step, as ``PipesK8sClient.run``
does, and both stand-ins return the attempts a pod would have ended with.
"""

from __future__ import annotations

import dagster as dg
import pytest
import yaml

from pipelines.core.model import Attempt
from pipelines.core.runset import RunSelection
from pipelines.definitions import build_definitions
from pipelines.defs.jobs import run_request
from pipelines.defs.resources import NightlyResource
from pipelines.night import Night
from pipelines.storage.cache import Built
from tests.support.assets import copied_example

pytestmark = pytest.mark.slow  # real runs of test_runs in a Dagster instance: a few seconds each

ONE = "tests/e2e/lora/test_lora_math.py"
PICK = ("tests/e2e/fsdp/test_fsdp_sft_chat.py", ONE, "tests/e2e/lora/test_lora_moe_5layer.py")


class ScriptedPods:
    """A Kubernetes launcher whose pods end as scripted, one outcome per launch."""

    def __init__(self, name: str, outcomes: list[str], context=None):
        self.name, self.outcomes, self.context = name, list(outcomes), context
        self.launched: list[tuple[str, int]] = []

    def launch(self, request, on_log=None) -> Attempt:
        if self.context is not None:  # PipesK8sClient.run opens a Pipes session in the step
            with dg.open_pipes_session(self.context, dg.PipesEnvContextInjector(), dg.PipesTempFileMessageReader()):
                pass
        outcome = self.outcomes.pop(0)
        self.launched.append((request.test.id, request.attempt))
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        request.log_path.write_text(f"attempt {request.attempt}: {outcome}\n")
        return Attempt(test_id=request.test.id, outcome=outcome, elapsed_s=1.0, started_at="2026-12-01T02:00:00Z",
                       attempt=request.attempt, node=f"h200-{request.attempt}", log_path=str(request.log_path),
                       timeout_s=request.timeout_s, reason="node_lost" if outcome == "infra_error" else "",
                       details={"retriable": "true"})


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """The production deployment (Kubernetes, two infra retries) with local state and scripted pods."""
    from pipelines.launch import infra
    from pipelines.launch.kubernetes import pipes

    _, assets = copied_example(tmp_path)
    path = assets / "cluster.yaml"
    data = yaml.safe_load(path.read_text())
    data["deployments"]["production"]["storage"] = "local"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))  # anything else reaching for a cluster fails fast
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(infra, "kubernetes_driver", lambda deployment, pool: ("570.86.15/12.8", ""))
    monkeypatch.setattr(Night, "build", lambda self, req: Built(req.key, tmp_path / req.key, True, 0.0, 0, 0))
    pods = {"watch": ScriptedPods("kubernetes", []), "pipes": ScriptedPods("kubernetes-pipes", [])}
    monkeypatch.setattr(Night, "launcher", lambda self: pods["watch"])

    def pipes_launcher_for(context, deployment, **_):
        pods["pipes"].context = context
        return pods["pipes"]

    monkeypatch.setattr(pipes, "pipes_launcher_for", pipes_launcher_for)
    resource = NightlyResource(home=str(tmp_path / "home"), assets_dir=str(assets), deployment="production")
    return build_definitions(nightly=resource), pods


def _run(defs, instance, *, partition_key=None, request=None, tags=None, config=None):
    job = defs.resolve_job_def("tests")
    if request is not None:
        return job.execute_in_process(instance=instance, run_config=request.run_config, tags=request.tags,
                                      raise_on_error=False)
    return job.execute_in_process(instance=instance, partition_key=partition_key, tags=tags or {},
                                  run_config=config or {}, raise_on_error=False)


def _records(instance, fetch) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in fetch(dg.AssetKey("test_runs"), limit=100).records:
        event = r.event_log_entry.dagster_event.event_specific_data
        data = getattr(event, "materialization", None) or event.asset_observation
        out.setdefault(data.partition, []).append({k: v.value for k, v in data.metadata.items()})
    return out


def _failures(result) -> list[str]:
    return [e.step_failure_data.error.message for e in result.all_events if e.is_step_failure]


@pytest.mark.parametrize("way", ["sensor request", "pick of three"])
def test_one_test_in_a_run_over_many_partitions_materializes_its_own_partition_only(cluster, way):
    """A changed-file sensor naming one test over the whole range, or a pick of three partitions with
    one test selected: the one test runs through the watch launcher and only its partition is
    materialized; the others never ran and show nothing."""
    defs, pods = cluster
    pods["watch"].outcomes = pods["pipes"].outcomes = ["failed"]
    keys = sorted(defs.resolve_assets_def("test_runs").partitions_def.get_partition_keys())
    with dg.instance_for_test() as instance:
        if way == "sensor request":
            result = _run(defs, instance, request=run_request(keys, RunSelection(tests=(ONE,)), "production", ["h200"]))
        else:
            result = _run(defs, instance, tags={"dagster/asset_partition_range_start": PICK[0],
                                                "dagster/asset_partition_range_end": PICK[-1]},
                          config={"ops": {"test_runs": {"config": {"tests": [ONE]}}}})
        assert result.success, _failures(result)
        materialized = _records(instance, instance.fetch_materializations)
    assert {k: [m["outcome"] for m in ms] for k, ms in materialized.items()} == {ONE: ["failed"]}
    assert pods["watch"].launched == [(ONE, 1)] and pods["pipes"].launched == []


def test_a_single_partition_rerun_goes_through_pipes_and_materializes_only_its_final_attempt(cluster):
    """An infra error, then a pass on retry: one materialization (the pass), the first attempt an
    observation with its metadata, and the check judges the pass; the run succeeds."""
    defs, pods = cluster
    pods["pipes"].outcomes = ["infra_error", "passed"]
    with dg.instance_for_test() as instance:
        result = _run(defs, instance, partition_key=ONE)
        assert result.success, _failures(result)
        materialized = _records(instance, instance.fetch_materializations)
        observed = _records(instance, instance.fetch_observations)
    checks = [(e.event_specific_data.partition, e.event_specific_data.passed) for e in result.all_events
              if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert pods["pipes"].launched == [(ONE, 1), (ONE, 2)] and pods["watch"].launched == []
    [final] = materialized[ONE]
    assert (final["outcome"], final["attempt"], final["node"]) == ("passed", 2, "h200-2")
    assert list(materialized) == [ONE]
    retried = [o for o in observed[ONE] if o["outcome"] == "infra_error"]
    assert [(o["attempt"], o["reason"], o["node"]) for o in retried] == [(1, "node_lost", "h200-1")]
    assert checks == [(ONE, False), (ONE, True)], "each attempt judged as it ended, the pass last"


def test_a_local_run_whose_gpu_lock_folder_is_a_file_fails_before_any_input_or_test(tmp_path, monkeypatch):
    """The Dagster way in (a pick in the UI, a schedule, `dagster asset materialize`) checks the host's GPU
    lock folder as `nightly run` does: the run fails at once, naming the cause, instead of downloading
    the inputs and recording every test as an infra_error."""
    _, assets = copied_example(tmp_path)
    blocker = tmp_path / "passwd"
    blocker.write_text("root:x:0:0\n")
    monkeypatch.setenv("NIGHTLY_GPU_LOCK_DIR", str(blocker))
    monkeypatch.setattr(Night, "build", lambda self, req: pytest.fail(f"built {req.key}"))
    monkeypatch.setattr(Night, "launcher", lambda self: pytest.fail("launched"))
    resource = NightlyResource(home=str(tmp_path / "home"), assets_dir=str(assets), deployment="local")
    defs = build_definitions(nightly=resource)
    with dg.instance_for_test() as instance:
        result = _run(defs, instance, partition_key=ONE)
        assert not result.success
        assert not _records(instance, instance.fetch_materializations)
    [failure] = _failures(result)
    assert f"{blocker}: the host's GPU lock folder is not a folder" in failure
    assert "NIGHTLY_GPU_LOCK_DIR" in failure and "chmod" not in failure


def test_env_from_refuses_a_name_a_pod_would_refuse_before_any_test_starts():
    from pipelines.defs.test_runs import TestRunsConfig

    environ = {"9LIVES": "1", "MINIRL_FAIL": "x"}
    assert TestRunsConfig(env_from=["MINIRL_FAIL"]).extra_env(environ) == {"MINIRL_FAIL": "x"}
    with pytest.raises(dg.Failure, match=r"env_from: '9LIVES' is not a valid environment variable name"):
        TestRunsConfig(env_from=["9LIVES"]).extra_env(environ)
    with pytest.raises(dg.Failure, match=r"env_from names 'MINIRL_HANG', which is not set"):
        TestRunsConfig(env_from=["MINIRL_HANG"]).extra_env(environ)


def _check_statuses(instance) -> dict[str, tuple[str, bool]]:
    """Each partition's test_passed status as the UI reads it: (latest status, whether it is current)."""
    key = dg.AssetCheckKey(dg.AssetKey("test_runs"), "test_passed")
    return {i.partition_key: (i.latest_execution_status.value, i.is_current)
            for i in instance.event_log_storage.get_asset_check_partition_info([key])}


@pytest.mark.parametrize("way", ["pick of three", "one partition through pipes"])
def test_each_tests_check_is_its_partitions_current_status_as_the_ui_shows_it(cluster, way):
    """The UI's check Partitions view shows a partition's status only for a result tied to the
    partition's newest materialization: untargeted results read "Missing" for every test, so a
    maintainer could not see which tests failed there."""
    defs, pods = cluster
    if way == "pick of three":
        pods["watch"].outcomes = ["passed", "failed", "passed"]
        tags = {"dagster/asset_partition_range_start": PICK[0], "dagster/asset_partition_range_end": PICK[-1]}
        with dg.instance_for_test() as instance:
            assert _run(defs, instance, tags=tags).success
            statuses = _check_statuses(instance)
        order = [t for t, _ in pods["watch"].launched]  # outcomes went out in launch order
        assert len(order) == 3
        expected = {tid: ("SUCCEEDED" if o == "passed" else "FAILED", True)
                    for tid, o in zip(order, ["passed", "failed", "passed"], strict=True)}
        assert statuses == expected
    else:
        pods["pipes"].outcomes = ["failed"]
        with dg.instance_for_test() as instance:
            assert _run(defs, instance, partition_key=ONE).success
            assert _check_statuses(instance) == {ONE: ("FAILED", True)}


def test_the_nightly_launchpad_runs_the_picked_partitions_not_the_whole_nightly(cluster):
    """Jobs -> nightly -> Launchpad with a range of partitions and the job's own config: the picked
    tests of the cadence run, not every nightly test (the pick was ignored and the run still wore
    the picked partition's tag); every partition picked still means every registered test."""
    defs, pods = cluster
    pods["watch"].outcomes = ["passed"] * 20
    job = defs.resolve_job_def("nightly")
    config = job.partitioned_config.get_run_config_for_partition_key(PICK[0])  # what the Launchpad's editor holds
    assert config["ops"]["test_runs"]["config"]["cadence"] == "nightly"
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance, raise_on_error=False, run_config=config, tags={
            "dagster/asset_partition_range_start": PICK[0], "dagster/asset_partition_range_end": PICK[-1]})
        assert result.success, _failures(result)
    assert sorted(t for t, _ in pods["watch"].launched) == sorted(PICK)


LONG = "tests/e2e/fsdp/test_fsdp_long_math.py"  # labelled `long`: weekly only


@pytest.mark.parametrize("job_name", ["nightly", "weekly"])
def test_a_launchpad_range_of_a_cadence_job_keeps_the_jobs_cadence(cluster, tmp_path, job_name):
    """Jobs -> nightly -> Launchpad over every partition (or a range): Dagster applies the job's config
    only to a single picked partition, so the run got the schema's empty cadence; a nightly run ran the
    `long` test and was tagged and recorded "picked". The job's own cadence now stands in."""
    defs, pods = cluster
    pods["watch"].outcomes = ["passed"] * 20
    job = defs.resolve_job_def(job_name)
    keys = sorted(job.partitions_def.get_partition_keys())
    assert LONG in keys
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance, raise_on_error=False, run_config={}, tags={
            "dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
        assert result.success, _failures(result)
        tags = instance.get_run_by_id(result.run_id).tags
    launched = {t for t, _ in pods["watch"].launched}
    assert (LONG in launched) == (job_name == "weekly"), sorted(launched)
    assert tags["nightly/cadence"] == job_name
    record = yaml.safe_load((tmp_path / "home" / "runs" / f"{result.run_id}.json").read_text())
    assert record["cadence"] == job_name


DISABLED = "tests/e2e/megatron/test_multinode_sft.py"  # registered disabled: never launched


@pytest.mark.parametrize("way", ["asset page pick of a disabled test", "launchpad config refused"])
def test_a_run_that_launches_nothing_or_is_refused_still_carries_its_nightly_tags(cluster, way):
    """A run that launched nothing ("nothing to launch") or that its config refused carried none of the
    nightly/* tags docs/ui.md lists (they were written after those returns): the Runs page could not
    tell why it ran, on which deployment, for which cadence."""
    defs, pods = cluster
    with dg.instance_for_test() as instance:
        if way == "asset page pick of a disabled test":
            job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection={dg.AssetKey("test_runs")})
            result = job.execute_in_process(instance=instance, partition_key=DISABLED, raise_on_error=False)
            assert result.success, _failures(result)
            cadence = "picked"
        else:
            job = defs.resolve_job_def("nightly")
            config = {"ops": {"test_runs": {"config": {"cadence": "weekly", "env_from": ["NOPE_NOT_SET"]}}}}
            result = job.execute_in_process(instance=instance, raise_on_error=False, run_config=config, tags={
                "dagster/asset_partition_range_start": PICK[0], "dagster/asset_partition_range_end": PICK[-1]})
            assert "env_from names 'NOPE_NOT_SET'" in _failures(result)[0]
            cadence = "weekly"
        tags = instance.get_run_by_id(result.run_id).tags
    assert pods["watch"].launched == pods["pipes"].launched == []
    assert tags.get("nightly/reason") == "launched from the UI or Dagster's command line"
    assert (tags.get("nightly/cadence"), tags.get("nightly/deployment"), tags.get("nightly/pools")) == (
        cadence, "production", "h200")


def test_a_launch_with_no_partition_says_to_pick_them(cluster):
    """Jobs -> nightly -> Launchpad with no partition picked, once the inputs were ever materialized: the
    run failed in Dagster's own step code (reading the inputs' versions) with `Cannot access
    partition_key for a non-partitioned run`, which says nothing of what to do."""
    defs, pods = cluster
    with dg.instance_for_test() as instance:
        instance.report_runless_asset_event(dg.AssetMaterialization("model_weights", partition="tiny-lm"))
        result = defs.resolve_job_def("nightly").execute_in_process(instance=instance, raise_on_error=False)
        assert not result.success
    [refused] = [e.event_specific_data.error for e in result.all_events if e.event_type_value == "RESOURCE_INIT_FAILURE"]
    said = refused.message  # the run's and, in a step process of its own (`dagster dev`), the step's failure
    assert "names no partition" in said and "pick the partitions" in said, said
    assert "dagster/asset_partition_range_start" in said and "Cannot access partition_key" not in said
    assert not [e for e in result.all_events if e.event_type_value == "STEP_START"]
    assert pods["watch"].launched == pods["pipes"].launched == []


@pytest.mark.parametrize(("tags", "said"), [
    ({"dagster/partition": "../../../etc/passwd"},
     "'../../../etc/passwd' (run tag dagster/partition): not a test this code location lists now"),
    ({"dagster/partition": "tests/e2e/test_deleted.py"}, "reload the code location, Deployment -> Reload"),
    ({"dagster/asset_partition_range_start": PICK[-1], "dagster/asset_partition_range_end": PICK[0]},
     f"the partition range {PICK[-1]} .. {PICK[0]} (run tags dagster/asset_partition_range_start and "
     f"dagster/asset_partition_range_end) is empty: {PICK[-1]} comes after {PICK[0]}"),
])
def test_a_run_naming_a_partition_the_code_location_does_not_list_starts_nothing_and_says_which(cluster, tags, said):
    """`dagster job execute --tags '{"dagster/partition": KEY}'` (or the UI's pick of a test deleted before the
    code location was reloaded) with a key that is no test now: on an instance whose inputs were never built
    the run ran EVERY registered test and ended SUCCESS (the key's error swallowed, read as "all"), else it
    failed in Dagster's own step set-up with its internal error. It stops before the step, naming the key,
    its tag and what to do; a reversed range was told to reload the code location."""
    defs, pods = cluster
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("nightly").execute_in_process(instance=instance, raise_on_error=False,
                                                                      tags=tags)
        assert not result.success
    [refused] = [e.event_specific_data.error for e in result.all_events if e.event_type_value == "RESOURCE_INIT_FAILURE"]
    assert said in refused.message and "no test was started" in refused.message, refused.message
    assert not [e for e in result.all_events if e.event_type_value == "STEP_START"]
    assert pods["watch"].launched == pods["pipes"].launched == []


def test_a_range_end_deleted_since_the_ui_listed_it_is_named_with_its_tag():
    """The UI's stale pick (the run created by a code location that still listed the key, run by a fresh one
    that does not): Dagster refuses such a range at run creation in one process, so the rule is shown here."""
    from pipelines.defs.test_runs import partitions_problem

    order = ("tests/a.py", "tests/b.py")
    tags = {"dagster/asset_partition_range_start": "tests/a.py", "dagster/asset_partition_range_end": "tests/zz.py"}
    assert partitions_problem(tags, order).startswith(
        "'tests/zz.py' (run tag dagster/asset_partition_range_end): not a test this code location lists now")
    assert partitions_problem({**tags, "dagster/asset_partition_range_end": "tests/b.py"}, order) == ""
    assert partitions_problem({"dagster/partition": "tests/b.py"}, order) == ""


def _failed_partitions(instance, defs) -> set[str]:
    """The partitions of test_runs the UI counts as Failed (the asset's partition status cache)."""
    from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value

    parts = defs.resolve_assets_def("test_runs").partitions_def
    value = get_and_update_asset_status_cache_value(instance, dg.AssetKey("test_runs"), parts)
    return set(value.deserialize_failed_partition_subsets(parts).get_partition_keys()) if value else set()


@pytest.mark.parametrize("config", [{"labels": ["nosuch"]}, {"env_from": ["NOPE_NOT_SET"]}, {"timeout_floor_s": -5},
                                    {"tests": [LONG]}])
def test_a_run_its_config_refuses_shows_its_partitions_failed_in_dagster_as_docs_ui_says(cluster, tmp_path, config):
    """What docs/ui.md says of a refused run, as Dagster has it: no test ran and no record was written,
    the test's check keeps its result, yet Dagster counts the partition Failed (the newest run planned
    to materialize it failed without doing so: no Dagster hook refuses a run before it is created with
    its planned partitions) until a later run materializes it."""
    defs, pods = cluster
    pods["pipes"].outcomes = ["passed", "passed"]
    with dg.instance_for_test() as instance:
        assert _run(defs, instance, partition_key=ONE).success
        assert _failed_partitions(instance, defs) == set()
        refused = _run(defs, instance, partition_key=ONE, config={"ops": {"test_runs": {"config": config}}})
        assert not refused.success and pods["pipes"].launched == [(ONE, 1)]
        assert not (tmp_path / "home" / "runs" / f"{refused.run_id}.json").exists()
        assert _failed_partitions(instance, defs) == {ONE}
        assert _check_statuses(instance) == {ONE: ("SUCCEEDED", True)}
        assert _run(defs, instance, partition_key=ONE).success
        assert _failed_partitions(instance, defs) == set()


def test_a_failing_test_whose_registration_stops_loading_keeps_its_partition_and_a_red_check(cluster, tmp_path):
    """After a failed run, a typo in the test's registration (an unknown argument) dropped its partition
    at the next code-location load, and its red check with it: the UI's check view said Failed (0).
    The file keeps its path as a partition, and a run over it (a pick, or every registered test)
    reports its check failed with the located problem."""
    defs, pods = cluster
    pods["pipes"].outcomes = ["failed"]
    with dg.instance_for_test() as instance:
        assert _run(defs, instance, partition_key=ONE).success
        assert _check_statuses(instance) == {ONE: ("FAILED", True)}
        test_file = tmp_path / "minirl" / ONE
        text = test_file.read_text()
        test_file.write_text(text.replace('labels=["lora", "fsdp"])', 'labels=["lora", "fsdp"], bogus=1)'))
        resource = defs.resources["nightly"]
        reloaded = build_definitions(nightly=resource)  # Deployment -> Reload
        job = reloaded.resolve_job_def("tests")
        assert ONE in job.partitions_def.get_partition_keys()
        result = _run(reloaded, instance, partition_key=ONE)
        assert not result.success
        assert "registration does not load" in _failures(result)[0]
        assert _check_statuses(instance)[ONE] == ("FAILED", True)
        pods["watch"].outcomes = ["passed"] * 20
        result = _run(reloaded, instance, request=run_request(job.partitions_def.get_partition_keys(),
                                                              RunSelection(), "production", []))
        assert result.success, _failures(result)
        assert _check_statuses(instance)[ONE] == ("FAILED", True)
        assert ONE not in [t for t, _ in pods["watch"].launched]
        described = [e.asset_check_evaluation_data.description for e in result.all_events
                     if e.event_type_value == "ASSET_CHECK_EVALUATION"
                     and e.asset_check_evaluation_data.partition == ONE]
        assert described and f"{ONE}:12:" in described[-1] and "bogus" in described[-1]


def test_a_launchpad_config_that_selects_nothing_names_the_run_config_field_not_a_flag(cluster):
    """Jobs -> nightly -> Launchpad, one partition of a `long` test with cadence nightly: the failure
    told a UI user to `drop --cadence`; there the fix is the run config field."""
    defs, _ = cluster
    job = defs.resolve_job_def("nightly")
    key = "tests/e2e/fsdp/test_fsdp_long_math.py"
    config = job.partitioned_config.get_run_config_for_partition_key(key)
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance, raise_on_error=False, run_config=config, partition_key=key)
    [message] = _failures(result)
    assert "run config field ops.test_runs.config.cadence = 'nightly' selects none" in message
    assert "--cadence" not in message


def test_only_a_file_none_of_whose_registrations_loads_gets_a_partition_of_its_path(cluster, tmp_path):
    """A file named so that it cannot be a partition key (`test_sft...py`: the catalog says to rename it)
    made every code-location load fail (Dagster refuses the key), and a two-entry file whose tests load
    but whose prepare() has a problem got a fake red "registration does not load" partition."""
    defs, _ = cluster
    e2e = tmp_path / "minirl" / "tests" / "e2e"
    sft = e2e / "megatron" / "test_sft_math.py"
    (e2e / "megatron" / "test_sft...py").write_text(sft.read_text())
    ckpt = e2e / "ckpt" / "test_ckpt_resume.py"
    ckpt.write_text(ckpt.read_text().replace(
        "def prepare():\n",
        "def prepare():\n    exec_command(\"hf download minirl/toy-math --repo-type dataset --local-dir "
        "/root/datasets/toy~math\")\n", 1))
    reloaded = build_definitions(nightly=defs.resources["nightly"])  # Deployment -> Reload
    keys = reloaded.resolve_job_def("tests").partitions_def.get_partition_keys()
    problems = {p.path for p in reloaded.resources["nightly"].night().catalog.problems}
    assert {"tests/e2e/megatron/test_sft...py", "tests/e2e/ckpt/test_ckpt_resume.py"} <= problems, problems
    assert not [k for k in keys if "test_sft..." in k]
    assert "tests/e2e/ckpt/test_ckpt_resume.py" not in keys
    assert [k for k in keys if k.startswith("tests/e2e/ckpt/test_ckpt_resume.py::")], keys
