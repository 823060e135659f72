"""Whose pods these are: tied to the run's pod, and swept when their run is dead.

A killed Dagster run used to leave GPU pods running to their deadline. Three defences:

- ``ownerReferences`` to the run's pod (env ``POD_NAME``/``POD_UID`` from the downward API, or
  the pod named like this host when running in the cluster): deleting the run's pod lets the
  garbage collector delete its test pods;
- :func:`sweep_stale_pods` at night start: our labelled pods whose run has ended are deleted;
- :meth:`KubernetesLauncher.cancel_all` on interrupt (the signal handler calls it).

A run's Dagster status speaks for its pods only when the run is a pod of the cluster (its pods
name it as their owner): the cluster's run monitor checks that run's Job. A run executed in a
process outside the cluster (a workstation's ``nightly run --deployment production``) has no Job:
if it records into the cluster's PostgreSQL, the monitor marks it FAILURE while it still runs. Its
pods say where their process lives (``launched-by: HOST:PID``); only that host can tell whether
it has gone.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from pipelines.core.specs import DeploymentSpec
from pipelines.launch.kubernetes.podspec import LABEL_PREFIX, LAUNCHED_BY, MANAGED_BY, label_value
from pipelines.launch.kubernetes.retries import CONNECTION_ERRORS, with_retries
from pipelines.launch.procs import pid_alive

log = logging.getLogger(__name__)
RUN_ID_LABEL = f"{LABEL_PREFIX}/run-id"


def launched_by() -> str:
    """``HOST:PID`` of this process, as pods it creates record it (:data:`podspec.LAUNCHED_BY`)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def process_gone(launcher: str) -> bool:
    """Whether the ``HOST:PID`` that created a pod is known to be gone: only this host can tell."""
    host, _, pid = launcher.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not pid_alive(int(pid))


def owner_reference(name: str, uid: str) -> dict[str, Any]:
    """An ownerReference to a pod (no controller, no blockOwnerDeletion: those need more RBAC)."""
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}


def run_pod_owner(api: client.CoreV1Api | None, namespace: str,
                  environ: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The ownerReference to the pod this run executes in, or None outside a pod of ``namespace``.

    ``POD_NAME`` and ``POD_UID`` (downward API, see k8s/helm/values.yaml) are used when set;
    in a cluster without them the pod named like this host is looked up (ownerReferences only
    work within one namespace, so a run pod elsewhere owns nothing).
    """
    env = os.environ if environ is None else environ
    if env.get("POD_NAME") and env.get("POD_UID"):
        if env.get("POD_NAMESPACE", namespace) != namespace:
            return None
        return owner_reference(env["POD_NAME"], env["POD_UID"])
    if api is None or not env.get("KUBERNETES_SERVICE_HOST"):
        return None
    try:
        resp = with_retries(api.read_namespaced_pod, socket.gethostname(), namespace, _preload_content=False, attempts=3)
    except (ApiException, *CONNECTION_ERRORS) as exc:
        log.info("no owner pod for this run (%s): test pods are cleaned up by the sweeper", exc)
        return None
    meta = json.loads(resp.data).get("metadata") or {}
    return owner_reference(meta["name"], meta["uid"]) if meta.get("uid") else None


def sweep_stale_pods(api: client.CoreV1Api, deployment: DeploymentSpec,
                     ended: Callable[[list[str]], Iterable[str]]) -> list[str]:
    """Delete our labelled pods whose run has ended; returns the pods deleted.

    A pod owned by a run's pod (a run in the cluster) goes when ``ended`` says its run ended:
    ``ended`` is given those pods' run ids and returns the ones the caller's Dagster instance
    knows to have ended. A run it does not know is left alone: another instance's night in the same
    namespace. A pod with no owner was created by a process outside the cluster: its run's status
    is no evidence (the cluster's run monitor fails such a run while it runs), so it goes only
    when it was launched from this host by a process that is gone (a workstation's night killed
    with ``kill -9``, swept by that workstation's next night); others end by their own deadline.
    Pods without a run id (made by hand, or by an old version) are left alone too.
    """
    selector = f"{MANAGED_BY[0]}={MANAGED_BY[1]}"
    resp = with_retries(api.list_namespaced_pod, deployment.namespace, label_selector=selector, _preload_content=False)
    owned, stale = [], []
    for pod in json.loads(resp.data).get("items") or []:
        meta = pod.get("metadata") or {}
        run = (meta.get("labels") or {}).get(RUN_ID_LABEL, "")
        if not run or meta.get("deletionTimestamp"):
            continue
        if any(o.get("kind") == "Pod" for o in meta.get("ownerReferences") or ()):
            owned.append((meta["name"], run))
        elif process_gone((meta.get("annotations") or {}).get(LAUNCHED_BY, "")):
            stale.append((meta["name"], run))
    dead = {label_value(r) for r in ended(sorted({run for _, run in owned}))} if owned else set()
    gone = []
    for name, run in sorted([*stale, *((n, r) for n, r in owned if r in dead)]):
        try:
            with_retries(api.delete_namespaced_pod, name, deployment.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
        gone.append(name)
        log.warning("deleted pod %s of ended run %s", name, run)
    return sorted(gone)
