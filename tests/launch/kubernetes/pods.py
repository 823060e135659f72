"""Pod states from k8s-facts.md, as mutations the stand-in API server applies in order.

Each helper returns a function that edits a stored pod the way the kubelet / controllers would,
so a scenario reads like the table row it checks.
"""

from __future__ import annotations

from typing import Any

from tests.launch.kubernetes.apiserver import Step, now

Pod = dict[str, Any]


def _status(pod: Pod) -> dict[str, Any]:
    return pod.setdefault("status", {})


def _cond(pod: Pod, ctype: str, status: str, reason: str = "", message: str = "") -> None:
    conds = [c for c in _status(pod).get("conditions", []) if c["type"] != ctype]
    c = {"type": ctype, "status": status, "lastTransitionTime": now()}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    _status(pod)["conditions"] = [*conds, c]


def _container(pod: Pod, state: dict[str, Any], ready: bool = False) -> None:
    image = pod["spec"]["containers"][0]["image"]
    _status(pod)["containerStatuses"] = [
        {"name": "test", "image": image, "imageID": "", "ready": ready, "restartCount": 0, "state": state}
    ]


def scheduled(node: str):
    def m(pod: Pod) -> None:
        pod["spec"]["nodeName"] = node
        _cond(pod, "PodScheduled", "True")
    return m


def unschedulable(message: str = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."):
    return lambda pod: _cond(pod, "PodScheduled", "False", "Unschedulable", message)


def gated():
    return lambda pod: _cond(pod, "PodScheduled", "False", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")


def waiting(reason: str, message: str = ""):
    def m(pod: Pod) -> None:
        _status(pod)["startTime"] = now()
        _container(pod, {"waiting": {"reason": reason, "message": message}})
    return m


def running():
    def m(pod: Pod) -> None:
        st = _status(pod)
        st.update(phase="Running", startTime=st.get("startTime") or now())
        _container(pod, {"running": {"startedAt": now()}}, ready=True)
        _cond(pod, "Ready", "True")
    return m


def terminated(phase: str, exit_code: int, reason: str, pod_reason: str = "", message: str = ""):
    def m(pod: Pod) -> None:
        st = _status(pod)
        started = ((st.get("containerStatuses") or [{}])[0].get("state") or {}).get("running", {}).get("startedAt") or now()
        st["phase"] = phase
        if pod_reason:
            st["reason"] = pod_reason
        if message:
            st["message"] = message
        _container(pod, {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started, "finishedAt": now()}})
        _cond(pod, "Ready", "False", "PodCompleted")
    return m


def disruption(reason: str, ctype: str = "DisruptionTarget"):
    return lambda pod: _cond(pod, ctype, "True", reason, f"{reason} (stand-in)")


def failed_at_admission(reason: str = "UnexpectedAdmissionError"):
    def m(pod: Pod) -> None:
        _status(pod).update(phase="Failed", reason=reason, message="Allocate failed due to no healthy devices present")
    return m


def node_not_ready():
    return lambda pod: _cond(pod, "Ready", "False", "", "node is unreachable")


def marked_for_deletion():
    return lambda pod: pod["metadata"].__setitem__("deletionTimestamp", now())


def together(*mutations):
    """Several changes in one status update (the kubelet writes phase, reason and conditions at once)."""
    def m(pod: Pod) -> None:
        for one in mutations:
            one(pod)
    return m


# -- whole scenarios ---------------------------------------------------------------------
def passes(node: str, logs=("step 1 loss=2.0", "step 2 loss=1.5")) -> list[Step]:
    return [Step(mutate=scheduled(node)), Step(mutate=running(), logs=tuple(logs)),
            Step(mutate=terminated("Succeeded", 0, "Completed"), logs=("done",))]


def ends(node: str, *mutations, logs: tuple[str, ...] = ("training...",)) -> list[Step]:
    """Scheduled on ``node``, running, then each mutation as its own step."""
    return [Step(mutate=scheduled(node)), Step(mutate=running(), logs=logs), *(Step(mutate=m) for m in mutations)]
