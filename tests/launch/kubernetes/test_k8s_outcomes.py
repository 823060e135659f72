"""Every row of k8s-facts.md classified from a Pod object alone (pure, no server)."""

from __future__ import annotations

import json

import pytest

from pipelines.launch.kubernetes.outcomes import Verdict, classify, explain

INF = float("inf")


def pod(phase="Running", reason="", conditions=(), state=None, node="h200-a", deleting=False):
    status = {"phase": phase, "conditions": [{"type": t, "status": s, "reason": r} for t, s, r in conditions]}
    if reason:
        status["reason"] = reason
    if state is not None:
        status["containerStatuses"] = [{"name": "test", "state": state}]
    meta = {"name": "p", "deletionTimestamp": "2026-12-01T00:00:00Z"} if deleting else {"name": "p"}
    return {"metadata": meta, "spec": {"nodeName": node}, "status": status}


def preflight(code):
    p = pod("Failed", state={"waiting": {"reason": "PodInitializing"}})
    p["status"]["initContainerStatuses"] = [{"name": "preflight", "state": term(code)}]
    return p


def term(code, reason="Error"):
    return {"terminated": {"exitCode": code, "reason": reason}}


DISRUPT = "DisruptionTarget", "True"
ROWS = [
    ("passed", pod("Succeeded", state=term(0, "Completed")), ("passed", "", False)),
    ("test failed", pod("Failed", state=term(1)), ("failed", "exit_code", False)),
    ("timed out", pod("Failed", "DeadlineExceeded", state=term(137)), ("timed_out", "deadline_exceeded", False)),
    ("OOM with exit 0", pod("Failed", state=term(0, "OOMKilled")), ("failed", "oom_killed", False)),
    ("OOM with exit 137", pod("Failed", state=term(137, "OOMKilled")), ("failed", "oom_killed", False)),
    ("eviction", pod("Failed", "Evicted", [(*DISRUPT, "TerminationByKubelet")], term(137, "ContainerStatusUnknown")),
     ("infra_error", "evicted", True)),
    ("eviction, old kubelet", pod("Failed", "Evicted"), ("infra_error", "evicted", True)),
    # a node that crashed and rebooted before its pods were marked NotReady or evicted: the runtime lost them
    ("container not located after a reboot", pod("Failed", state=term(137, "ContainerStatusUnknown")),
     ("infra_error", "node_lost", True)),
    ("containerd lost the container", pod("Failed", state=term(255, "Unknown")), ("infra_error", "node_lost", True)),
    ("a test exiting 255", pod("Failed", state=term(255)), ("failed", "exit_code", False)),
    ("GPU gone at admission", pod("Failed", "UnexpectedAdmissionError"), ("infra_error", "gpu_unusable", True)),
    ("pre-flight: CUDA failed", preflight(86), ("infra_error", "gpu_unusable", True)),
    ("pre-flight: tool missing", preflight(87), ("infra_error", "preflight_tool_missing", False)),
    ("pre-flight: hung", preflight(88), ("infra_error", "preflight_hung", True)),
    ("a test exiting 86", pod("Failed", state=term(86)), ("failed", "exit_code", False)),
    ("deadline during the pre-flight", pod("Pending", "DeadlineExceeded", state={"waiting": {"reason": "PodInitializing"}}),
     ("infra_error", "startup_timeout", True)),
    ("scheduler preemption", pod("Failed", conditions=[(*DISRUPT, "PreemptionByScheduler")], state=term(143)),
     ("infra_error", "preempted", True)),
    ("drain", pod("Failed", conditions=[(*DISRUPT, "EvictionByEvictionAPI")], state=term(143)), ("infra_error", "evicted", True)),
    ("Kueue preemption", pod("Failed", conditions=[("TerminationTarget", "True", "WorkloadEvictedDueToPreempted")], state=term(143)),
     ("infra_error", "preempted", True)),
    ("node shutdown", pod("Failed", "Terminated", [(*DISRUPT, "TerminationByKubelet")], term(137)),
     ("infra_error", "node_shutdown", True)),
    ("node lost, taint manager", pod("Running", conditions=[(*DISRUPT, "DeletionByTaintManager")], state={"running": {}}),
     ("infra_error", "node_lost", True)),
    ("deleted, exit 143", pod("Failed", state=term(143), deleting=True), ("infra_error", "deleted", False)),
    ("deleted, exit 0", pod("Succeeded", state=term(0, "Completed"), deleting=True), ("infra_error", "deleted", False)),
    ("deleted while running", pod("Running", state={"running": {}}, deleting=True), ("infra_error", "deleted", False)),
    ("invalid image name", pod("Pending", state={"waiting": {"reason": "InvalidImageName"}}), ("infra_error", "image_pull", True)),
    ("start error", pod("Failed", state=term(128, "StartError")), ("infra_error", "start_error", True)),
    ("failed before its container ran", pod("Failed", state={"waiting": {"reason": "ContainerCreating"}}),
     ("infra_error", "failed_without_container", True)),
]


