"""The Kubernetes launcher's lifecycle against the stand-in API server, with the real client.

Every row of k8s-facts.md: the right outcome and reason, retried on another node or not, the
node recorded, logs streamed, the pod deleted at the end.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import kubernetes_validate
import pytest

from pipelines.core.health import detect_bad_nodes
from pipelines.core.specs import DeploymentSpec, PoolSpec
from pipelines.launch.base import LaunchRequest
from pipelines.launch.kubernetes.launcher import KubernetesLauncher, attempt_log_path
from pipelines.launch.kubernetes.nodes import cordon, cordon_bad_nodes
from pipelines.launch.kubernetes.podspec import WRAPPER_PYTHONPATH
from tests.conftest import make_test
from tests.launch.kubernetes import pods
from tests.launch.kubernetes.apiserver import StandInApiServer, Step

#: tolerating the GPU operator's taint, as assets/cluster.yaml does: the launcher pins pods only to nodes whose taints
#: the pool tolerates
POOL = PoolSpec(name="h200", nodes=4, gpus_per_node=8, image="ghcr.io/example/rl:nightly",
                node_selector={"nvidia.com/gpu.product": "NVIDIA-H200"}, queue="h200-nightly",
                tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},))
DEPLOYMENT = DeploymentSpec(name="production", launcher="kubernetes", pools=(POOL,), namespace="nightly-e2e",
                            cache_pvc="nightly-model-cache", hf_token_secret="hf-token", max_infra_retries=2,
                            unschedulable_wait_s=1800)
SECRET = "hf_" + "S3cr3tT0k3nValue" * 3


#: the pending/startup limit of the tests that wait it out (marked slow): long enough for a retry's
#: scripted pod to be scheduled on a loaded 2-CPU machine (2 s was not: a first pod was seen 2 s pending)
PENDING_WAIT_S = 5.0
#: every other test's limit: its scripted pods never stay pending on purpose, so the limit only
#: stops a hang and a slow machine cannot turn a pass into an "unschedulable" retry
PATIENT_WAIT_S = 60.0


def launcher(server: StandInApiServer, **kw) -> tuple[KubernetesLauncher, list]:
    seen: list = []
    kw = {"pending_wait_s": PATIENT_WAIT_S, "startup_wait_s": PATIENT_WAIT_S, "node_lost_wait_s": 0.1, "backoff_s": 0.01, "tick_s": 0.02, "watch_timeout_s": 1, "log_join_s": 2.0, **kw}
    return KubernetesLauncher(server.core_v1(), DEPLOYMENT, on_attempt=seen.append, **kw), seen


def request(tmp_path: Path, **kw) -> LaunchRequest:
    test = make_test(id="tests/e2e/test_grpo.py", path="tests/e2e/test_grpo.py", gpus=4)
    return LaunchRequest(test=test, repo_path=tmp_path, timeout_s=1200, log_path=tmp_path / "logs" / "grpo.attempt1.log",
                         env={"HF_TOKEN": SECRET, "MARK": "m1"}, run_id="run-1", night="2026-12-01", pool="h200", **kw)


def run(tmp_path, script, **kw):
    with StandInApiServer(script=script) as server:
        launch, seen = launcher(server, **kw)
        lines: list[str] = []
        final = launch.launch(request(tmp_path), lines.append)
    return final, seen, server, lines


def test_a_flood_of_pod_output_is_capped_to_head_and_tail_as_a_local_tests_is(tmp_path):
    """A pod printing 5 MB against a 256 KB cap: the attempt log (and so the copy the night stores)
    keeps the head and the tail with the cut said between, a configuration failure printed in the cut
    middle still fails the test, and the UI's stream stops at the head with one line saying so."""
    from pipelines.launch.base import judge_reported_configs

    flood = [f"line {i:06d} " + "x" * 100 for i in range(40_000)]
    flood[20_000] = "[minirl] config fsdp-tp1: failed"

    def script(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running(), logs=("FIRST LINE", *flood)),
                Step(mutate=pods.terminated("Succeeded", 0, "Completed"), logs=("LAST LINE",))]

    cap = 256 * 1024
    final, _, _, lines = run(tmp_path, script, log_cap_bytes=cap, log_join_s=60)
    text = Path(final.log_path).read_text()
    assert final.outcome == "passed"
    assert Path(final.log_path).stat().st_size < cap + 1024
    assert text.startswith("# nightly: tests/e2e/test_grpo.py attempt 1 pod ") and "FIRST LINE" in text
    assert "LAST LINE\n# nightly: verdict passed" in text
    assert "# nightly: output cut here:" in text and int(final.details["log_cut_bytes"]) > 4_000_000
    assert "[minirl] config fsdp-tp1: failed" in text
    assert judge_reported_configs(final).outcome == "failed"
    assert len(lines) < 3000 and lines[-1] == f"# nightly: output over {cap // 2} bytes; the rest is in the log file (capped)"


