"""Tell apart every way a test pod can end, from the last Pod object seen (k8s-facts.md).

dagster-k8s judges only container exit codes: an OOM-killed container that exits 0 passes, an
evicted pod is a "failure" of the test, a Pending pod waits a day. Here the pod's phase, reason,
conditions and container state decide, in a fixed order, whether the *test* failed (never
retried) or the *infrastructure* did (retried on another node when that can help).

Pure: plain dicts in Kubernetes JSON shape (camelCase) in, a :class:`Verdict` out.
"""

from __future__ import annotations

import contextlib
import json
import re
from datetime import datetime
from typing import Any, NamedTuple

from pipelines.launch.kubernetes.preflight import preflight_verdict
from pipelines.launch.wrapper import RESULT_NOT_WRITTEN, why_result_not_written

MAIN_CONTAINER = "test"
#: the attempt's token in the test container's env; the wrapper copies it into its completion record
TOKEN_ENV = "NIGHTLY_ATTEMPT_TOKEN"
#: as the local launcher says it: exit 0 alone is no pass (a test may call ``os._exit(0)`` halfway)
NO_COMPLETION_RECORD = "exited before the test finished (exit code 0 without the wrapper's completion record)"

#: Infra reasons where another node may well succeed.
RETRIABLE = frozenset({"evicted", "preempted", "node_lost", "node_shutdown", "gpu_unusable", "image_pull",
                       "preflight_hung", "startup_timeout", "start_error",
                       # the kubelet refused the pod (OutOfcpu/OutOfmemory/OutOfpods, node labels changed under
                       # it): its node was full or changed at that moment, another (or the same, later) may take it
                       "admission_rejected",
                       # the pod ended before its test container ran, for no reason above: the test said nothing,
                       # another node may run it (the launcher retries it once per test and night)
                       "failed_without_container"})

#: what the container runtime, never the test's process, reports of a container it lost: the kubelet's
#: ContainerStatusUnknown (exit 137, "could not be located") and containerd's Unknown (exit 255) after a
#: node crashed and rebooted before its pods were marked NotReady or evicted; a process that exits by
#: itself ends Completed or Error
_LOST_BY_RUNTIME = frozenset({"ContainerStatusUnknown", "Unknown"})

_PULL_WAITING = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
_CONFIG_WAITING = frozenset({"CreateContainerConfigError", "CreateContainerError"})
#: the registry says the image or its manifest does not exist (containerd: "failed to resolve reference
#: ...: not found"; Docker and CRI-O: "manifest unknown"; "name unknown": no such repository): no node
#: and no wait can pull it. Timeouts, throttling and auth errors say nothing of the kind and stay retried
_IMAGE_MISSING = re.compile(r"manifest unknown|name unknown|failed to resolve reference.*: not found", re.IGNORECASE)
#: the container runtime could not start a container (the pre-flight or the test): no process of ours ran,
#: so its exit code (128) and message are the runtime's
_RUNTIME_START = frozenset({"StartError", "ContainerCannotRun"})
#: ... because the NVIDIA container runtime failed (its hook: "nvidia-container-cli: initialization error:
#: nvml error: driver/library version mismatch"): the node's GPUs are unusable
_GPU_RUNTIME = re.compile(r"nvidia|nvml|\bcuda", re.IGNORECASE)
#: ... because the image lacks the command or working directory it is started with: the same on every node
_IMAGE_CANNOT_START = re.compile(r"executable file not found|exec format error|chdir to cwd", re.IGNORECASE)


class Verdict(NamedTuple):
    """``outcome`` is an Attempt.outcome; ``reason`` the precise kind (Attempt.reason)."""

    outcome: str
    reason: str
    retriable_infra: bool
    node: str


def _test(outcome: str, reason: str, node: str) -> Verdict:
    return Verdict(outcome, reason, False, node)


def _infra(reason: str, node: str) -> Verdict:
    return Verdict("infra_error", reason, reason in RETRIABLE, node)


