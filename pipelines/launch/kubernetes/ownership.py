"""Whose pods these are: tied to the run's pod, and swept when their run is dead.

A killed Dagster run used to leave GPU pods running to their deadline. Three defences:

- ``ownerReferences`` to the run's pod (env ``POD_NAME``/``POD_UID`` from the downward API, or
  the pod named like this host when running in the cluster): deleting the run's pod lets the
  garbage collector delete its test pods;
- :func:`sweep_stale_pods` at night start: our labelled pods whose run has ended are deleted;
- :meth:`KubernetesLauncher.cancel_all` on interrupt (the signal handler calls it).

A run's Dagster status speaks for its pods only when the run is a pod of the cluster (its pods
name it as their owner, or say ``launched-by: run-pod=NAME`` where no owner could be set): the
cluster's run monitor checks that run's Job. A run executed in another process (a workstation's
``nightly run --deployment production``) has no Job: if it records into the cluster's
PostgreSQL, the monitor marks it FAILURE while it still runs. Its pods say which process made
them (``launched-by``: host, boot, PID namespace, pid, start time); only a process on that boot
of that machine, in that PID namespace, can tell whether it has gone.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from pipelines.core.specs import DeploymentSpec
from pipelines.launch.kubernetes.podspec import LABEL_PREFIX, LAUNCHED_BY, MANAGED_BY, label_value
from pipelines.launch.kubernetes.retries import CONNECTION_ERRORS, with_retries
from pipelines.launch.procs import pid_alive, start_time

log = logging.getLogger(__name__)
RUN_ID_LABEL = f"{LABEL_PREFIX}/run-id"
#: set by dagster-k8s's K8sRunLauncher in every run pod it starts (the Dagster job's name)
RUN_POD_ENV = "DAGSTER_RUN_JOB_NAME"


def boot_id() -> str:
    """This boot of this machine's kernel: a random id, unique across machines and reboots.

    Not the hostname (workstations and dev containers share names like ``localhost``) nor
    ``/etc/machine-id`` (absent in many containers, copied into images): a process can only be
    judged gone by a process on the same boot, and a reboot ends every process anyway.
    """
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def pid_namespace() -> str:
    """This process's PID namespace (its inode): containers on one machine share the boot id but
    not their pids; a pid means the same process only within one namespace."""
    try:
        return "".join(ch for ch in os.readlink("/proc/self/ns/pid") if ch.isdigit())
    except OSError:
        return ""


def in_cluster_run(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a run pod the cluster's K8sRunLauncher started: in a pod
    (``KUBERNETES_SERVICE_HOST``) with the launcher's :data:`RUN_POD_ENV`. The cluster's run
    monitor watches that run's Job, so its Dagster status speaks for its pods even when no owner
    could be set. A pod started otherwise (a dev pod running ``nightly run``) is not one."""
    env = os.environ if environ is None else environ
    return bool(env.get("KUBERNETES_SERVICE_HOST") and env.get(RUN_POD_ENV))


def launched_by(environ: Mapping[str, str] | None = None) -> str:
    """Which process creates our pods, as they record it (:data:`podspec.LAUNCHED_BY`).

    ``run-pod=NAME`` in a run pod of the cluster (:func:`in_cluster_run`): the sweeper judges its
    pods by their run's status. Elsewhere ``host=H boot=B pidns=N pid=P start=S``: the hostname
    for people, the rest for :func:`process_gone`; a field this system cannot read is left out
    (such pods are never swept).
    """
    env = os.environ if environ is None else environ
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())
    if in_cluster_run(env):
        return f"run-pod={re.sub(r'[^A-Za-z0-9._-]', '_', env.get('POD_NAME') or host)}"
    pid = os.getpid()
    fields = {"host": host, "boot": boot_id(), "pidns": pid_namespace(), "pid": str(pid),
              "start": start_time(pid)}
    return " ".join(f"{key}={value}" for key, value in fields.items() if value)


def launcher_fields(value: str) -> dict[str, str]:
    """The ``key=value`` fields of a launched-by annotation; ``{}`` for the old ``HOST:PID`` form."""
    return dict(part.split("=", 1) for part in value.split() if "=" in part)