@pytest.mark.parametrize("row, last, expected", ROWS, ids=[r[0] for r in ROWS])
def test_each_row_of_the_table_has_its_outcome(row, last, expected):
    verdict = classify(last, False, 0.0, 60.0)
    assert verdict is not None, row
    assert (verdict.outcome, verdict.reason, verdict.retriable_infra) == expected
    assert verdict.node == "h200-a"


PENDING = [
    ("unschedulable", pod("Pending", conditions=[("PodScheduled", "False", "Unschedulable")], node=""), "unschedulable", False),
    ("gated by Kueue", pod("Pending", conditions=[("PodScheduled", "False", "SchedulingGated")], node=""), "unschedulable", False),
    ("image pull", pod("Pending", state={"waiting": {"reason": "ImagePullBackOff"}}), "image_pull", True),
    ("missing secret", pod("Pending", state={"waiting": {"reason": "CreateContainerConfigError"}}), "container_config", False),
    ("scheduled, still pulling or in the pre-flight", pod("Pending", state={"waiting": {"reason": "PodInitializing"}}),
     "startup_timeout", True),
]




def held_at_preflight(reason):
    """Every GPU pod's pre-flight init container uses the test image: its pull fails first."""
    p = pod("Pending", state={"waiting": {"reason": "PodInitializing"}})
    p["status"]["initContainerStatuses"] = [{"name": "preflight", "state": {"waiting": {"reason": reason}}}]
    return p


PENDING += [
    ("image pull at the pre-flight", held_at_preflight("ImagePullBackOff"), "image_pull", True),
    ("missing secret at the pre-flight", held_at_preflight("CreateContainerConfigError"), "container_config", False),
]


@pytest.mark.parametrize("row, last, reason, retriable", PENDING, ids=[r[0] for r in PENDING])
def test_pending_pods_wait_until_the_limit_then_are_infra(row, last, reason, retriable):
    assert classify(last, False, 59.0, 60.0) is None
    verdict = classify(last, False, 60.0, 60.0)
    assert verdict == Verdict("infra_error", reason, retriable, last["spec"]["nodeName"])


def test_a_running_pod_on_an_unready_node_becomes_node_lost_only_after_the_wait():
    last = pod("Running", conditions=[("Ready", "False", "")], state={"running": {}})
    assert classify(last, False, 10.0, 300.0) is None
    assert classify(last, False, 300.0, 300.0) == Verdict("infra_error", "node_lost", True, "h200-a")
    assert classify(pod("Running", conditions=[("Ready", "True", "")], state={"running": {}}), False, 1e9, 300.0) is None


@pytest.mark.parametrize("reason", ["InvalidImageName", "ErrImageNeverPull"])
def test_a_bad_image_at_the_preflight_is_an_image_pull_error_at_once_and_said(reason):
    last = held_at_preflight(reason)
    verdict = classify(last, False, 0.0, 900.0)
    assert verdict == Verdict("infra_error", "image_pull", True, "h200-a")
    assert f"waiting={reason}" in explain(last, verdict)


