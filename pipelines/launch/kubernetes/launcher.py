"""Run one test attempt as a bare Pod: create, watch, stream logs, classify, clean up, retry infra.

Why a watch and not polling: the deleted cases (preemption, drain, someone's ``kubectl delete``)
are only visible as the last object a watch delivered; a final GET finds nothing. Why our own
wait limits: Kubernetes never gives up on a Pending pod, and a pod on a lost node stays Running
for minutes. Why the test's clock starts at its container: an image pull or a slow pre-flight is
the infrastructure's time, not the test's. Every API call survives throttling (429), a
restarting API server (5xx) and dropped connections (:mod:`retries`); a dropped log stream
resumes where it stopped. The verdict itself is the pure :func:`outcomes.classify`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import queue
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from pipelines.core.health import NODE_FAULTS
from pipelines.core.model import Attempt
from pipelines.core.specs import DeploymentSpec, PoolSpec
from pipelines.launch.base import LaunchRequest, LogSink
from pipelines.launch.kubernetes.clock import NODE_LOST_WAIT_S, PodClock
from pipelines.launch.kubernetes.logstream import STREAM_ERRORS, LogFollower
from pipelines.launch.kubernetes.nodes import NodePins
from pipelines.launch.kubernetes.outcomes import (
    MAIN_CONTAINER,
    Verdict,
    ended_by_itself,
    explain,
    image_id,
    main_status,
    terminated,
    timestamp,
)
from pipelines.launch.kubernetes.ownership import launched_by
from pipelines.launch.kubernetes.podspec import ATTEMPT_UID, build_pod
from pipelines.launch.kubernetes.resources import pinned_image
from pipelines.launch.kubernetes.retries import CONNECTION_ERRORS, api_message, delay_for, with_retries
from pipelines.launch.logcap import DEFAULT_LOG_CAP_BYTES, CappedText

log = logging.getLogger(__name__)

#: retried once per test and night, not on every node: their cause may be the test's pod, not one node's
#: (the API refusing a second node's log too, for RBAC; a pod failed before its container ran twice)
ONCE_PER_NIGHT = frozenset({"log_unreadable", "failed_without_container"})


class OncePerNight:
    """The ONCE_PER_NIGHT rule, one for both launch paths (this launcher and ``pipes.PipesLauncher``):
    a test's first such outcome tonight stays retriable, a second one, of either reason, is final
    (what failed on a second node too will fail on a third; keyed by reason, a test alternating
    the two was retried on every node)."""

    def __init__(self) -> None:
        #: tests with a ONCE_PER_NIGHT outcome tonight
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def judge(self, test_id: str, verdict: Verdict) -> Verdict:
        """``verdict``, made final when it is the test's second ONCE_PER_NIGHT outcome tonight."""
        if verdict.outcome != "infra_error" or verdict.reason not in ONCE_PER_NIGHT:
            return verdict
        with self._lock:
            again = test_id in self._seen
            self._seen.add(test_id)
        return verdict._replace(retriable_infra=False) if again else verdict


def attempt_log_path(path: Path, attempt: int) -> Path:
    """``x.attempt1.log`` -> ``x.attempt2.log``; other names get ``.attemptN`` before the suffix."""
    name = re.sub(r"\.attempt\d+(?=\.[^.]*$|$)", "", path.name)
    stem, dot, suffix = name.rpartition(".")
    if not dot:
        stem, suffix = name, ""
    return path.with_name(f"{stem}.attempt{attempt}" + (f".{suffix}" if suffix else ""))


@dataclasses.dataclass(frozen=True)
class PodRun:
    """What one pod did: its name, the verdict, the last object seen, why in one line, seconds
    Pending, the seconds its test container ran as measured here (None: never started), and
    whether its log lacks lines (:attr:`LogFollower.unfinished`)."""

    name: str
    verdict: Verdict
    pod: dict[str, Any] | None
    message: str
    pending_s: float
    ran_s: float | None = None
    log_unfinished: bool = False