def test_a_passing_pod_is_passed_with_its_node_logs_and_cleanup(tmp_path):
    final, seen, server, lines = run(tmp_path, lambda pod, node: pods.passes(node))
    assert (final.outcome, final.reason, final.node, final.exit_code) == ("passed", "", "h200-a", 0)
    assert len(seen) == 1 and final.details["attempts"] == "1:passed@h200-a"
    assert lines == ["step 1 loss=2.0", "step 2 loss=1.5", "done"]
    text = Path(final.log_path).read_text()
    assert "step 2 loss=1.5" in text and "verdict passed" in text
    assert server.deleted == [final.details["pod"]] and not server.state.pods


def test_a_nonzero_exit_is_a_test_failure_and_never_retried(tmp_path):
    final, seen, server, _ = run(tmp_path, lambda pod, node: pods.ends(node, pods.terminated("Failed", 1, "Error")))
    assert (final.outcome, final.reason, final.exit_code, final.node) == ("failed", "exit_code", 1, "h200-a")
    assert len(seen) == 1 and len(server.created) == 1


def test_the_active_deadline_is_timed_out_not_retried(tmp_path):
    final, seen, _, _ = run(tmp_path, lambda pod, node: pods.ends(
        node, pods.terminated("Failed", 137, "Error", pod_reason="DeadlineExceeded")))
    assert (final.outcome, final.reason, len(seen)) == ("timed_out", "deadline_exceeded", 1)


def test_oom_killed_is_a_test_failure_even_when_the_exit_code_is_zero(tmp_path):
    final, seen, _, _ = run(tmp_path, lambda pod, node: pods.ends(node, pods.terminated("Failed", 0, "OOMKilled")))
    assert (final.outcome, final.reason, len(seen)) == ("failed", "oom_killed", 1)


NO_RECORD = "exited before the test finished (exit code 0 without the wrapper's completion record)"


def test_exit_0_without_the_wrappers_completion_record_is_a_test_failure_as_locally(tmp_path):
    final, seen, _, _ = run(tmp_path, lambda pod, node: pods.ends(
        node, pods.terminated("Succeeded", 0, "Completed", record=False)))
    assert (final.outcome, final.reason, final.exit_code, len(seen)) == ("failed", NO_RECORD, 0, 1)
    assert f"verdict failed: {NO_RECORD}" in Path(final.log_path).read_text()


HALFWAY = "import os\n\ndef execute():\n    print('step 1 of 10', flush=True)\n    os._exit(0)\n"
WHOLE = "def execute():\n    print('step 10 of 10', flush=True)\n"


EXIT_74 = "import os\n\ndef execute():\n    print('loss diverged; bailing out', flush=True)\n    os._exit(74)\n"
#: the termination-message file taken by a folder: the wrapper cannot write its record there
RECORD_BLOCKED = ("import glob, os\n\ndef execute():\n    for f in glob.glob(os.environ['TERMINATION_LOGS'] + '/termination-*.log'):\n"
                  "        os.unlink(f)\n        os.mkdir(f)\n")