def test_a_pod_deleted_before_any_event_is_deleted_and_a_pod_not_yet_seen_waits():
    assert classify(None, True, 0.0, 60.0) == Verdict("infra_error", "deleted", False, "")
    assert classify(None, False, 0.0, 60.0) is None


def test_a_watch_deleted_event_counts_even_without_a_deletion_timestamp():
    assert classify(pod("Failed", state=term(143)), True, 0.0, 60.0).reason == "deleted"


def test_explain_names_what_the_pod_said():
    last = pod("Failed", "Evicted", [(*DISRUPT, "TerminationByKubelet")], term(137, "ContainerStatusUnknown"))
    last["status"]["message"] = "The node was low on resource: memory."
    text = explain(last, classify(last, False, 0, 60))
    assert text.startswith("evicted: phase=Failed reason=Evicted DisruptionTarget=TerminationByKubelet")
    assert "exit=137" in text and "low on resource: memory" in text and "node=h200-a" in text


def test_a_container_the_runtime_lost_is_said_and_someones_delete_still_wins():
    last = pod("Failed", state=term(137, "ContainerStatusUnknown"))
    last["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = "The container could not be located"
    verdict = classify(last, False, 0.0, 60.0)
    assert "container=ContainerStatusUnknown exit=137 said='The container could not be located'" in explain(last, verdict)
    # deleted by someone: never retried, whatever the container says
    assert classify(pod("Failed", state=term(137, "ContainerStatusUnknown"), deleting=True), False, 0.0, 60.0) == Verdict(
        "infra_error", "deleted", False, "h200-a")


def test_explain_quotes_what_a_failed_preflight_said():
    last = preflight(86)
    last["status"]["initContainerStatuses"][0]["state"]["terminated"]["message"] = "CUDA init failed on h200-a: CUresult 802"
    text = explain(last, classify(last, False, 0, 60))
    assert text.startswith("gpu_unusable: phase=Failed init preflight exit=86 said='CUDA init failed on h200-a: CUresult 802'")


def wrapped_pod(token, message=None, code=0, phase="Succeeded"):
    """A test pod (its container carries the attempt token) that ended with ``message`` as the
    kubelet's termination message (what the wrapper wrote to ``--result /dev/termination-log``)."""
    state = term(code, "Completed" if code == 0 else "Error")
    if message is not None:
        state["terminated"]["message"] = message
    p = pod(phase, state=state)
    p["spec"]["containers"] = [{"name": "test", "env": [{"name": "NIGHTLY_ATTEMPT_TOKEN", "value": token}]}]
    return p


def record(**kw):
    return json.dumps({"ok": True, "exit_code": 0, "finished": True, "token": "t-1", **kw})


@pytest.mark.parametrize("message, expected", [
    (None, "failed"),                                   # os._exit(0) halfway: the wrapper wrote nothing
    ("", "failed"),
    ('{"ok": true, "finished": tr', "failed"),          # cut: not a record
    (record(token="t-0"), "failed"),                   # another attempt's record
    (record(finished=False), "failed"),
    (record(), "passed"),
], ids=["no record", "empty", "cut", "stale token", "not finished", "the attempt's record"])
def test_exit_0_passes_only_with_the_wrappers_completion_record_carrying_the_attempts_token(message, expected):
    verdict = classify(wrapped_pod("t-1", message), False, 0.0, 60.0)
    assert (verdict.outcome, verdict.retriable_infra) == (expected, False)
    if expected == "failed":  # worded as the local launcher words it
        assert verdict.reason == "exited before the test finished (exit code 0 without the wrapper's completion record)"


def test_a_wrapper_that_could_not_write_its_record_is_an_infra_error_and_a_test_exiting_74_is_failed():
    """The wrapper's 74 comes with its line, which the kubelet hands on as the termination message (the
    log's end, ``FallbackToLogsOnError``) when the record file stayed empty; a test that exits 74 itself
    (os._exit, an exec'd program) leaves no such line and is failed, as any other exit status."""
    from pipelines.launch.wrapper import RESULT_NOT_WRITTEN, RESULT_NOT_WRITTEN_LINE

    said = (f"step 3 loss=0.5\n{RESULT_NOT_WRITTEN_LINE}/dev/termination-log (Read-only file system); exiting 74: "
            "the test's outcome is unknown (it passed here)")
    lost = classify(wrapped_pod("t-1", said, code=RESULT_NOT_WRITTEN, phase="Failed"), False, 0.0, 60.0)
    assert (lost.outcome, lost.reason, lost.retriable_infra) == ("infra_error", "result_not_written", False)
    for message in (None, "step 3 loss=nan\nloss diverged; bailing out"):  # os._exit(74) halfway: no line
        own = classify(wrapped_pod("t-1", message, code=RESULT_NOT_WRITTEN, phase="Failed"), False, 0.0, 60.0)
        assert (own.outcome, own.reason) == ("failed", "exit_code")
    own = wrapped_pod("t-1", record(ok=False, exit_code=RESULT_NOT_WRITTEN, error="SystemExit(74)"),
                      code=RESULT_NOT_WRITTEN, phase="Failed")
    assert classify(own, False, 0.0, 60.0).outcome == "failed"


def test_pods_without_a_token_are_judged_by_exit_code_and_a_failed_tests_error_is_said():
    assert classify(pod("Succeeded", state=term(0, "Completed")), False, 0.0, 60.0).outcome == "passed"  # build pods
    last = wrapped_pod("t-1", record(ok=False, exit_code=1, error="AssertionError: loss 2.3 > 1.0"), code=1, phase="Failed")
    verdict = classify(last, False, 0.0, 60.0)
    assert (verdict.outcome, verdict.reason) == ("failed", "exit_code")
    assert "error='AssertionError: loss 2.3 > 1.0'" in explain(last, verdict)


@pytest.mark.parametrize("last, reason, retriable", [
    (pod("Pending", state={"waiting": {"reason": "ErrImagePull"}}, deleting=True), "image_pull", True),
    (held_at_preflight("ImagePullBackOff"), "image_pull", True),
    (pod("Pending", state={"waiting": {"reason": "CreateContainerConfigError"}}), "container_config", False),
    (pod("Pending", state={"waiting": {"reason": "PodInitializing"}}), "deleted", False),
    (pod("Running", state={"running": {}}), "deleted", False),
], ids=["pull error", "pull error at the pre-flight", "missing secret", "starting", "running"])
def test_a_pod_deleted_while_its_image_or_config_could_not_be_had_keeps_that_reason(last, reason, retriable):
    """dagster-k8s deletes the pod at the first ErrImagePull: the Pipes path must judge it as the
    watch path does after its wait (image_pull, retried elsewhere), not as someone's delete."""
    assert classify(last, True, 0.0, 900.0) == Verdict("infra_error", reason, retriable, "h200-a")


@pytest.mark.parametrize("reason, code", [("Unknown", 255), ("ContainerStatusUnknown", 137)])
def test_a_container_the_runtime_lost_after_the_wrapper_finished_is_judged_by_its_record(reason, code):
    """containerd restoring an exited container after a restart says Unknown/255 while the kubelet
    still copied the wrapper's record: the test's own end decides, not the node."""
    def lost(message):
        p = wrapped_pod("t-1", message, code=code, phase="Failed")
        p["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = reason
        return p

    failed = lost(record(ok=False, exit_code=1, error="AssertionError: loss did not drop"))
    verdict = classify(failed, False, 0.0, 60.0)
    assert verdict == Verdict("failed", "exit_code", False, "h200-a")
    assert "error='AssertionError: loss did not drop'" in explain(failed, verdict)
    passed = lost(record())
    assert classify(passed, False, 0.0, 60.0) == Verdict("passed", "", False, "h200-a")
    assert "said=" not in explain(passed, classify(passed, False, 0.0, 60.0))
    # another attempt's record, an unfinished one, or none: the node lost it, retried elsewhere
    for message in (record(token="t-0"), record(finished=False), None, "The container could not be located"):
        assert classify(lost(message), False, 0.0, 60.0) == Verdict("infra_error", "node_lost", True, "h200-a")
