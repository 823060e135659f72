"""Pod states from k8s-facts.md, as mutations the stand-in API server applies in order.

Each helper returns a function that edits a stored pod the way the kubelet / controllers would,
so a scenario reads like the table row it checks.
"""

from __future__ import annotations

import json
from typing import Any

from pipelines.launch.kubernetes.outcomes import TOKEN_ENV
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


#: what the kubelet reports for an image pinned by digest (the registry's answer otherwise)
IMAGE_ID = "ghcr.io/example/rl@sha256:" + "ab" * 32


def _container(pod: Pod, state: dict[str, Any], ready: bool = False) -> None:
    c = pod["spec"]["containers"][0]
    image = c["image"]
    image_id = image if "@sha256:" in image else IMAGE_ID
    _status(pod)["containerStatuses"] = [
        {"name": c["name"], "image": image, "imageID": image_id if "running" in state or "terminated" in state else "",
         "ready": ready, "restartCount": 0, "state": state}
    ]


def _init(pod: Pod, state: dict[str, Any]) -> None:
    inits = pod["spec"].get("initContainers") or [{"name": "preflight", "image": ""}]
    _status(pod)["initContainerStatuses"] = [
        {"name": inits[0]["name"], "image": inits[0]["image"], "imageID": "", "ready": False, "restartCount": 0,
         "state": state}
    ]


def preflight_running():
    """Pending, the pre-flight init container running (PodInitializing for the test container)."""
    def m(pod: Pod) -> None:
        _status(pod)["startTime"] = _status(pod).get("startTime") or now()
        _init(pod, {"running": {"startedAt": now()}})
        _container(pod, {"waiting": {"reason": "PodInitializing"}})
    return m


def preflight_done():
    return lambda pod: _init(pod, {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now(), "finishedAt": now()}})


def preflight_failed(exit_code: int, message: str = ""):
    """The pre-flight exited non-zero: the pod fails, the test container never starts."""
    def m(pod: Pod) -> None:
        term = {"exitCode": exit_code, "reason": "Error", "startedAt": now(), "finishedAt": now()}
        if message:
            term["message"] = message
        _init(pod, {"terminated": term})
        _status(pod)["phase"] = "Failed"
        _container(pod, {"waiting": {"reason": "PodInitializing"}})
    return m


#: what containerd says when the NVIDIA runtime's hook fails (a driver upgraded under a running node)
NVML_MISMATCH = ("failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
                 "failed: unable to start container process: error during container init: error running hook #0: "
                 "error running hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy' "
                 "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown")


def start_error(message: str = NVML_MISMATCH, container: str = "preflight", reason: str = "StartError"):
    """The container runtime could not start the pre-flight (``container="preflight"``) or the test
    container: terminated with the runtime's exit 128 and message, no process of ours ran; the pod fails."""
    def m(pod: Pod) -> None:
        term = {"exitCode": 128, "reason": reason, "message": message, "startedAt": "1970-01-01T00:00:00Z",
                "finishedAt": now()}
        if container == "preflight":
            _init(pod, {"terminated": term})
            _container(pod, {"waiting": {"reason": "PodInitializing"}})
        else:
            preflight_done()(pod)
            _container(pod, {"terminated": term})
        _status(pod)["phase"] = "Failed"
    return m


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


def completion_record(pod: Pod, **fields: Any) -> str:
    """The wrapper's record for a test that ran to its end, with the pod's token (``fields`` override)."""
    env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}
    record = {"file": "t.py", "func": "execute", "ok": True, "exit_code": 0, "execute_s": 1.0, "elapsed_s": 1.0,
              "finished": True, "token": env.get(TOKEN_ENV, "")}
    return json.dumps({**record, **fields})


def terminated(phase: str, exit_code: int, reason: str, pod_reason: str = "", message: str = "",
               record: bool = True):
    """The test container ended. A clean exit 0 carries the wrapper's completion record (the
    termination message the kubelet reads from ``--result /dev/termination-log``), unless
    ``record=False``: a test that called ``os._exit(0)`` halfway."""
    def m(pod: Pod) -> None:
        st = _status(pod)
        started = ((st.get("containerStatuses") or [{}])[0].get("state") or {}).get("running", {}).get("startedAt") or now()
        st["phase"] = phase
        if pod_reason:
            st["reason"] = pod_reason
        if message:
            st["message"] = message
        state = {"exitCode": exit_code, "reason": reason, "startedAt": started, "finishedAt": now()}
        if record and exit_code == 0 and reason == "Completed" and TOKEN_ENV in json.dumps(pod["spec"]["containers"][0]):
            state["message"] = completion_record(pod)
        _container(pod, {"terminated": state})
        _cond(pod, "Ready", "False", "PodCompleted")
    return m


#: the kubelet's message on a container it cannot find once the pod ends (its node crashed and rebooted)
NOT_LOCATED = "The container could not be located when the pod was terminated"


def container_lost(reason: str = "ContainerStatusUnknown", exit_code: int = 137, message: str = NOT_LOCATED):
    """The runtime lost the test container (a node that crashed and rebooted before its pods were marked
    NotReady or evicted): the kubelet's ContainerStatusUnknown, or containerd's Unknown with exit 255;
    no pod-level reason, no condition."""
    def m(pod: Pod) -> None:
        st = _status(pod)
        st["phase"] = "Failed"
        state = {"exitCode": exit_code, "reason": reason, "startedAt": now(), "finishedAt": now()}
        if message:
            state["message"] = message
        _container(pod, {"terminated": state})
        _cond(pod, "Ready", "False", "PodFailed")
    return m


def failed_before_start(waiting: bool = True):
    """The kubelet failed the pod before its test container started: phase Failed, no pod reason and no
    condition, the container still waiting (ContainerCreating) or, ``waiting=False``, with no status at all."""
    def m(pod: Pod) -> None:
        st = _status(pod)
        st["phase"] = "Failed"
        if waiting:
            _container(pod, {"waiting": {"reason": "ContainerCreating"}})
        else:
            st.pop("containerStatuses", None)
        _cond(pod, "Ready", "False", "PodFailed")
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
def passes_after_preflight(node: str, logs=("step 1 loss=2.0",), startup_s: float = 0.01) -> list[Step]:
    """Scheduled, the pre-flight takes ``startup_s``, then the test runs and passes."""
    return [Step(mutate=scheduled(node)), Step(mutate=preflight_running()),
            Step(delay_s=startup_s, mutate=together(preflight_done(), running()), logs=tuple(logs)),
            Step(mutate=terminated("Succeeded", 0, "Completed"), logs=("done",))]


def passes(node: str, logs=("step 1 loss=2.0", "step 2 loss=1.5")) -> list[Step]:
    return [Step(mutate=scheduled(node)), Step(mutate=running(), logs=tuple(logs)),
            Step(mutate=terminated("Succeeded", 0, "Completed"), logs=("done",))]


def ends(node: str, *mutations, logs: tuple[str, ...] = ("training...",)) -> list[Step]:
    """Scheduled on ``node``, running, then each mutation as its own step."""
    return [Step(mutate=scheduled(node)), Step(mutate=running(), logs=logs), *(Step(mutate=m) for m in mutations)]