@pytest.mark.parametrize("source, outcome, reason, env", [
    (HALFWAY, "failed", NO_RECORD, {}),
    (WHOLE, "passed", "", {}),
    (WHOLE, "passed", "", {"PYTHONPATH": "."}),  # assets/repos.yaml's "{repo}" in a pod: replaces the image's
    (EXIT_74, "failed", "exit_code", {}),  # the test's own 74, not the wrapper's
    (RECORD_BLOCKED, "infra_error", "result_not_written", {}),
], ids=["os._exit(0) halfway", "whole", "the repo sets PYTHONPATH", "os._exit(74) halfway", "record not written"])
def test_the_real_wrapper_in_the_pod_passes_only_a_test_that_ran_to_its_end(tmp_path, source, outcome, reason, env):
    from tests.launch.kubernetes.kubelet import TestPodKubelet

    repo = tmp_path / "fw"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_t.py").write_text(source)
    kubelet = TestPodKubelet.create(tmp_path, repo, WRAPPER_PYTHONPATH)
    req = dataclasses.replace(request(tmp_path), test=make_test(id="tests/test_t.py", path="tests/test_t.py", gpus=0))
    env = {**env, "TERMINATION_LOGS": str(tmp_path)}  # where the kubelet keeps the termination-message files
    with StandInApiServer(script=kubelet.steps) as server:
        launch, _ = launcher(server, retries=0, env=env)
        final = launch.launch(req)
    assert [rc for rc, _ in kubelet.runs] == [74 if source in (EXIT_74, RECORD_BLOCKED) else 0], kubelet.runs
    assert (final.outcome, final.reason) == (outcome, reason)


def _bad_first_node(*mutations):
    """h200-a breaks as described; every other node passes."""
    def script(pod, node):
        return pods.ends(node, *mutations) if node == "h200-a" else pods.passes(node)
    return script


@pytest.mark.parametrize("reason, mutations", [
    ("evicted", (pods.together(pods.disruption("TerminationByKubelet"),
                               pods.terminated("Failed", 137, "ContainerStatusUnknown", pod_reason="Evicted")),)),
    ("preempted", (pods.disruption("PreemptionByScheduler"), pods.terminated("Failed", 143, "Error"))),
    ("evicted", (pods.disruption("EvictionByEvictionAPI"),)),
    ("preempted", (pods.disruption("WorkloadEvictedDueToPreempted", ctype="TerminationTarget"),)),
    ("node_shutdown", (pods.together(pods.disruption("TerminationByKubelet"),
                                     pods.terminated("Failed", 137, "Error", pod_reason="Terminated")),)),
    ("gpu_unusable", (pods.preflight_failed(86),)),
    ("node_lost", (pods.node_not_ready(),)),
    ("node_lost", (pods.node_not_ready(), pods.disruption("DeletionByTaintManager"))),
    ("node_lost", (pods.container_lost(),)),  # the node rebooted before it was marked NotReady
    ("node_lost", (pods.container_lost("Unknown", 255, message=""),)),
])
def test_node_trouble_is_infra_and_retried_on_another_node(tmp_path, reason, mutations):
    final, seen, server, _ = run(tmp_path, _bad_first_node(*mutations))
    assert [(a.outcome, a.reason, a.node) for a in seen] == [("infra_error", reason, "h200-a"), ("passed", "", "h200-b")]
    retry_affinity = server.created[1]["spec"]["affinity"]["nodeAffinity"]
    assert retry_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchFields"] == [
        {"key": "metadata.name", "operator": "NotIn", "values": ["h200-a"]}]
    assert final.attempt == 2 and final.log_path.endswith("grpo.attempt2.log")
    assert final.details["attempts"] == f"1:infra_error/{reason}@h200-a; 2:passed@h200-b"
    assert not server.state.pods, "every attempt's pod is cleaned up"


@pytest.mark.parametrize("reason, exit_code", [("ContainerStatusUnknown", 137), ("Unknown", 255)])
def test_containers_lost_in_a_node_reboot_are_the_nodes_evidence_not_the_tests_failures(tmp_path, reason, exit_code):
    """Two tests lose their container on h200-a (rebooted before it was marked NotReady): each passes on
    another node, and h200-a is the bad node, by the infra rule, with no test failure counted."""
    script = _bad_first_node(pods.container_lost(reason, exit_code))
    seen: list = []
    with StandInApiServer(script=script) as server:
        for tid in ("tests/e2e/test_grpo.py", "tests/e2e/test_sft.py"):
            launch, attempts = launcher(server)
            req = dataclasses.replace(request(tmp_path), test=make_test(id=tid, path=tid, gpus=4),
                                      log_path=tmp_path / "logs" / f"{Path(tid).stem}.attempt1.log")
            assert launch.launch(req).outcome == "passed"
            seen += attempts
    assert [(a.outcome, a.reason, a.node) for a in seen] == [("infra_error", "node_lost", "h200-a"), ("passed", "", "h200-b")] * 2
    assert f"container={reason} exit={exit_code}" in seen[0].details["message"]
    [finding] = detect_bad_nodes(seen)
    assert (finding.node, finding.rule) == ("h200-a", "infra")
    assert finding.evidence.startswith("2 infra error(s) on this node (node_lost x2)"), finding.evidence


