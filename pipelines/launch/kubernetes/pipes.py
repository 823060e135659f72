"""The production path inside a Dagster asset: dagster-k8s ``PipesK8sClient`` runs our pod.

PipesK8sClient gives the asset its logs, Pipes messages (the wrapper's execute() time) and
materialization, but judges only container exit codes (an evicted pod, or an OOM-killed
container that exits 0, "succeeds"; a Pending pod waits a day). So while it runs, a watch on the
pod's unique label records the last pod object seen, and *our* :func:`outcomes.classify` decides
the attempt. As on the watch-based path, the attempt log is written (a log follower of our own,
tokens masked; a log it could not finish fails a pass), tokens are masked in what dagster-k8s forwards to the step's stdout too, and
the elapsed time is the test container's own (start to finish), never queueing or pulls.
Dagster is imported here only, so the launcher core stays testable without it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
import time
import uuid
from typing import Any, TextIO

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from pipelines.core.model import Attempt
from pipelines.core.specs import DeploymentSpec, PoolSpec
from pipelines.launch.base import LaunchRequest
from pipelines.launch.kubernetes.clock import PodClock
from pipelines.launch.kubernetes.launcher import OncePerNight
from pipelines.launch.kubernetes.logstream import LogFollower, redact
from pipelines.launch.kubernetes.outcomes import (
    Verdict,
    classify,
    ended_by_itself,
    explain,
    image_id,
    init_failure,
    main_status,
    node_of,
    terminated,
    timestamp,
)
from pipelines.launch.kubernetes.ownership import launched_by
from pipelines.launch.kubernetes.podspec import LABEL_PREFIX, build_pod
from pipelines.launch.kubernetes.resources import pinned_image
from pipelines.launch.kubernetes.retries import CONNECTION_ERRORS, with_retries
from pipelines.launch.logcap import CappedText

logger = logging.getLogger(__name__)


class MaskingStream(io.TextIOBase):
    """Stdout as dagster-k8s writes the pod's lines to it (the step's logs), with tokens masked."""

    def __init__(self, inner: TextIO):
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(redact(text))
        return len(text)

    def flush(self) -> None:
        self.inner.flush()


class PodRecorder:
    """Watches pods matching a label selector and keeps the last object seen and whether it was deleted."""

    def __init__(self, api: client.CoreV1Api, namespace: str, selector: str, follower: LogFollower | None = None):
        self.api, self.namespace, self.selector = api, namespace, selector
        self.follower = follower
        self.last: dict[str, Any] | None = None
        #: the last object before any DELETED event (dagster-k8s deletes the pod after it ends)
        self.before_delete: dict[str, Any] | None = None
        self.deleted = False
        self._stop = threading.Event()
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"record:{selector}")

    def __enter__(self) -> PodRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._watch.stop()

    def verdict_input(self) -> tuple[dict[str, Any] | None, bool]:
        """(pod, deleted) to classify: a pod that ended before it was deleted ended by itself."""
        before = self.before_delete
        if self.deleted and ended_by_itself(before):
            return before, False
        return self.last, self.deleted

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for ev in self._watch.stream(self.api.list_namespaced_pod, self.namespace,
                                             label_selector=self.selector, timeout_seconds=60):
                    self.last = ev["raw_object"]
                    if ev["type"] == "DELETED":
                        self.deleted = True
                    else:
                        self.before_delete = ev["raw_object"]
                    state = main_status(ev["raw_object"]).get("state") or {}
                    if self.follower is not None and ev["type"] != "DELETED" and ("running" in state or "terminated" in state):
                        self.follower.start(self.api, ev["raw_object"]["metadata"]["name"], self.namespace)
                    if self._stop.is_set():
                        return
            except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError):
                self._stop.wait(1.0)


def run_test_pod(context: Any, request: LaunchRequest, pool: PoolSpec, deployment: DeploymentSpec, *,
                 pipes_client: Any = None, core_v1_api: client.CoreV1Api | None = None,
                 settle_s: float = 5.0, cache_paths: Any = (), digest: str = "", owner: Any = None,
                 log_join_s: float = 10.0, tick_s: float = 1.0,
                 cancelled: threading.Event | None = None,
                 once: OncePerNight | None = None) -> tuple[Attempt, Any]:
    """Run one attempt through ``PipesK8sClient.run``; returns our Attempt and the Pipes invocation.

    The invocation is None when dagster-k8s raised (it does on any non-zero exit); the Attempt
    says what really happened. Retrying infra outcomes stays with the caller (Dagster retries or
    the dispatcher), avoiding ``attempt.node``.

    The pod is held to the watch launcher's limits (:class:`clock.PodClock`: the test timeout from
    its container's start, the unscheduled and startup waits), which dagster-k8s does not know:
    past one, the pod is deleted and the verdict is ours. dagster-k8s then raises, or, when the pod
    never got a container status (unschedulable), keeps polling for it for a day: its call runs in
    a thread of its own, which is left to end with the process after ``settle_s``.

    ``cancelled`` set (the run was interrupted or terminated: ``PipesLauncher.cancel_all``): the
    pod is deleted at the next tick and the attempt is ``interrupted``, as on the other launchers;
    a terminated UI run must not hold its GPUs until the test's timeout.

    ``once``: the caller's once-per-night rule (:class:`launcher.OncePerNight`), so that a test's
    second ``log_unreadable`` or ``failed_without_container`` tonight is final, as on the watch launcher.
    """
    from dagster_k8s import PipesK8sClient
    from dagster_k8s.client import DagsterK8sError

    body = build_pod(request, pool, deployment, cache_paths=list(cache_paths), digest=digest, owner=owner,
                     launched_by=launched_by())
    uid = uuid.uuid4().hex[:16]
    meta = {k: v for k, v in body["metadata"].items() if k not in ("name", "namespace")}
    meta["labels"] = {**meta["labels"], f"{LABEL_PREFIX}/attempt-uid": uid}
    pipes_client = pipes_client or PipesK8sClient()
    api = core_v1_api or client.CoreV1Api()
    wait_s = request.timeout_s + deployment.startup_wait_s + deployment.unschedulable_wait_s
    t0 = time.monotonic()
    clock = PodClock(t0, pending_wait_s=deployment.unschedulable_wait_s, startup_wait_s=deployment.startup_wait_s,
                     timeout_s=request.timeout_s)
    outcome: dict[str, Any] = {}

    def call() -> None:  # dagster-k8s's run, in its own thread so that our limits hold while it waits
        try:
            outcome["invocation"] = pipes_client.run(context=context, namespace=deployment.namespace,
                                                     base_pod_meta=meta, base_pod_spec=body["spec"],
                                                     pod_wait_timeout=wait_s)
        except (DagsterK8sError, ApiException) as exc:
            outcome["error"] = f"{type(exc).__name__}: {exc}"
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
            outcome["raised"] = exc

    enforced: Verdict | None = None
    ran_s: float | None = None
    request.log_path.parent.mkdir(parents=True, exist_ok=True)
    # capped as every test log is (logcap): head and tail kept, the cut said
    with contextlib.closing(CappedText(open(request.log_path, "wb"))) as log:  # noqa: SIM115 - closed by closing()
        log.write(f"# nightly: {request.test.id} attempt {request.attempt} through dagster-k8s Pipes, pool {pool.name} "
                  f"gpus={request.test.gpus} timeout={request.timeout_s}s image={body['spec']['containers'][0]['image']}\n")
        follower = LogFollower(log, None)
        with PodRecorder(api, deployment.namespace, f"{LABEL_PREFIX}/attempt-uid={uid}", follower) as rec, \
                contextlib.redirect_stdout(MaskingStream(sys.stdout)):
            worker = threading.Thread(target=call, daemon=True, name=f"pipes:{request.test.id}")
            worker.start()
            try:
                while worker.is_alive():
                    worker.join(tick_s)
                    if enforced is None and worker.is_alive() and cancelled is not None and cancelled.is_set():
                        enforced, ran_s = _cancel(rec, clock, api, deployment.namespace, worker, settle_s, tick_s)
                        log.write("# nightly: the night was interrupted: the pod was deleted\n")
                        break
                    if enforced is None and worker.is_alive():
                        enforced, ran_s = _enforce(rec, clock, api, deployment.namespace)
                        if enforced is not None:
                            log.write(f"# nightly: {enforced.reason}: the pod was deleted\n")
                            worker.join(settle_s)
                            break
            except BaseException:  # interrupted: the pod must not run on to its deadline
                _delete(api, rec, deployment.namespace)
                raise
            if "raised" in outcome:
                raise outcome["raised"]
            deadline = time.monotonic() + settle_s
            while enforced is None:  # the final events may still be in flight
                last, deleted = rec.verdict_input()
                verdict = classify(last, deleted, 0.0, float("inf"))
                if verdict is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            last, deleted = rec.verdict_input()
        follower.join(log_join_s)
        if enforced is not None:
            verdict = enforced
        elif verdict is None:  # dagster-k8s gave up on a pod that never finished: judge it as stuck
            verdict = classify(last, deleted, float("inf"), 0.0) or Verdict("infra_error", "unknown", False, "")
        message = explain(last, verdict)
        if verdict.outcome == "interrupted":
            message = f"the night was interrupted and its pod deleted ({message})"
        verdict, message = follower.judge(verdict, message)
        if once is not None:
            verdict = once.judge(request.test.id, verdict)
        log.write(f"# nightly: verdict {verdict.outcome}: {message}\n")
    term = terminated(last or {})
    start, end = timestamp(term.get("startedAt")), timestamp(term.get("finishedAt"))
    # the test container's own time; without its timestamps (never started, or deleted at its timeout) as seen here
    elapsed = (end - start).total_seconds() if start and end else (ran_s or 0.0)
    error = outcome.get("error", "")
    details = {"message": message, "retriable": str(verdict.retriable_infra).lower(),
               "pod": ((last or {}).get("metadata") or {}).get("name", ""), "namespace": deployment.namespace,
               "image_digest": pinned_image(pool, digest)[1], "wall_s": f"{time.monotonic() - t0:.1f}"}
    if image_id(last):
        details["image_id"] = image_id(last)
    if error:
        details["dagster_k8s"] = redact(error[:500])
    if follower.unfinished:
        details["log_unfinished"] = "true"
    if log.dropped:
        details["log_cut_bytes"] = str(log.dropped)
    attempt = Attempt(
        test_id=request.test.id, outcome=verdict.outcome,  # type: ignore[arg-type]
        elapsed_s=round(max(0.0, elapsed), 3), started_at=str(((last or {}).get("status") or {}).get("startTime") or ""),
        attempt=request.attempt, node=verdict.node, exit_code=term.get("exitCode"), reason=verdict.reason,
        log_path=str(request.log_path), timeout_s=request.timeout_s, details=details,
    )
    return attempt, outcome.get("invocation")


def _enforce(rec: PodRecorder, clock: PodClock, api: client.CoreV1Api,
             namespace: str) -> tuple[Verdict | None, float | None]:
    """Our limits on the pod dagster-k8s waits for: past one (a verdict while the pod has not ended
    by itself), delete it and return (verdict, seconds its test ran); else (None, None).

    A pod that ended with no terminated test container (the kubelet failed it before the container
    ran) is judged here too: dagster-k8s waits for that container to become ready, up to its
    ready timeout (5 h, or a day with no container status), holding the pod's GPUs."""
    last, deleted = rec.last, rec.deleted
    now = time.monotonic()
    verdict = clock.judge(last, deleted, now)
    phase = ((last or {}).get("status") or {}).get("phase")
    # a failed pre-flight dagster-k8s does see (it raises on the init container's exit code)
    unseen_end = phase in ("Succeeded", "Failed") and not terminated(last or {}) and not init_failure(last or {})
    if verdict is None or deleted or last is None or (phase in ("Succeeded", "Failed") and not unseen_end):
        return None, None  # running, or ended: dagster-k8s sees the end and our classify judges it
    _delete(api, rec, namespace)
    return verdict, clock.ran_s(now)


