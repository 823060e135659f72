"""Run one test attempt as a bare Pod: create, watch, stream logs, classify, clean up, retry infra.

Why a watch and not polling: the deleted cases (preemption, drain, someone's ``kubectl delete``)
are only visible as the last object a watch delivered; a final GET finds nothing. Why our own
wait limits: Kubernetes never gives up on a Pending pod, and a pod on a lost node stays Running
for minutes. The verdict itself is the pure :func:`outcomes.classify`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from pipelines.core.model import Attempt
from pipelines.core.specs import DeploymentSpec, PoolSpec
from pipelines.launch.base import LaunchRequest, LogSink
from pipelines.launch.kubernetes.outcomes import (
    MAIN_CONTAINER,
    Verdict,
    classify,
    explain,
    main_status,
    not_ready,
    terminated,
)
from pipelines.launch.kubernetes.podspec import build_pod

#: Hugging Face tokens printed by a careless test are masked before any log is written.
_TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,}")
_STREAM_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError)


def redact(line: str) -> str:
    return _TOKEN.sub("hf_***", line)


def attempt_log_path(path: Path, attempt: int) -> Path:
    """``x.attempt1.log`` -> ``x.attempt2.log``; other names get ``.attemptN`` before the suffix."""
    name = re.sub(r"\.attempt\d+(?=\.[^.]*$|$)", "", path.name)
    stem, dot, suffix = name.rpartition(".")
    if not dot:
        stem, suffix = name, ""
    return path.with_name(f"{stem}.attempt{attempt}" + (f".{suffix}" if suffix else ""))


def _ts(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if not value:
        return None
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return None


@dataclasses.dataclass(frozen=True)
class PodRun:
    """What one pod did: its name, the verdict, the last object seen, why in one line, seconds Pending."""

    name: str
    verdict: Verdict
    pod: dict[str, Any] | None
    message: str
    pending_s: float


class KubernetesLauncher:
    """The ``kubernetes`` launcher: one bare pod per attempt, infra failures retried elsewhere.

    ``retries`` (default ``deployment.max_infra_retries``): extra attempts after a retriable infra
    outcome, each avoiding every node that failed before. Every attempt goes to ``on_attempt``;
    ``launch`` returns the last one, with a one-line summary of all in ``details["attempts"]``.

    ``cache_paths`` (requirement key -> container path) lets each pod mount the cached inputs
    its test needs; ``env``, when given, is every pod's environment in place of the request's
    (whose paths name the machine that plans, see :func:`podspec.pod_env`).
    """

    name = "kubernetes"

    def __init__(
        self,
        core_v1_api: client.CoreV1Api,
        deployment: DeploymentSpec,
        pools: Sequence[PoolSpec] | None = None,
        namespace: str | None = None,
        *,
        retries: int | None = None,
        pending_wait_s: float | None = None,
        node_lost_wait_s: float = 300.0,
        deadline_slack_s: float = 300.0,
        tick_s: float = 5.0,
        watch_timeout_s: int = 60,
        log_join_s: float = 10.0,
        workdir: str = "",
        cache_paths: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        on_attempt: Callable[[Attempt], None] | None = None,
    ):
        self.api = core_v1_api
        self.deployment = deployment
        self.pools = {p.name: p for p in (pools if pools is not None else deployment.pools)}
        self.namespace = namespace or deployment.namespace
        self.retries = deployment.max_infra_retries if retries is None else retries
        self.pending_wait_s = float(deployment.unschedulable_wait_s if pending_wait_s is None else pending_wait_s)
        self.node_lost_wait_s = node_lost_wait_s
        self.deadline_slack_s = deadline_slack_s
        self.tick_s = tick_s
        self.watch_timeout_s = watch_timeout_s
        self.log_join_s = log_join_s
        self.workdir = workdir
        self.cache_paths = dict(cache_paths or {})
        self.env = dict(env) if env is not None else None
        self.on_attempt = on_attempt
        self._serializer = client.ApiClient()

    # -- the retry loop ----------------------------------------------------------------
    def launch(self, request: LaunchRequest, on_log: LogSink | None = None) -> Attempt:
        attempts: list[Attempt] = []
        failed: list[str] = []
        req = request
        for i in range(self.retries + 1):
            if i:
                n = request.attempt + i
                avoid = tuple(dict.fromkeys((*request.avoid_nodes, *failed)))
                req = dataclasses.replace(request, attempt=n, avoid_nodes=avoid,
                                          log_path=attempt_log_path(request.log_path, n))
            attempt = self.launch_once(req, on_log)
            attempts.append(attempt)
            if self.on_attempt:
                self.on_attempt(attempt)
            if attempt.outcome != "infra_error" or attempt.details.get("retriable") != "true":
                break
            if attempt.node:
                failed.append(attempt.node)
        final = attempts[-1]
        final.details["attempts"] = "; ".join(
            f"{a.attempt}:{a.outcome}{'/' + a.reason if a.reason else ''}@{a.node or '-'}" for a in attempts
        )
        return final

    def pool_for(self, request: LaunchRequest) -> PoolSpec:
        if request.pool in self.pools:
            return self.pools[request.pool]
        for p in self.pools.values():
            if request.test.hardware and request.test.hardware in p.hardware:
                return p
        raise ValueError(
            f"deployment {self.deployment.name}: no pool {request.pool!r} for {request.test.id}; "
            f"pools: {sorted(self.pools)}; add it under deployments.{self.deployment.name}.pools in assets/cluster.yaml"
        )

    # -- one pod -----------------------------------------------------------------------
    def launch_once(self, request: LaunchRequest, on_log: LogSink | None = None) -> Attempt:
        pool = self.pool_for(request)
        if self.env is not None:
            request = dataclasses.replace(request, env=dict(self.env))
        paths = [self.cache_paths[k] for k in request.test.requirements if k in self.cache_paths]
        body = build_pod(request, pool, self.deployment, workdir=self.workdir, cache_paths=paths)
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        started_at = datetime.now(UTC).isoformat(timespec="seconds")
        t0 = time.monotonic()
        with open(request.log_path, "w", encoding="utf-8") as log:
            log.write(f"# nightly: {request.test.id} attempt {request.attempt} pod {self.namespace}/"
                      f"{body['metadata']['name']} pool {pool.name} gpus={request.test.gpus} timeout={request.timeout_s}s\n")
            log.flush()
            run = self.run_pod(body, log, on_log)
        return self._attempt(request, run.verdict, run.pod, run.message, run.name, started_at,
                             time.monotonic() - t0, run.pending_s)

    def run_pod(self, body: dict[str, Any], log: TextIO, on_log: LogSink | None = None,
                container: str = MAIN_CONTAINER) -> PodRun:
        """Create ``body``, follow it to a verdict with ``container``'s log going to ``log``, delete it.

        The pod may run ``activeDeadlineSeconds`` plus ``deadline_slack_s`` before it counts as
        timed out here, in case the kubelet does not enforce the deadline.
        """
        budget = float(body["spec"].get("activeDeadlineSeconds") or float("inf")) + self.deadline_slack_s
        try:
            name, last = self._create(body)
        except ApiException as exc:  # RBAC, quota or admission refused the pod: say so, do not crash the night
            message = f"the API refused the pod ({exc.status} {exc.reason}): {(exc.body or '')[:300]}"
            log.write(f"# nightly: verdict infra_error: {message}\n")
            return PodRun(body["metadata"]["name"], Verdict("infra_error", "create_rejected", False, ""), None, message, 0.0)
        sink = _Sink(log, on_log)
        try:
            verdict, last, waited = self._follow(name, last, budget, sink, container)
        finally:
            sink.join(self.log_join_s)
            with contextlib.suppress(ApiException):
                self.api.delete_namespaced_pod(name, self.namespace)
        message = explain(last, verdict)
        log.write(f"# nightly: verdict {verdict.outcome}: {message}\n")
        return PodRun(name, verdict, last, message, waited)

    def _create(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        try:
            created = self.api.create_namespaced_pod(self.namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            # a pod of the same attempt survived an earlier crash: keep it for inspection, use a fresh name
            body = {**body, "metadata": {**body["metadata"], "name": f"{body['metadata']['name']}-r{int(time.time()) % 100000}"}}
            created = self.api.create_namespaced_pod(self.namespace, body)
        pod = self._serializer.sanitize_for_serialization(created)
        return body["metadata"]["name"], pod if isinstance(pod, dict) else body

    def _follow(
        self, name: str, last: dict[str, Any], budget: float, sink: _Sink, container: str
    ) -> tuple[Verdict, dict[str, Any] | None, float]:
        """Watch until a verdict; returns it, the last pod seen and the seconds spent Pending."""
        events: queue.Queue = queue.Queue()
        stop = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(name, events, stop), daemon=True, name=f"watch:{name}")
        watcher.start()
        created = time.monotonic()
        pending_s = 0.0
        stuck_since: float | None = None
        running_since: float | None = None
        deleted = False
        pod: dict[str, Any] | None = last
        try:
            while True:
                with contextlib.suppress(queue.Empty):
                    ev = events.get(timeout=self.tick_s)
                    while True:
                        if ev["type"] == "DELETED":
                            deleted = True
                        if isinstance(ev.get("raw_object"), dict) and ev["type"] != "ERROR":
                            pod = ev["raw_object"]
                        ev = events.get_nowait()
                now = time.monotonic()
                phase = ((pod or {}).get("status") or {}).get("phase") or "Pending"
                if phase == "Pending":
                    pending_s = now - created
                    waited, limit = pending_s, self.pending_wait_s
                elif phase == "Running" and pod is not None and not_ready(pod):
                    stuck_since = stuck_since or now
                    waited, limit = now - stuck_since, self.node_lost_wait_s
                else:
                    stuck_since = None
                    waited, limit = 0.0, float("inf")
                if phase != "Pending" and running_since is None:
                    running_since = now
                state = (main_status(pod or {}).get("state") or {})
                if not deleted and ("running" in state or "terminated" in state):
                    sink.start(self.api, name, self.namespace, container)
                verdict = classify(pod, deleted, waited, limit)
                if verdict is None and running_since is not None and now - running_since > budget:
                    verdict = Verdict("timed_out", "deadline_not_enforced", False, (pod or {}).get("spec", {}).get("nodeName", ""))
                if verdict is not None:
                    return verdict, pod, round(pending_s, 3)
        finally:
            stop.set()

    def _watch(self, name: str, events: queue.Queue, stop: threading.Event) -> None:
        """Feed watch events for one pod into ``events`` until ``stop``; re-watch on expiry."""
        w = watch.Watch()
        resource_version: str | None = None
        while not stop.is_set():
            kwargs: dict[str, Any] = {"field_selector": f"metadata.name={name}", "timeout_seconds": self.watch_timeout_s}
            if resource_version:
                kwargs["resource_version"] = resource_version
            try:
                for ev in w.stream(self.api.list_namespaced_pod, self.namespace, **kwargs):
                    if stop.is_set():
                        break
                    events.put(ev)
                    resource_version = w.resource_version or resource_version
            except ApiException as exc:
                if exc.status == 410:  # expired resource version: start over from the current state
                    resource_version = None
                    continue
                events.put({"type": "ERROR", "error": str(exc)})
                stop.wait(self.tick_s)
            except _STREAM_ERRORS:
                stop.wait(self.tick_s)
        w.stop()

    def _attempt(self, request: LaunchRequest, verdict: Verdict, pod: dict[str, Any] | None, message: str,
                 name: str, started_at: str, wall_s: float, pending_s: float) -> Attempt:
        term = terminated(pod or {})
        start, end = _ts(term.get("startedAt")), _ts(term.get("finishedAt"))
        elapsed = (end - start).total_seconds() if start and end else max(0.0, wall_s - pending_s)
        pod_start = ((pod or {}).get("status") or {}).get("startTime")
        return Attempt(
            test_id=request.test.id,
            outcome=verdict.outcome,  # type: ignore[arg-type]
            elapsed_s=round(elapsed, 3),
            started_at=str(pod_start or started_at),
            attempt=request.attempt,
            node=verdict.node,
            gpu_slots=request.gpu_slots,
            exit_code=term.get("exitCode"),
            reason=verdict.reason,
            log_path=str(request.log_path),
            timeout_s=request.timeout_s,
            details={"pod": name, "namespace": self.namespace, "message": message,
                     "retriable": "true" if verdict.retriable_infra else "false", "pending_s": f"{pending_s:.1f}"},
        )


class _Sink:
    """Follows the test container's log once it has started; writes redacted lines to the file and ``on_log``."""

    def __init__(self, log, on_log: LogSink | None):
        self.log, self.on_log = log, on_log
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()
        self.closed = False

    def start(self, api: client.CoreV1Api, name: str, namespace: str, container: str = MAIN_CONTAINER) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, args=(api, name, namespace, container), daemon=True,
                                           name=f"logs:{name}")
            self.thread.start()

    def _run(self, api: client.CoreV1Api, name: str, namespace: str, container: str) -> None:
        try:
            for line in watch.Watch().stream(api.read_namespaced_pod_log, name=name, namespace=namespace,
                                             container=container, follow=True):
                self.write(redact(line))
        except _STREAM_ERRORS as exc:
            self.write(f"# nightly: log stream ended: {type(exc).__name__}")

    def write(self, line: str) -> None:
        with self.lock:
            if self.closed:
                return
            self.log.write(line + "\n")
            self.log.flush()
        if self.on_log:
            self.on_log(line)

    def join(self, timeout_s: float) -> None:
        """Wait for the stream to end; a stream still open after ``timeout_s`` writes nothing more."""
        if self.thread is not None:
            self.thread.join(timeout_s)
        with self.lock:
            self.closed = True


def launcher_from_deployment(deployment: DeploymentSpec, *, kubeconfig: str | None = None,
                             context: str | None = None, retries: int = 0, **kwargs: Any) -> KubernetesLauncher:
    """A launcher for ``deployment`` with credentials from the pod (in cluster) or the kubeconfig.

    ``retries`` defaults to 0 because :func:`pipelines.launch.dispatch.run_plan` already retries
    infra errors on another node; use ``deployment.max_infra_retries`` when calling directly.
    """
    import os

    from kubernetes import config

    if os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
        config.load_incluster_config()
    else:
        # $KUBECONFIG read now: the client reads it once, when kubernetes is first imported
        config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG") or None, context=context)
    return KubernetesLauncher(client.CoreV1Api(), deployment, retries=retries, **kwargs)