def test_gpu_vanished_at_admission_is_gpu_unusable_and_retried(tmp_path):
    def script(pod, node):
        if node == "h200-a":
            return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.failed_at_admission())]
        return pods.passes(node)
    _, seen, _, _ = run(tmp_path, script)
    assert [(a.reason, a.node) for a in seen] == [("gpu_unusable", "h200-a"), ("", "h200-b")]


RUNC_FAILED = ("failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
               "failed: unable to start container process: error during container init: cgroup: mkdir "
               "/sys/fs/cgroup/kubepods: read-only file system")


@pytest.mark.parametrize("container, message, reason, rule_needs", [
    ("preflight", pods.NVML_MISMATCH, "gpu_unusable", 1),  # the NVIDIA runtime: one proves the node bad
    ("test", pods.NVML_MISMATCH, "gpu_unusable", 1),
    ("preflight", RUNC_FAILED, "start_error", 2),  # the node's runtime: two, as a lost node
    ("test", RUNC_FAILED, "start_error", 2),
])
def test_a_container_the_nodes_runtime_cannot_start_is_the_nodes_fault_retried_elsewhere(
        tmp_path, container, message, reason, rule_needs):
    """The runtime could not start the pre-flight or the test (StartError, exit 128): no process of ours ran,
    so neither the pre-flight's exit codes nor the test's say anything. Each test passes on another node,
    and h200-a is named bad by the infra rule."""
    def script(pod, node):
        if node != "h200-a":
            return pods.passes(node)
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.preflight_running()),
                Step(mutate=pods.start_error(message, container))]
    seen: list = []
    with StandInApiServer(script=script) as server:
        for tid in ("tests/e2e/test_grpo.py", "tests/e2e/test_sft.py")[:rule_needs]:
            launch, attempts = launcher(server)
            req = dataclasses.replace(request(tmp_path), test=make_test(id=tid, path=tid, gpus=4),
                                      log_path=tmp_path / "logs" / f"{Path(tid).stem}.attempt1.log")
            assert launch.launch(req).outcome == "passed", attempts[0].details["message"]
            seen += attempts
    assert [(a.outcome, a.reason, a.node, a.details["retriable"]) for a in seen] == [
        ("infra_error", reason, "h200-a", "true"), ("passed", "", "h200-b", "false")] * rule_needs
    assert "driver/library version mismatch" in seen[0].details["message"] or "read-only file system" in \
        seen[0].details["message"], seen[0].details["message"]
    [finding] = detect_bad_nodes(seen)
    assert (finding.node, finding.rule) == ("h200-a", "infra")


def test_a_command_missing_from_the_image_is_not_retried_nor_blamed_on_the_node(tmp_path):
    """``sh`` missing from the image: the runtime cannot start the pre-flight on any node."""
    missing = ('failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create '
               'failed: unable to start container process: exec: "sh": executable file not found in $PATH: unknown')
    final, seen, _, _ = run(tmp_path, lambda pod, node: [Step(mutate=pods.scheduled(node)),
                                                         Step(mutate=pods.start_error(missing))])
    assert [(a.outcome, a.reason, a.details["retriable"]) for a in seen] == [
        ("infra_error", "image_cannot_start", "false")]
    assert not detect_bad_nodes(seen * 3)


@pytest.mark.parametrize("status_reason", ["OutOfcpu", "OutOfmemory", "OutOfpods", "NodeAffinity"])
def test_a_pod_the_kubelet_rejects_at_admission_is_retried_on_another_node(tmp_path, status_reason):
    """The scheduler placed the pod, the kubelet then refused it (its node filled up meanwhile, or its labels
    changed): the pod never ran, so another node may take it; it is not the node's fault."""
    def script(pod, node):
        if node == "h200-a":
            return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.failed_at_admission(status_reason))]
        return pods.passes(node)
    _, seen, _, _ = run(tmp_path, script)
    assert [(a.outcome, a.reason, a.node, a.details["retriable"]) for a in seen] == [
        ("infra_error", "admission_rejected", "h200-a", "true"), ("passed", "", "h200-b", "false")]
    assert not detect_bad_nodes(seen * 2)