def _cancel(rec: PodRecorder, clock: PodClock, api: client.CoreV1Api, namespace: str, worker: threading.Thread,
            settle_s: float, tick_s: float) -> tuple[Verdict, float]:
    """Delete the attempt's pod for an interrupted run; one dagster-k8s creates while we wait
    (the interrupt came before its create call) is deleted too. Returns (interrupted, seconds run)."""
    now = time.monotonic()
    ran = clock.ran_s(now)
    done: set[str] = set()
    deadline = now + settle_s
    while True:
        name = ((rec.last or {}).get("metadata") or {}).get("name")
        if name and name not in done and not rec.deleted:
            _delete(api, rec, namespace)
            done.add(name)
        if not worker.is_alive() or time.monotonic() > deadline:
            break
        worker.join(tick_s)
    return Verdict("interrupted", "deleted" if done else "cancelled", False, node_of(rec.last)), ran


def _delete(api: client.CoreV1Api, rec: PodRecorder, namespace: str) -> None:
    name = ((rec.last or {}).get("metadata") or {}).get("name")
    if not name:
        return
    try:
        with_retries(api.delete_namespaced_pod, name, namespace, attempts=3)
    except (ApiException, *CONNECTION_ERRORS) as exc:  # the backstop deadline ends it
        logger.warning("pod %s not deleted (%s); its activeDeadlineSeconds ends it", name, type(exc).__name__)


