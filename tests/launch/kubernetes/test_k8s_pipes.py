"""The Dagster path: PipesK8sClient runs our pod spec; our classification overrules its exit-code verdict.

Runs dagster-k8s's real client against the stand-in API server through a kubeconfig file.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import yaml

from pipelines.launch.base import LaunchRequest
from tests.conftest import make_test
from tests.launch.kubernetes import pods
from tests.launch.kubernetes.apiserver import StandInApiServer, Step
from tests.launch.kubernetes.test_k8s_launcher import DEPLOYMENT, POOL

pytestmark = pytest.mark.slow
dagster = pytest.importorskip("dagster")
dagster_k8s = pytest.importorskip("dagster_k8s")


def kubeconfig(tmp_path: Path, url: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "stand-in",
        "clusters": [{"name": "stand-in", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "u", "namespace": "nightly-e2e"}}],
    }))
    return str(path)


def run_pipes(tmp_path, script, timeout_s=600, server=None, log_join_s=10.0, **waits):
    """One attempt through run_test_pod in a real Dagster step; ``waits``: the deployment's
    unschedulable_wait_s / startup_wait_s."""
    from pipelines.launch.kubernetes.pipes import run_test_pod

    req = LaunchRequest(test=make_test(id="tests/e2e/test_grpo.py", path="tests/e2e/test_grpo.py", gpus=4), repo_path=tmp_path,
                        timeout_s=timeout_s, log_path=tmp_path / "grpo.log", run_id="r1", night="2026-12-01", pool="h200")
    deployment = dataclasses.replace(DEPLOYMENT, **waits)
    out: list = []
    server = server or StandInApiServer()
    server.script = script
    with server:
        client = dagster_k8s.PipesK8sClient(kubeconfig_file=kubeconfig(tmp_path, server.url), poll_interval=0.05)

        @dagster.asset
        def grpo(context):
            out.extend(run_test_pod(context, req, POOL, deployment, pipes_client=client,
                                    core_v1_api=server.core_v1(), settle_s=2.0, tick_s=0.1, log_join_s=log_join_s))
            return dagster.MaterializeResult(metadata={"outcome": out[0].outcome})

        result = dagster.materialize([grpo], instance=dagster.DagsterInstance.ephemeral())
        assert result.success
    attempt, invocation = out
    return attempt, invocation, server


def test_a_pod_that_passes_is_passed_and_keeps_our_pod_spec(tmp_path):
    attempt, invocation, server = run_pipes(tmp_path, lambda pod, node: pods.passes(node))
    assert (attempt.outcome, attempt.node) == ("passed", "h200-a") and invocation is not None
    [body] = server.created
    assert body["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4", "memory": "128Gi"}
    assert body["spec"]["initContainers"][0]["name"] == "preflight"
    assert body["metadata"]["labels"]["nightly-e2e.io/test"] == "tests-e2e-test_grpo.py"


def test_oom_killed_with_exit_0_is_a_failure_although_dagster_k8s_calls_it_success(tmp_path):
    attempt, invocation, _ = run_pipes(tmp_path, lambda pod, node: pods.ends(node, pods.terminated("Failed", 0, "OOMKilled")))
    assert invocation is not None, "dagster-k8s judged the exit code only"
    assert (attempt.outcome, attempt.reason) == ("failed", "oom_killed")


def test_exit_0_without_the_wrappers_completion_record_fails_although_dagster_k8s_calls_it_success(tmp_path):
    """A test that calls os._exit(0) halfway: the pod Succeeds, the wrapper wrote no record."""
    attempt, invocation, server = run_pipes(tmp_path, lambda pod, node: pods.ends(
        node, pods.terminated("Succeeded", 0, "Completed", record=False)))
    assert invocation is not None, "dagster-k8s judged the exit code only"
    assert (attempt.outcome, attempt.reason) == (
        "failed", "exited before the test finished (exit code 0 without the wrapper's completion record)")
    [body] = server.created
    assert "--result" in body["spec"]["containers"][0]["command"]
    assert "NIGHTLY_ATTEMPT_TOKEN" in {e["name"] for e in body["spec"]["containers"][0]["env"]}


def test_a_failed_preflight_is_an_infra_error_on_that_node(tmp_path):
    attempt, invocation, _ = run_pipes(tmp_path, lambda pod, node: pods.ends(node, pods.preflight_failed(86)))
    assert (attempt.outcome, attempt.reason, attempt.node, invocation) == ("infra_error", "gpu_unusable", "h200-a", None)
    assert "DagsterK8sError" in attempt.details["dagster_k8s"]


SECRET = "hf_" + "PipesT0kenValue" * 3


def _ran_42_seconds(pod):
    pods.terminated("Succeeded", 0, "Completed")(pod)
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    state.update(startedAt="2026-12-01T02:00:00Z", finishedAt="2026-12-01T02:00:42Z")


def test_the_attempt_log_is_written_with_tokens_masked_there_and_in_the_step_logs(tmp_path, capfd):
    script = lambda pod, node: pods.passes(node, logs=(f"token is {SECRET}", "loss went down"))  # noqa: E731
    attempt, _, _ = run_pipes(tmp_path, script)
    text = (tmp_path / "grpo.log").read_text()
    assert "token is hf_***" in text and "loss went down" in text and "verdict passed" in text
    out, err = capfd.readouterr()
    assert "loss went down" in out, "dagster-k8s forwards the pod's lines to the step's stdout"
    assert SECRET not in text + out + err and attempt.log_path == str(tmp_path / "grpo.log")


def test_a_pass_whose_log_the_api_never_served_is_an_infra_error_not_a_pass_nor_the_tests_failure(tmp_path):
    """The logs endpoint refuses every stream (as the kubelet's proxy does when it fails): the test's
    lines, a failed configuration among them, never reach the attempt log the night judges, and its
    outcome is unknown: infra_error/log_unreadable, as on the watch launcher."""
    server = StandInApiServer()
    server.fail("GET", "/log", 503, times=10_000)
    attempt, _, _ = run_pipes(tmp_path, lambda pod, node: pods.passes(node, logs=("config tp2: failed",)),
                              server=server, log_join_s=1.0)
    # dagster-k8s deletes the pod once it ended: whether that came before the wait for the log ended or not
    whys = ("the pod's log stream had not ended 1 s after the attempt did (the last try: 503 Service Unavailable)",
            "the pod was gone before its log stream could be read to its end (the last try: 503 Service Unavailable)")
    assert (attempt.outcome, attempt.reason, attempt.details["retriable"], attempt.details["log_unfinished"]) == (
        "infra_error", "log_unreadable", "true", "true")
    text = (tmp_path / "grpo.log").read_text()
    [why] = [w for w in whys if f"# nightly: {w}: its log is unfinished (" in text]
    assert "config tp2" not in text
    assert f"# nightly: verdict infra_error: {why}: its log is unfinished, so the test's outcome is unknown (passed: " in text


def test_elapsed_is_the_test_containers_own_time_not_the_wall_time_around_the_pod(tmp_path):
    attempt, _, _ = run_pipes(tmp_path, lambda pod, node: [*pods.ends(node), Step(mutate=_ran_42_seconds)])
    assert attempt.outcome == "passed" and attempt.elapsed_s == 42.0
    assert float(attempt.details["wall_s"]) < 42.0


def test_a_test_past_its_timeout_is_timed_out_and_its_pod_deleted_then_not_passed_when_it_ends(tmp_path):
    """dagster-k8s knows no test timeout: the pod would run on and exit 0, a false pass."""
    def slow(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running(), logs=("training",)),
                Step(delay_s=8.0, mutate=pods.terminated("Succeeded", 0, "Completed"))]

    t0 = time.monotonic()
    attempt, _, server = run_pipes(tmp_path, slow, timeout_s=1)
    assert (attempt.outcome, attempt.reason) == ("timed_out", "test_timeout")
    assert 1.0 <= attempt.elapsed_s < 6.0 and time.monotonic() - t0 < 8.0
    assert not server.state.pods, "the pod runs on after its timeout"


@pytest.mark.parametrize("script, waits, reason", [
    (lambda pod, node: [Step(mutate=pods.unschedulable())], {"unschedulable_wait_s": 1}, "unschedulable"),
    (lambda pod, node: [Step(mutate=pods.scheduled(node)), Step(mutate=pods.preflight_running())],
     {"startup_wait_s": 1}, "startup_timeout"),
], ids=["never scheduled", "stuck in the pre-flight"])
def test_a_pod_that_cannot_start_is_an_infra_error_after_the_deployments_wait_not_a_day(tmp_path, script, waits, reason):
    t0 = time.monotonic()
    attempt, invocation, server = run_pipes(tmp_path, script, **waits)
    assert (attempt.outcome, attempt.reason, invocation) == ("infra_error", reason, None)
    assert time.monotonic() - t0 < 30.0 and not server.state.pods


@pytest.mark.parametrize("waiting", [True, False], ids=["container waiting", "no container status"])
def test_a_pod_failed_before_its_container_ran_is_judged_at_once_not_after_dagster_k8s_ready_wait(tmp_path, waiting):
    """The kubelet failed the pod before its test container started: dagster-k8s waits for that
    container to become ready (5 h, or a day with no container status) while the attempt held its
    GPUs. Now the attempt ends at once, as on the watch launcher: failed_without_container, retriable."""
    import threading

    out: list = []
    script = lambda pod, node: [Step(mutate=pods.scheduled(node)), Step(mutate=pods.failed_before_start(waiting))]  # noqa: E731
    worker = threading.Thread(target=lambda: out.append(run_pipes(tmp_path, script, timeout_s=20, startup_wait_s=5,
                                                                  unschedulable_wait_s=5, log_join_s=1.0)), daemon=True)
    worker.start()
    worker.join(60.0)
    assert not worker.is_alive(), "the attempt still waits on dagster-k8s, past the test's timeout and every wait"
    [(attempt, _, server)] = out
    assert (attempt.outcome, attempt.reason, attempt.node, attempt.details["retriable"]) == (
        "infra_error", "failed_without_container", "h200-a", "true")
    assert not server.state.pods


def test_an_image_pull_error_is_a_retriable_image_pull_as_on_the_watch_path_not_a_delete(tmp_path):
    """dagster-k8s raises at the first ErrImagePull and deletes the pod; a throttled registry is
    the infrastructure's trouble, worth another node, as the watch launcher says after its wait."""
    def pull_error(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.waiting("ErrImagePull", "429 Too Many Requests")),
                Step(delay_s=0.3, mutate=pods.waiting("ImagePullBackOff", "Back-off pulling image"))]

    attempt, invocation, _ = run_pipes(tmp_path, pull_error, startup_wait_s=30)
    assert (attempt.outcome, attempt.reason, attempt.details["retriable"], attempt.node) == (
        "infra_error", "image_pull", "true", "h200-a")
    assert "ErrImagePull" in attempt.details["message"] and invocation is None