@pytest.mark.parametrize("waiting", [True, False], ids=["container waiting", "no container status"])
def test_a_pod_that_ended_without_running_its_container_is_retried_on_another_node(tmp_path, waiting):
    """The kubelet failed the pod before its test container started (no reason the table names): the test
    never ran, so this says nothing of it. It was infra_error/failed_without_container, not retried: the
    night lost the test. Now it is retried on another node, and is not counted against the first."""
    def script(pod, node):
        if node == "h200-a":
            return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.failed_before_start(waiting))]
        return pods.passes(node)
    final, seen, _, _ = run(tmp_path, script)
    assert [(a.outcome, a.reason, a.node, a.details["retriable"]) for a in seen] == [
        ("infra_error", "failed_without_container", "h200-a", "true"), ("passed", "", "h200-b", "false")]
    assert final.details["attempts"] == "1:infra_error/failed_without_container@h200-a; 2:passed@h200-b"
    assert not detect_bad_nodes(seen * 2)


def test_a_pod_that_never_runs_its_container_on_any_node_is_retried_once_then_final(tmp_path):
    """Failed before its container started on h200-a and again on h200-b: whatever ails it is not one
    node's, so the second is final (not a third node), and neither counts as the test's failure."""
    final, seen, _, _ = run(tmp_path, lambda pod, node: [Step(mutate=pods.scheduled(node)),
                                                         Step(mutate=pods.failed_before_start())])
    assert [(a.outcome, a.reason, a.node, a.details["retriable"]) for a in seen] == [
        ("infra_error", "failed_without_container", "h200-a", "true"),
        ("infra_error", "failed_without_container", "h200-b", "false")]
    assert final.outcome == "infra_error"


def succeeded_before_start(waiting: bool):
    """As failed_before_start, but the pod's phase is Succeeded: still no terminated test container."""
    def m(pod):
        pods.failed_before_start(waiting)(pod)
        pod["status"]["phase"] = "Succeeded"
    return m


@pytest.mark.parametrize("waiting", [True, False], ids=["container waiting", "no container status"])
def test_a_pod_that_succeeded_without_running_its_container_is_failed_without_container_not_the_tests_failure(
        tmp_path, waiting):
    """Succeeded with no terminated test container: the default exit code 0 made it the test's
    `failed` ("exited before the test finished"); the test never ran, so it is infra, retried elsewhere."""
    def script(pod, node):
        if node == "h200-a":
            return [Step(mutate=pods.scheduled(node)), Step(mutate=succeeded_before_start(waiting))]
        return pods.passes(node)
    _, seen, _, _ = run(tmp_path, script)
    assert [(a.outcome, a.reason, a.node, a.details["retriable"]) for a in seen] == [
        ("infra_error", "failed_without_container", "h200-a", "true"), ("passed", "", "h200-b", "false")]


def test_infra_retries_stop_at_the_limit_each_on_a_new_node(tmp_path):
    final, seen, server, _ = run(tmp_path, lambda pod, node: pods.ends(node, pods.preflight_failed(86)))
    assert [a.node for a in seen] == ["h200-a", "h200-b", "h200-c"]
    assert final.outcome == "infra_error" and final.attempt == 3
    assert server.created[2]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchFields"] == [{"key": "metadata.name", "operator": "NotIn", "values": [n]}
                                                    for n in ("h200-a", "h200-b")], "one field requirement per node"


def test_a_pod_deleted_by_someone_is_seen_through_the_watch(tmp_path):
    final, seen, server, _ = run(tmp_path, lambda pod, node: [
        *pods.ends(node), Step(mutate=pods.marked_for_deletion()), Step(mutate=pods.terminated("Failed", 143, "Error")),
        Step(delete=True)])
    assert (final.outcome, final.reason, final.node) == ("infra_error", "deleted", "h200-a")
    assert final.details["retriable"] == "false" and len(seen) == 1