class PipesLauncher:
    """The Launcher interface over ``PipesK8sClient``, where one step context runs one test pod.

    Used for a run of exactly one ``test_runs`` partition on Kubernetes (a rerun of one partition):
    one container per asset partition, its logs and Pipes messages in that run's UI. Retries on
    another node stay with the dispatcher, exactly as for the watch-based launcher.
    """

    name = "kubernetes-pipes"

    def __init__(self, context: Any, deployment: DeploymentSpec, *, pipes_client: Any = None,
                 core_v1_api: client.CoreV1Api | None = None, cache_paths: Any = None, env: Any = None,
                 image_digests: Any = None, owner: Any = None):
        self.context = context
        self.image_digests = dict(image_digests or {})
        self.owner = owner
        self.deployment = deployment
        self.pipes_client = pipes_client
        self.api = core_v1_api
        self.cache_paths = dict(cache_paths or {})
        self.env = dict(env) if env is not None else None
        #: the Pipes invocations of this step: Dagster requires their results to be yielded
        #: (``yield from inv.get_results()``) or the step fails with "did not yield ... outputs"
        self.invocations: list[Any] = []
        #: set by cancel_all: running pods are deleted, no new one is started
        self.cancelled = threading.Event()
        #: shared with the watch launcher's rule: a test's second once-per-night outcome is final
        self.once = OncePerNight()
        self._running: list[str] = []
        self._lock = threading.Lock()

    def cancel_all(self) -> list[str]:
        """Start no more pods and delete the running ones (each at its next tick); returns the
        ids of the tests running. For the run's interrupt handler (``execute._dispatch``), as the
        other launchers: a terminated run must not leave GPU pods running to their deadline."""
        self.cancelled.set()
        with self._lock:
            return list(self._running)

    def launch(self, request: LaunchRequest, on_log: Any = None) -> Attempt:
        import dataclasses

        pool = next(p for p in self.deployment.pools if p.name == request.pool)
        if self.env is not None:  # pods see the cache PVC, not the planning machine's folders
            request = dataclasses.replace(request, env=dict(self.env))
        paths = [self.cache_paths[k] for k in request.test.requirements if k in self.cache_paths]
        if self.cancelled.is_set():  # interrupted before this attempt: no pod
            return _not_started(request)
        with self._lock:
            self._running.append(request.test.id)
        try:
            attempt, invocation = run_test_pod(self.context, request, pool, self.deployment,
                                               pipes_client=self.pipes_client, core_v1_api=self.api, cache_paths=paths,
                                               digest=self.image_digests.get(pool.name, ""), owner=self.owner,
                                               cancelled=self.cancelled, once=self.once)
        finally:
            with self._lock:
                self._running.remove(request.test.id)
        if invocation is not None:
            self.invocations.append(invocation)
        return attempt