def test_a_terminated_run_deletes_its_pod_and_is_interrupted_not_left_running_to_its_timeout(tmp_path):
    """A UI rerun of one partition on Kubernetes, terminated from the UI: the interrupt handler calls
    the launcher's cancel_all (execute._dispatch), as for the other launchers. The pod is deleted at
    the next tick, the attempt is ``interrupted`` (never the node's fault), and a launch after it
    starts no pod."""
    import threading

    from pipelines.launch.kubernetes.pipes import PipesLauncher

    req = LaunchRequest(test=make_test(id="tests/e2e/test_grpo.py", path="tests/e2e/test_grpo.py", gpus=4),
                        repo_path=tmp_path, timeout_s=600, log_path=tmp_path / "grpo.log", run_id="r1",
                        night="2026-12-01", pool="h200")
    out: list = []
    with StandInApiServer(script=lambda pod, node: [Step(mutate=pods.scheduled(node)),
                                                    Step(mutate=pods.running(), logs=("training",))]) as server:
        client = dagster_k8s.PipesK8sClient(kubeconfig_file=kubeconfig(tmp_path, server.url), poll_interval=0.05)

        @dagster.asset
        def grpo(context):
            launcher = PipesLauncher(context, DEPLOYMENT, pipes_client=client, core_v1_api=server.core_v1())

            def cancel_when_running():
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not any(
                        (p.get("status") or {}).get("phase") == "Running" for p in server.state.pods.values()):
                    time.sleep(0.05)
                out.append(launcher.cancel_all())

            threading.Thread(target=cancel_when_running, daemon=True).start()
            t0 = time.monotonic()
            out.append(launcher.launch(req))
            out.append(time.monotonic() - t0)
            out.append(launcher.launch(dataclasses.replace(req, attempt=2, log_path=tmp_path / "grpo.2.log")))
            return dagster.MaterializeResult()

        dagster.materialize([grpo], instance=dagster.DagsterInstance.ephemeral())
        still = dict(server.state.pods)
    running, attempt, took, after = out
    assert running == ["tests/e2e/test_grpo.py"]
    assert (attempt.outcome, attempt.reason, attempt.node) == ("interrupted", "deleted", "h200-a")
    assert took < 20, "the step waited for the pod instead of deleting it"
    assert not still, "the pod was left running"
    assert "the night was interrupted and its pod deleted" in (tmp_path / "grpo.log").read_text()
    assert (after.outcome, after.reason) == ("interrupted", "cancelled") and len(server.created) == 1