@pytest.mark.parametrize("end, outcome, reason", [
    (pods.terminated("Failed", 1, "Error"), "failed", "exit_code"),
    (pods.terminated("Succeeded", 0, "Completed"), "passed", ""),
], ids=["failed", "passed"])
def test_a_pod_that_ended_before_it_was_deleted_is_judged_by_its_end_as_on_the_pipes_path(tmp_path, end, outcome, reason):
    """Someone's cleanup (or a GC) deletes the pod right after it ended. The watch delivers the end and the
    deletion together when the launcher's tick is long: the deletion won (infra_error/deleted in 5 of 6
    runs), losing a real failure or a pass; the Pipes path judged the same pod by its end."""
    def script(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running(), logs=("training",)),
                Step(mutate=end, logs=("the end",)), Step(delay_s=0.0, delete=True)]
    got = []
    for _ in range(3):
        final, seen, _, _ = run(tmp_path, script, retries=0, tick_s=2.0)
        got.append((final.outcome, final.reason, final.node, len(seen)))
    assert got == [(outcome, reason, "h200-a", 1)] * 3


@pytest.mark.parametrize("steps, reason", [
    ([Step(mutate=pods.unschedulable())], "unschedulable"),
    ([Step(mutate=pods.gated())], "unschedulable"),
    ([Step(mutate=pods.scheduled("h200-a")), Step(mutate=pods.waiting("CreateContainerConfigError", 'secret "hf-token" not found'))],
     "container_config"),
])
@pytest.mark.slow  # waits out the pending limit
def test_a_pod_pending_past_the_wait_limit_is_infra_and_not_retried(tmp_path, steps, reason):
    final, seen, server, _ = run(tmp_path, lambda pod, node: steps, pin_nodes=False,
                                 pending_wait_s=PENDING_WAIT_S, startup_wait_s=PENDING_WAIT_S)  # pinned: see test_k8s_robustness
    assert (final.outcome, final.reason, len(seen)) == ("infra_error", reason, 1)
    assert float(final.details["pending_s"]) >= PENDING_WAIT_S
    assert server.deleted and not server.state.pods


@pytest.mark.slow  # waits out the pending limit
def test_an_image_pull_error_waits_the_limit_then_retries_elsewhere(tmp_path):
    def script(pod, node):
        if node == "h200-a":
            return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.waiting("ImagePullBackOff", "Back-off pulling image"))]
        return pods.passes(node)
    _, seen, _, _ = run(tmp_path, script, pending_wait_s=PENDING_WAIT_S, startup_wait_s=PENDING_WAIT_S)
    assert [(a.reason, a.node) for a in seen] == [("image_pull", "h200-a"), ("", "h200-b")]
    assert "ImagePullBackOff" in seen[0].details["message"]


@pytest.mark.parametrize("message", [
    'failed to pull and unpack image "ghcr.io/example/rl@sha256:00": failed to resolve reference '
    '"ghcr.io/example/rl@sha256:00": ghcr.io/example/rl@sha256:00: not found',  # containerd
    "Error response from daemon: manifest for ghcr.io/example/rl:nightly not found: manifest unknown: manifest unknown",
    "reading manifest sha256:00 in ghcr.io/example/rl: manifest unknown",  # CRI-O
], ids=["containerd", "docker", "cri-o"])
def test_an_image_the_registry_does_not_have_is_final_at_once_not_tried_on_every_node(tmp_path, message):
    """A digest that was never pushed: every node would wait startup_wait_s (900 s) for it, 3 x 900 s per test."""
    def script(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.waiting("ErrImagePull", message)),
                Step(delay_s=0.2, mutate=pods.waiting("ImagePullBackOff", 'Back-off pulling image "ghcr.io/example/rl"'))]
    _, seen, _, _ = run(tmp_path, script)  # waits of 60 s: the verdict must come without them
    assert [(a.outcome, a.reason, a.details["retriable"]) for a in seen] == [("infra_error", "image_not_found", "false")]
    assert "ErrImagePull" in seen[0].details["message"] and float(seen[0].details["pending_s"]) < 30