def process_gone(value: str) -> bool:
    """Whether the process a launched-by annotation names is known to be gone.

    Only a process on the same boot of the same machine and in the same PID namespace can tell:
    there the pid is gone, or alive with another start time (reused). Anything else, including
    the old ``HOST:PID`` form (which two machines named alike could not tell apart), is not
    known to be gone.
    """
    fields = launcher_fields(value)
    pid, started = fields.get("pid", ""), fields.get("start", "")
    if not (pid.isdigit() and started and fields.get("boot") and fields.get("pidns")):
        return False
    if fields["boot"] != boot_id() or fields["pidns"] != pid_namespace():
        return False
    if not pid_alive(int(pid)):
        return True
    now = start_time(int(pid))
    return bool(now) and now != started  # unreadable (hidepid): alive as far as we know


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
            log.info("the run's pod is in namespace %s, not %s: no owner for its test pods; %s",
                     env["POD_NAMESPACE"], namespace, _without_owner(env))
            return None
        return owner_reference(env["POD_NAME"], env["POD_UID"])
    if api is None or not env.get("KUBERNETES_SERVICE_HOST"):
        return None
    try:
        resp = with_retries(api.read_namespaced_pod, socket.gethostname(), namespace, _preload_content=False, attempts=3)
    except (ApiException, *CONNECTION_ERRORS) as exc:
        log.info("no owner pod for this run (%s); %s", exc, _without_owner(env))
        return None
    meta = json.loads(resp.data).get("metadata") or {}
    return owner_reference(meta["name"], meta["uid"]) if meta.get("uid") else None


def _without_owner(env: Mapping[str, str]) -> str:
    """What becomes of test pods no run pod owns, for the log: the sweep's rule for them."""
    if in_cluster_run(env):
        return "a later night's sweep deletes them once this run has ended"
    return ("a later night in this container sweeps them once this process is gone; "
            "otherwise they end by their activeDeadlineSeconds")


def sweep_stale_pods(api: client.CoreV1Api, deployment: DeploymentSpec,
                     ended: Callable[[list[str]], Iterable[str]]) -> list[str]:
    """Delete our labelled pods whose run has ended; returns the pods deleted.

    A pod of a run in the cluster (owned by the run's pod, or ``launched-by: run-pod=NAME`` where
    no owner could be set: a run pod in another namespace, or one that could not look itself up)
    goes when ``ended`` says its run ended: ``ended`` is given those pods' run ids and returns the
    ones the caller's Dagster instance knows to have ended. A run it does not know is left alone:
    another instance's night in the same namespace. Any other pod was created by a process that is
    not a run pod of the cluster: its run's status is no evidence (the cluster's run monitor fails
    such a run while it runs, when it records into the cluster's instance), so it goes only when
    :func:`process_gone` says the process that made it is gone (a workstation's night killed with
    ``kill -9``, swept by that workstation's next night); others end by their own deadline.
    Pods without a run id (made by hand, or by an old version) are left alone too.
    """
    selector = f"{MANAGED_BY[0]}={MANAGED_BY[1]}"
    resp = with_retries(api.list_namespaced_pod, deployment.namespace, label_selector=selector, _preload_content=False)
    in_cluster, stale = [], []
    for pod in json.loads(resp.data).get("items") or []:
        meta = pod.get("metadata") or {}
        run = (meta.get("labels") or {}).get(RUN_ID_LABEL, "")
        if not run or meta.get("deletionTimestamp"):
            continue
        launcher = (meta.get("annotations") or {}).get(LAUNCHED_BY, "")
        if any(o.get("kind") == "Pod" for o in meta.get("ownerReferences") or ()) or \
                launcher_fields(launcher).get("run-pod"):
            in_cluster.append((meta["name"], run))
        elif process_gone(launcher):
            stale.append((meta["name"], run))
    dead = {label_value(r) for r in ended(sorted({run for _, run in in_cluster}))} if in_cluster else set()
    gone = []
    for name, run in sorted([*stale, *((n, r) for n, r in in_cluster if r in dead)]):
        try:
            with_retries(api.delete_namespaced_pod, name, deployment.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
        gone.append(name)
        log.warning("deleted pod %s of ended run %s", name, run)
    return sorted(gone)