def launch_twice(tmp_path, script, server=None):
    """Two attempts of one test through one PipesLauncher in a real Dagster step, as the dispatcher
    retries an infra error on another node; returns (attempt, outcome, reason, retriable) of each."""
    from pipelines.launch.kubernetes.pipes import PipesLauncher

    test = make_test(id="tests/e2e/test_grpo.py", path="tests/e2e/test_grpo.py", gpus=4)
    out: list = []
    server = server or StandInApiServer()
    server.script = script
    with server:
        client = dagster_k8s.PipesK8sClient(kubeconfig_file=kubeconfig(tmp_path, server.url), poll_interval=0.05)

        @dagster.asset
        def grpo(context):
            launcher = PipesLauncher(context, DEPLOYMENT, pipes_client=client, core_v1_api=server.core_v1())
            for n in (1, 2):
                a = launcher.launch(LaunchRequest(test=test, repo_path=tmp_path, timeout_s=600, run_id="r1",
                                                  log_path=tmp_path / f"grpo.attempt{n}.log", night="2026-12-01",
                                                  pool="h200", attempt=n))
                out.append((a.attempt, a.outcome, a.reason, a.details["retriable"]))
            return dagster.MaterializeResult()

        assert dagster.materialize([grpo], instance=dagster.DagsterInstance.ephemeral()).success
    return out


def test_a_second_unreadable_log_of_a_test_that_night_is_final_on_the_pipes_path_too(tmp_path):
    """The once-per-night rule lived in the watch launcher only: through Pipes, every node retried a
    test whose log the API never serves. Now the second one is final, as on the watch launcher."""
    server = StandInApiServer()
    server.fail("GET", "/log", 503, times=10_000)
    assert launch_twice(tmp_path, lambda pod, node: pods.passes(node), server) == [
        (1, "infra_error", "log_unreadable", "true"), (2, "infra_error", "log_unreadable", "false")]