def test_a_transient_pull_error_still_waits_and_is_retried_elsewhere(tmp_path):
    def script(pod, node):
        if node == "h200-a":
            return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.waiting(
                "ErrImagePull", 'failed to pull and unpack image "ghcr.io/example/rl:nightly": failed to copy: '
                "httpReadSeeker: failed open: unexpected status code 429 Too Many Requests"))]
        return pods.passes(node)
    _, seen, _, _ = run(tmp_path, script, startup_wait_s=1.0)
    assert [(a.reason, a.node, a.details["retriable"]) for a in seen] == [("image_pull", "h200-a", "true"),
                                                                          ("", "h200-b", "false")]


def test_a_pod_pending_within_the_wait_limit_keeps_waiting(tmp_path):
    final, _, _, _ = run(tmp_path, lambda pod, node: [Step(mutate=pods.unschedulable()), Step(delay_s=0.1, mutate=pods.scheduled(node)),
                                                      *pods.passes(node)[1:]], pending_wait_s=5.0)
    assert final.outcome == "passed"


def test_the_hf_token_never_reaches_a_test_pod_and_printed_tokens_are_masked(tmp_path):
    final, _, server, lines = run(tmp_path, lambda pod, node: pods.passes(node, logs=(f"token is {SECRET}", "ok")))
    import json
    assert SECRET not in json.dumps(server.created)
    env = {e["name"]: e for e in server.created[0]["spec"]["containers"][0]["env"]}
    assert "HF_TOKEN" not in env, "test pods download nothing: only build pods get the token"
    assert env["MARK"]["value"] == "m1"
    assert SECRET not in Path(final.log_path).read_text() and all(SECRET not in line for line in lines)
    assert "token is hf_***" in lines


def test_every_pod_the_launcher_created_validates_strictly(tmp_path):
    _, _, server, _ = run(tmp_path, lambda pod, node: pods.ends(node, pods.preflight_failed(86)))
    assert len(server.created) == 3
    for body in server.created:
        kubernetes_validate.validate(body, "1.31", strict=True)


def test_cordon_sends_a_merge_patch_of_spec_unschedulable(tmp_path):
    with StandInApiServer() as server:
        cordon(server.core_v1(), "h200-a", "12 of 12 attempts failed here")
        spec = DeploymentSpec(name="p", launcher="kubernetes", pools=(POOL,))
        assert cordon_bad_nodes(server.core_v1(), spec, [("h200-b", "x")]) == []  # off unless the deployment says so
        on = dataclasses.replace(spec, cordon_bad_nodes=True)
        assert cordon_bad_nodes(server.core_v1(), on, [("h200-c", "y")]) == ["h200-c"]
    assert [(n, body["spec"]) for n, _, body in server.patches] == [("h200-a", {"unschedulable": True}), ("h200-c", {"unschedulable": True})]
    assert server.patches[0][1] == "application/merge-patch+json"
    assert server.patches[0][2]["metadata"]["annotations"]["nightly-e2e.io/cordoned-because"] == "12 of 12 attempts failed here"


def test_an_unknown_pool_is_an_error_that_names_the_fix(tmp_path):
    with StandInApiServer() as server:
        launch, _ = launcher(server)
        with pytest.raises(ValueError, match=r"no pool 'mi300' .* add it under deployments.production.pools in assets/cluster.yaml"):
            launch.launch(dataclasses.replace(request(tmp_path), pool="mi300", test=make_test(hardware="mi300")))


def test_attempt_log_paths_number_each_retry():
    assert attempt_log_path(Path("/l/x.attempt1.log"), 2) == Path("/l/x.attempt2.log")
    assert attempt_log_path(Path("/l/x.log"), 3) == Path("/l/x.attempt3.log")


def test_a_pod_the_api_refuses_is_an_infra_error_that_is_not_retried(tmp_path):
    from kubernetes.client.exceptions import ApiException

    class Refusing:
        calls = 0

        def create_namespaced_pod(self, namespace, body):
            Refusing.calls += 1
            raise ApiException(status=403, reason="Forbidden")

    seen: list = []
    launch = KubernetesLauncher(Refusing(), DEPLOYMENT, on_attempt=seen.append, pin_nodes=False)
    final = launch.launch(request(tmp_path))
    assert (final.outcome, final.reason, final.details["retriable"]) == ("infra_error", "create_rejected", "false")
    assert Refusing.calls == 1
    assert "the API refused the pod (403 Forbidden)" in Path(final.log_path).read_text()