class KubernetesLauncher:
    """The ``kubernetes`` launcher: one bare pod per attempt, infra failures retried elsewhere.

    ``retries`` (default ``deployment.max_infra_retries``): extra attempts after a retriable infra
    outcome, each avoiding every node that failed before. Every attempt goes to ``on_attempt``;
    ``launch`` returns the last one, with a one-line summary of all in ``details["attempts"]``.

    Time limits: ``pending_wait_s`` unscheduled (default ``unschedulable_wait_s``),
    ``startup_wait_s`` scheduled but pulling or in the pre-flight (infra, retried elsewhere),
    then the request's ``timeout_s`` from the test container's start (a test timeout).

    ``cache_paths`` (requirement key -> container path) lets each pod mount the cached inputs
    its test needs; ``env``, when given, is every pod's environment in place of the request's
    (whose paths name the machine that plans, see :func:`podspec.pod_env`). ``image_digests``
    (pool -> ``sha256:...``) pins tonight's image; ``owner`` is the run's pod
    (:func:`ownership.run_pod_owner`); ``pin_nodes`` maps the plan's nodes to real ones.
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
        startup_wait_s: float | None = None,
        node_lost_wait_s: float = NODE_LOST_WAIT_S,
        tick_s: float = 5.0,
        watch_timeout_s: int = 60,
        log_join_s: float = 10.0,
        workdir: str = "",
        cache_paths: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        on_attempt: Callable[[Attempt], None] | None = None,
        image_digests: Mapping[str, str] | None = None,
        owner: Mapping[str, Any] | None = None,
        pin_nodes: bool = True,
        backoff_s: float = 0.5,
        api_attempts: int = 6,
        log_cap_bytes: int = DEFAULT_LOG_CAP_BYTES,
    ):
        self.api = core_v1_api
        self.deployment = deployment
        self.pools = {p.name: p for p in (pools if pools is not None else deployment.pools)}
        self.namespace = namespace or deployment.namespace
        self.retries = deployment.max_infra_retries if retries is None else retries
        self.pending_wait_s = float(deployment.unschedulable_wait_s if pending_wait_s is None else pending_wait_s)
        self.startup_wait_s = float(deployment.startup_wait_s if startup_wait_s is None else startup_wait_s)
        self.node_lost_wait_s = node_lost_wait_s
        self.tick_s = tick_s
        self.watch_timeout_s = watch_timeout_s
        self.log_join_s = log_join_s
        self.log_cap_bytes = log_cap_bytes
        self.workdir = workdir
        self.cache_paths = dict(cache_paths or {})
        self.env = dict(env) if env is not None else None
        self.on_attempt = on_attempt
        self.image_digests = dict(image_digests or {})
        self.owner = dict(owner) if owner else None
        self.retry = {"base_s": backoff_s, "attempts": api_attempts}
        self.pins = NodePins(core_v1_api, **self.retry) if pin_nodes else None
        self.cancelled = threading.Event()
        self._live: dict[str, None] = {}
        #: pods cancel_all deleted: whatever the API then says of them (deleted, or the image pull
        #: it was waiting for), they ended because the night stopped
        self._cancelled_pods: set[str] = set()
        self.once = OncePerNight()
        self._lock = threading.Lock()
        self._serializer = client.ApiClient()

    @property
    def notes(self) -> list[str]:
        """What the night should know but that failed no test (e.g. nodes could not be listed)."""
        return list(self.pins.notes) if self.pins else []

    def cancel_all(self) -> list[str]:
        """Start no more pods and delete every pod still running; returns their names.

        For the run's signal handler: an interrupted night must not leave GPU pods running
        to their deadline. Safe to call from any thread, more than once.
        """
        self.cancelled.set()
        with self._lock:
            names = list(self._live)
            self._cancelled_pods.update(names)
        for name in names:
            self._delete(name)
        return names

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
            if self.pins and attempt.outcome == "infra_error" and attempt.reason in NODE_FAULTS and attempt.node:
                # the pins were listed at night start: this node must not keep the plan's later tests waiting
                self.pins.fault(attempt.node, f"{attempt.reason} of {attempt.test_id} attempt {attempt.attempt}")
            if self.on_attempt:
                self.on_attempt(attempt)
            if attempt.outcome != "infra_error" or attempt.details.get("retriable") != "true" or self.cancelled.is_set():
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

    def pod_for(self, request: LaunchRequest, attempt_uid: str = "", node: str | None = None) -> dict[str, Any]:
        """The pod body this launcher would create for ``request`` (also what ``--dry-run`` prints);
        ``node``: the real node to pin it to (default: the plan's node's, see :class:`NodePins`)."""
        pool = self.pool_for(request)
        if self.env is not None:
            request = dataclasses.replace(request, env=dict(self.env))
        paths = [self.cache_paths[k] for k in request.test.requirements if k in self.cache_paths]
        if node is None:
            node = self.pins.real(pool, request.node) if self.pins else ""
        return build_pod(request, pool, self.deployment, workdir=self.workdir, cache_paths=paths,
                         digest=self.image_digests.get(pool.name, ""), node_name=node, owner=self.owner,
                         attempt_uid=attempt_uid, launched_by=launched_by())

    # -- one pod -----------------------------------------------------------------------
    def launch_once(self, request: LaunchRequest, on_log: LogSink | None = None) -> Attempt:
        pool = self.pool_for(request)
        # once: another test's node fault may unpin this virtual node while this pod waits, yet it was pinned
        unpinned = self.pins.unpinned_because(pool, request.node) if self.pins else ""
        pinned = self.pins.real(pool, request.node) if self.pins else ""
        body = self.pod_for(request, uuid.uuid4().hex[:16], pinned)
        digest = pinned_image(pool, self.image_digests.get(pool.name, ""))[1]
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        started_at = datetime.now(UTC).isoformat(timespec="seconds")
        # capped as a local test's log is (head and tail kept, the cut said), so is the copy the night stores
        log = CappedText(open(request.log_path, "wb"), self.log_cap_bytes)  # noqa: SIM115 - closed below
        try:
            image = body["spec"]["containers"][0]["image"]
            log.write(f"# nightly: {request.test.id} attempt {request.attempt} pod {self.namespace}/"
                      f"{body['metadata']['name']} pool {pool.name} gpus={request.test.gpus} timeout={request.timeout_s}s "
                      f"image={image}\n")
            if unpinned:
                log.write(f"# nightly: {unpinned}\n")
            log.flush()
            if self.cancelled.is_set():  # as the local launcher says it: the night's stop, not the infrastructure's fault
                log.write("# nightly: verdict interrupted: the night was interrupted before this pod was created\n")
                run = PodRun(body["metadata"]["name"], Verdict("interrupted", "cancelled", False, ""), None,
                             "the night was interrupted before this pod was created", 0.0)
            else:
                run = self.run_pod(body, log, on_log, timeout_s=request.timeout_s, whole_log=True)  # type: ignore[arg-type]
        finally:
            log.close()
        run = dataclasses.replace(run, verdict=self.once.judge(request.test.id, run.verdict))
        gated = "SchedulingGated" in run.message  # Kueue's quota: no other node helps
        if run.verdict.reason == "unschedulable" and pinned and pinned not in request.avoid_nodes and not gated:
            # the plan's node is cordoned, gone or full of someone else's pods: another node can help
            run = dataclasses.replace(run, verdict=Verdict("infra_error", "unschedulable", True, pinned),
                                      message=f"{run.message} (pinned to {pinned})")
        attempt = self._attempt(request, run, started_at, digest)
        if unpinned:
            attempt.details["unpinned"] = unpinned
        if log.dropped:
            attempt.details["log_cut_bytes"] = str(log.dropped)
        return attempt

    def run_pod(self, body: dict[str, Any], log: TextIO, on_log: LogSink | None = None,
                container: str = MAIN_CONTAINER, timeout_s: float | None = None, whole_log: bool = False) -> PodRun:
        """Create ``body``, follow it to a verdict with ``container``'s log going to ``log``, delete it.

        ``timeout_s`` (default: ``activeDeadlineSeconds``) counts from the moment ``container``
        is first seen running; past it the pod is deleted and the verdict is ``timed_out``.
        ``whole_log``: a pass needs the whole log (a test's, whose failed configurations are read
        from it afterwards): with lines missing it is ``failed``, as on the local launcher.
        """
        limit = float(timeout_s if timeout_s is not None else body["spec"].get("activeDeadlineSeconds") or float("inf"))
        with self._lock:  # before the create: an interrupt during it still finds this pod
            self._live[body["metadata"]["name"]] = None
        try:
            name, last = self._create(body)
        except (ApiException, *CONNECTION_ERRORS) as exc:  # refused or unreachable: say so, do not crash the night
            with self._lock:
                self._live.pop(body["metadata"]["name"], None)
            if isinstance(exc, ApiException):
                message = f"the API refused the pod ({exc.status} {exc.reason}): {api_message(exc)[:300]}"
                reason = "create_rejected"
            else:
                message, reason = f"the API could not be reached to create the pod: {type(exc).__name__}", "api_unreachable"
            log.write(f"# nightly: verdict infra_error: {message}\n")
            return PodRun(body["metadata"]["name"], Verdict("infra_error", reason, False, ""), None, message, 0.0)
        with self._lock:
            self._live[name] = None
        if self.cancelled.is_set():  # cancel_all ran while the pod was being created
            with self._lock:
                self._cancelled_pods.add(name)
            self._delete(name)
        sink = LogFollower(log, on_log, self.retry["base_s"])
        try:
            verdict, last, waited, ran = self._follow(name, last, limit, sink, container)
        finally:
            sink.join(self.log_join_s)
            self._delete(name)
            with self._lock:
                self._live.pop(name, None)
                self._live.pop(body["metadata"]["name"], None)
        message = explain(last, verdict)
        if whole_log:
            verdict, message = sink.judge(verdict, message)
        with self._lock:
            by_cancel = name in self._cancelled_pods
        if by_cancel and verdict.outcome == "infra_error":
            # cancel_all deleted it (running, or still pulling its image): interrupted, as a local test
            # killed by Ctrl-C is; never a node's fault
            verdict = Verdict("interrupted", "deleted", False, verdict.node)
            message = f"the night was interrupted and its pod deleted ({message})"
        log.write(f"# nightly: verdict {verdict.outcome}: {message}\n")
        return PodRun(name, verdict, last, message, waited, ran, bool(sink.unfinished))

    def _delete(self, name: str) -> None:
        try:
            with_retries(self.api.delete_namespaced_pod, name, self.namespace, **self.retry)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("pod %s not deleted (%s %s); the next night's sweeper deletes it", name, exc.status, exc.reason)
        except CONNECTION_ERRORS as exc:
            log.warning("pod %s not deleted (%s); the next night's sweeper deletes it", name, type(exc).__name__)

    def _create(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = body["metadata"]["name"]
        try:
            created = with_retries(self.api.create_namespaced_pod, self.namespace, body, **self.retry)
        except ApiException as exc:
            if exc.status != 409:
                raise
            uid = body["metadata"].get("annotations", {}).get(ATTEMPT_UID)
            existing = json.loads(with_retries(self.api.read_namespaced_pod, name, self.namespace,
                                               _preload_content=False, **self.retry).data)
            if uid and ((existing.get("metadata") or {}).get("annotations") or {}).get(ATTEMPT_UID) == uid:
                return name, existing  # our own create, retried after its answer was lost
            # a pod of the same attempt survived an earlier crash: keep it for inspection, use a fresh name
            name = f"{name}-r{int(time.time()) % 100000}"
            body = {**body, "metadata": {**body["metadata"], "name": name}}
            created = with_retries(self.api.create_namespaced_pod, self.namespace, body, **self.retry)
        pod = self._serializer.sanitize_for_serialization(created)
        return name, pod if isinstance(pod, dict) else body

    def _follow(
        self, name: str, last: dict[str, Any], limit: float, sink: LogFollower, container: str
    ) -> tuple[Verdict, dict[str, Any] | None, float, float | None]:
        """Watch until a verdict; returns it, the last pod seen, seconds Pending and seconds the test ran."""
        events: queue.Queue = queue.Queue()
        stop = threading.Event()
        # watch from the version the create returned: every change since creation is replayed, even
        # one made before the watch started (a pod deleted within milliseconds)
        since = ((last or {}).get("metadata") or {}).get("resourceVersion")
        watcher = threading.Thread(target=self._watch, args=(name, events, stop, since), daemon=True,
                                   name=f"watch:{name}")
        watcher.start()
        clock = PodClock(time.monotonic(), pending_wait_s=self.pending_wait_s, startup_wait_s=self.startup_wait_s,
                         node_lost_wait_s=self.node_lost_wait_s, timeout_s=limit)
        deleted = False
        pod: dict[str, Any] | None = last
        try:
            while True:
                with contextlib.suppress(queue.Empty):
                    ev = events.get(timeout=self.tick_s)
                    while True:
                        if ev["type"] == "DELETED" and ended_by_itself(pod):
                            pass  # ended before it was deleted: judged by that end, as on the Pipes path
                        else:
                            if ev["type"] == "DELETED":
                                deleted = True
                            if isinstance(ev.get("raw_object"), dict) and ev["type"] != "ERROR":
                                pod = ev["raw_object"]
                        ev = events.get_nowait()
                now = time.monotonic()
                state = (main_status(pod or {}).get("state") or {})
                if not deleted and ("running" in state or "terminated" in state):
                    sink.start(self.api, name, self.namespace, container)
                verdict = clock.judge(pod, deleted, now)
                if verdict is not None and verdict.reason == "test_timeout":
                    self._delete(name)  # now, not at the backstop deadline
                if verdict is not None:
                    return verdict, pod, round(clock.pending_s, 3), clock.ran_s(now)
        finally:
            stop.set()

    def _watch(self, name: str, events: queue.Queue, stop: threading.Event, since: str | None = None) -> None:
        """Feed watch events for one pod into ``events`` until ``stop``; re-watch after expiry or errors."""
        w = watch.Watch()
        resource_version: str | None = since
        fails = 0
        first = True
        while not stop.is_set():
            if not first:  # a watch can miss events between streams: refresh from the object itself
                self._refresh(name, events)
            first = False
            kwargs: dict[str, Any] = {"field_selector": f"metadata.name={name}", "timeout_seconds": self.watch_timeout_s}
            if resource_version:
                kwargs["resource_version"] = resource_version
            try:
                for ev in w.stream(self.api.list_namespaced_pod, self.namespace, **kwargs):
                    if stop.is_set():
                        break
                    events.put(ev)
                    fails = 0
                    resource_version = w.resource_version or resource_version
            except ApiException as exc:
                if exc.status == 410:  # expired resource version: start over from the current state
                    resource_version = None
                    continue
                fails += 1
                stop.wait(delay_for(exc, fails, self.retry["base_s"], 30.0))
            except STREAM_ERRORS as exc:
                fails += 1
                stop.wait(delay_for(exc, fails, self.retry["base_s"], 30.0))
        w.stop()

    def _refresh(self, name: str, events: queue.Queue) -> None:
        """Put the pod as it is now (or its deletion) into ``events``, as a watch event would."""
        try:
            pod = self.api.read_namespaced_pod(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                events.put({"type": "DELETED", "raw_object": None})
            return
        except STREAM_ERRORS:
            return
        events.put({"type": "MODIFIED", "raw_object": self._serializer.sanitize_for_serialization(pod)})

    def _attempt(self, request: LaunchRequest, run: PodRun, started_at: str, digest: str) -> Attempt:
        pod, verdict = run.pod, run.verdict
        term = terminated(pod or {})
        start, end = timestamp(term.get("startedAt")), timestamp(term.get("finishedAt"))
        elapsed = (end - start).total_seconds() if start and end else (run.ran_s or 0.0)
        pod_start = ((pod or {}).get("status") or {}).get("startTime")
        details = {"pod": run.name, "namespace": self.namespace, "message": run.message,
                   "retriable": "true" if verdict.retriable_infra else "false", "pending_s": f"{run.pending_s:.1f}",
                   "image_digest": digest}
        if image_id(pod):
            details["image_id"] = image_id(pod)
        if run.log_unfinished:
            details["log_unfinished"] = "true"
        return Attempt(
            test_id=request.test.id,
            outcome=verdict.outcome,  # type: ignore[arg-type]
            elapsed_s=round(max(0.0, elapsed), 3),
            started_at=str(pod_start or started_at),
            attempt=request.attempt,
            node=verdict.node,
            gpu_slots=request.gpu_slots,
            exit_code=term.get("exitCode"),
            reason=verdict.reason,
            log_path=str(request.log_path),
            timeout_s=request.timeout_s,
            details=details,
        )