def condition(pod: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    """The pod condition of type ``ctype`` whose status is True, if any."""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == ctype and c.get("status") == "True":
            return c
    return None


def main_status(pod: dict[str, Any]) -> dict[str, Any]:
    """The test container's status (the first container when none is named ``test``)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for s in statuses:
        if s.get("name") == MAIN_CONTAINER:
            return s
    return statuses[0] if statuses else {}


def init_failure(pod: dict[str, Any]) -> dict[str, Any]:
    """The terminated state of an init container (the pre-flight) that exited non-zero, if any."""
    for s in (pod.get("status") or {}).get("initContainerStatuses") or ():
        term = (s.get("state") or {}).get("terminated") or {}
        if term and term.get("exitCode", 0) != 0:
            return {**term, "name": s.get("name", "")}
    return {}


def test_started(pod: dict[str, Any]) -> bool:
    """The test container has started (running now, or terminated after running)."""
    state = main_status(pod).get("state") or {}
    return "running" in state or "terminated" in state


def image_id(pod: dict[str, Any] | None) -> str:
    """The image the node really ran (``...@sha256:...``), when the kubelet reported it."""
    return str(main_status(pod or {}).get("imageID") or "")


def terminated(pod: dict[str, Any]) -> dict[str, Any]:
    return (main_status(pod).get("state") or {}).get("terminated") or {}


def waiting(pod: dict[str, Any]) -> dict[str, Any]:
    """Why the pod's containers wait: the first init container held back by more than its turn
    (every GPU pod's pre-flight pulls the test image first, so a bad image or secret shows there
    while the test container only says PodInitializing), else the test container's."""
    for s in (pod.get("status") or {}).get("initContainerStatuses") or ():
        w = (s.get("state") or {}).get("waiting") or {}
        if w.get("reason") and w["reason"] != "PodInitializing":
            return w
    return (main_status(pod).get("state") or {}).get("waiting") or {}


def attempt_token(pod: dict[str, Any]) -> str:
    """The test container's ``NIGHTLY_ATTEMPT_TOKEN`` ("" for pods without one: build and probe pods)."""
    for c in (pod.get("spec") or {}).get("containers") or ():
        if c.get("name") == MAIN_CONTAINER:
            for e in c.get("env") or ():
                if e.get("name") == TOKEN_ENV:
                    return str(e.get("value") or "")
    return ""


def completion_record(pod: dict[str, Any]) -> dict[str, Any]:
    """The wrapper's completion record, as the kubelet copied it from the termination-message
    file into ``state.terminated.message``; {} when there is none or it is not one."""
    try:
        record = json.loads(terminated(pod).get("message") or "")
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def result_not_written(pod: dict[str, Any]) -> bool:
    """The wrapper could not write its completion record: none is there, and the termination message
    (the end of the container's log when the record file stayed empty: ``FallbackToLogsOnError``)
    holds the wrapper's line saying so. Exit status 74 alone proves nothing: a test may exit 74 itself
    (``os._exit(74)``, an exec'd program) before the wrapper's end, and is then judged as failed."""
    if completion_record(pod):
        return False
    return bool(why_result_not_written(str(terminated(pod).get("message") or "")))


def finished(pod: dict[str, Any]) -> bool:
    """The test ran to its end: a pod with a token needs the wrapper's record carrying that token."""
    if not attempt_token(pod):
        return True
    return own_record(pod).get("ok") is True


def own_record(pod: dict[str, Any]) -> dict[str, Any]:
    """The wrapper's finished record carrying this attempt's token ({} without one, or for a pod without a token)."""
    token = attempt_token(pod)
    record = completion_record(pod)
    return record if token and record.get("finished") is True and record.get("token") == token else {}


def ended_by_itself(pod: dict[str, Any] | None) -> bool:
    """The pod was seen Succeeded or Failed without a deletionTimestamp: it ended by itself, and a delete
    seen after (someone's cleanup, dagster-k8s's) did not end it; the API server deletes an ended pod at
    once, without the grace period that would first mark it. Both launch paths judge such a pod by that end."""
    phase = ((pod or {}).get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed") and not ((pod or {}).get("metadata") or {}).get("deletionTimestamp")


def node_of(pod: dict[str, Any] | None) -> str:
    return ((pod or {}).get("spec") or {}).get("nodeName") or ""


def start_failure(term: dict[str, Any], node: str) -> Verdict:
    """A container the runtime could not start (``term``: its terminated state): the NVIDIA runtime's
    failure says the node's GPUs are unusable; a command or working directory missing from the image
    fails on every node (not retried, never the node's); anything else is the node's runtime, retried
    elsewhere and counted against the node."""
    said = str(term.get("message") or "")
    if _GPU_RUNTIME.search(said):
        return _infra("gpu_unusable", node)
    if _IMAGE_CANNOT_START.search(said):
        return _infra("image_cannot_start", node)
    return _infra("start_error", node)


def _disruption(pod: dict[str, Any], node: str) -> Verdict | None:
    """DisruptionTarget (Kubernetes) or TerminationTarget (Kueue): the pod is being taken away."""
    kueue = condition(pod, "TerminationTarget")
    if kueue is not None:
        return _infra("preempted" if "Preempt" in (kueue.get("reason") or "") else "evicted", node)
    c = condition(pod, "DisruptionTarget")
    if c is None:
        return None
    why = c.get("reason") or ""
    if why in ("DeletionByTaintManager", "DeletionByPodGC"):
        return _infra("node_lost", node)
    if "Preemption" in why:
        return _infra("preempted", node)
    if why == "TerminationByKubelet":
        status_reason = (pod.get("status") or {}).get("reason") or ""
        return _infra("node_shutdown" if status_reason in ("Terminated", "Shutdown", "NodeShutdown") else "evicted", node)
    return _infra("evicted", node)  # EvictionByEvictionAPI (drain) and anything newer


def _pull_failed(w: dict[str, Any], node: str) -> Verdict:
    """A pull that failed: final when the registry says the image does not exist, else worth another node."""
    if _IMAGE_MISSING.search(str(w.get("message") or "")):
        return _infra("image_not_found", node)
    return _infra("image_pull", node)


def classify(
    last_pod: dict[str, Any] | None, deleted: bool, waited_s: float, wait_limit_s: float
) -> Verdict | None:
    """The verdict on a pod, or None while it is still running or allowed to wait.

    ``deleted``: a watch saw the pod deleted (or it carries a deletionTimestamp we did not set).
    ``waited_s``: how long the pod has been stuck in its current non-terminal state (Pending,
    or Running with Ready=False); past ``wait_limit_s`` that state becomes a verdict, because
    Kubernetes never gives up on a Pending pod by itself.
    """
    if last_pod is None:
        return _infra("deleted", "") if deleted else None
    node = node_of(last_pod)
    status = last_pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    reason = status.get("reason") or ""

    verdict = _disruption(last_pod, node)
    if verdict is not None:
        return verdict
    if reason == "DeadlineExceeded":  # the deadline counts image pull and pre-flight too
        if test_started(last_pod):
            return _test("timed_out", "deadline_exceeded", node)
        return _infra("startup_timeout", node)
    if reason == "Evicted":
        return _infra("evicted", node)
    if reason in ("Terminated", "Shutdown", "NodeShutdown"):
        return _infra("node_shutdown", node)
    if reason == "NodeLost":
        return _infra("node_lost", node)
    if reason == "UnexpectedAdmissionError" or reason == "OutOfnvidia.com/gpu":
        return _infra("gpu_unusable", node)
    if (phase == "Failed" and reason.startswith("OutOf")) or reason in ("NodeAffinity", "NodeAffinityMismatch"):
        return _infra("admission_rejected", node)

    init = init_failure(last_pod)
    if init and init.get("reason") in _RUNTIME_START:  # the pre-flight never ran: its exit codes say nothing
        return start_failure(init, node)
    if init:
        why, retriable = preflight_verdict(int(init.get("exitCode") or 0))
        return Verdict("infra_error", why, retriable, node)
    term = terminated(last_pod)
    if term.get("reason") == "OOMKilled":
        return _test("failed", "oom_killed", node)  # trust the reason, even with exit 0
    if term.get("reason") in _RUNTIME_START:
        return start_failure(term, node)
    if deleted or (last_pod.get("metadata") or {}).get("deletionTimestamp"):
        # deleted while its image or config could not be had (dagster-k8s deletes the pod at the
        # first ErrImagePull): that is why it ended, as on the watch path after its wait
        w = waiting(last_pod) if phase == "Pending" else {}
        if w.get("reason") in _PULL_WAITING:
            return _pull_failed(w, node)
        if w.get("reason") in _CONFIG_WAITING:
            return _infra("container_config", node)
        return _infra("deleted", node)
    if phase == "Succeeded" and term and term.get("exitCode", 0) == 0:  # no term: its container never ran (below)
        return _test("passed", "", node) if finished(last_pod) else _test("failed", NO_COMPLETION_RECORD, node)
    if phase in ("Failed", "Succeeded"):
        if term.get("reason") in _LOST_BY_RUNTIME:
            # the runtime lost the container; but when the kubelet still copied the wrapper's finished record
            # (containerd restores an exited container as Unknown/255 after a restart), the test's end is known
            record = own_record(last_pod)
            if not record:
                return _infra("node_lost", node)  # another node may well pass
            return _test("passed", "", node) if record.get("ok") is True else _test("failed", "exit_code", node)
        if term.get("exitCode") == RESULT_NOT_WRITTEN and attempt_token(last_pod) and result_not_written(last_pod):
            return _infra("result_not_written", node)  # the wrapper could not write its record: the test's outcome is unknown
        if term:
            return _test("failed", "exit_code", node)
        return _infra("failed_without_container", node)

    if phase == "Pending":
        w = waiting(last_pod)
        if w.get("reason") in ("InvalidImageName", "ErrImageNeverPull"):
            return _infra("image_pull", node)  # permanent: waiting longer cannot help
        if w.get("reason") in _PULL_WAITING and _IMAGE_MISSING.search(str(w.get("message") or "")):
            return _infra("image_not_found", node)  # final: not there for this node, any other, or later
        if waited_s < wait_limit_s:
            return None
        if w.get("reason") in _PULL_WAITING:
            return _pull_failed(w, node)
        if w.get("reason") in _CONFIG_WAITING:
            return _infra("container_config", node)
        if node:  # scheduled, but pulling or in the pre-flight past the startup limit
            return _infra("startup_timeout", node)
        return _infra("unschedulable", node)
    if phase == "Running" and not_ready(last_pod) and waited_s >= wait_limit_s:
        return _infra("node_lost", node)
    if phase == "Unknown" and waited_s >= wait_limit_s:
        return _infra("node_lost", node)
    return None


def not_ready(pod: dict[str, Any]) -> bool:
    """Running but Ready=False: how a pod on an unreachable node looks until the taint manager acts."""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return c.get("status") == "False"
    return False


def explain(last_pod: dict[str, Any] | None, verdict: Verdict) -> str:
    """One human line for the night report: what the pod object said."""
    if last_pod is None:
        return "pod deleted before it was seen"
    status = last_pod.get("status") or {}
    parts = [f"phase={status.get('phase') or 'Pending'}"]
    if status.get("reason"):
        parts.append(f"reason={status['reason']}")
    for ctype in ("DisruptionTarget", "TerminationTarget"):
        c = condition(last_pod, ctype)
        if c:
            parts.append(f"{ctype}={c.get('reason', '')}")
    sched = next((c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"
                  and c.get("status") == "False"), None)
    if sched:
        parts.append(f"PodScheduled=False/{sched.get('reason', '')}")
    term, wait, init = terminated(last_pod), waiting(last_pod), init_failure(last_pod)
    if init:
        parts.append(f"init {init.get('name', '')} exit={init.get('exitCode')}")
        if init.get("message"):
            parts.append(f"said={init['message'].strip()[-200:]!r}")
    if term:
        parts.append(f"container={term.get('reason', '')} exit={term.get('exitCode')}")
        if completion_record(last_pod).get("error"):
            parts.append(f"error={str(completion_record(last_pod)['error'])[:200]!r}")
        elif term.get("reason") in (*_LOST_BY_RUNTIME, *_RUNTIME_START) and term.get("message") \
                and not completion_record(last_pod):
            parts.append(f"said={str(term['message']).strip()[-200:]!r}")
    elif wait:
        parts.append(f"waiting={wait.get('reason', '')}")
    message = status.get("message") or wait.get("message") or (sched or {}).get("message") or ""
    if message:
        parts.append(f"message={message[:200]!r}")
    if verdict.node:
        parts.append(f"node={verdict.node}")
    return f"{verdict.reason or verdict.outcome}: " + " ".join(parts)


def timestamp(value: Any) -> datetime | None:
    """A Kubernetes time (``2026-12-01T02:00:00Z``) as a datetime; None when absent or unreadable."""
    if isinstance(value, datetime):
        return value
    if not value:
        return None
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return None