def _not_started(request: LaunchRequest) -> Attempt:
    """The attempt of a run interrupted before its pod was created: interrupted, as locally."""
    request.log_path.parent.mkdir(parents=True, exist_ok=True)
    request.log_path.write_text(f"# nightly: {request.test.id} attempt {request.attempt} through dagster-k8s Pipes\n"
                                "# nightly: verdict interrupted: the night was interrupted before this pod was "
                                "created\n", encoding="utf-8")
    return Attempt(test_id=request.test.id, outcome="interrupted", elapsed_s=0.0, started_at="",
                   attempt=request.attempt, reason="cancelled", log_path=str(request.log_path),
                   timeout_s=request.timeout_s,
                   details={"message": "the night was interrupted before this pod was created"})


def pipes_launcher_for(context: Any, deployment: DeploymentSpec, *, cache_paths: Any = None, env: Any = None,
                       poll_interval_s: float = 2.0, image_digests: Any = None) -> PipesLauncher:
    """A PipesLauncher with credentials from the pod (in cluster) or the kubeconfig, as the other launcher."""
    import os

    from dagster_k8s import PipesK8sClient

    from pipelines.launch.kubernetes.connect import launcher_from_deployment

    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    pipes = PipesK8sClient(load_incluster_config=in_cluster or None,
                           kubeconfig_file=None if in_cluster else os.environ.get("KUBECONFIG"),
                           poll_interval=poll_interval_s)
    pods = launcher_from_deployment(deployment)  # its API client and the run's own pod (the owner)
    return PipesLauncher(context, deployment, pipes_client=pipes, core_v1_api=pods.api, cache_paths=cache_paths,
                         env=env, image_digests=image_digests, owner=pods.owner)
