"""What the night-start sweep deletes, pod by pod, against a fake API (no server, no Dagster).

A pod is deleted only on evidence that its run is over: its run's Dagster status when the run is
a run pod of the cluster, which the cluster's run monitor watches (whether or not that pod could
own its test pods), else the process that made it being gone, which only a process on the same
boot of the same machine and in the same PID namespace can see.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import types

import pytest
from kubernetes.client.rest import ApiException

from pipelines.launch.kubernetes import ownership
from pipelines.launch.kubernetes.launcher import KubernetesLauncher
from pipelines.launch.kubernetes.podspec import LAUNCHED_BY
from pipelines.launch.procs import start_time
from tests.launch.kubernetes.test_k8s_launcher import DEPLOYMENT, request

NAMESPACE = types.SimpleNamespace(namespace="nightly-e2e")


class FakeApi:
    """Lists the given pods (all ours, labelled with a run id) and records deletions; may not read
    the run's own pod (no RBAC for it, or not there)."""

    def __init__(self, pods: dict[str, dict] | None = None):
        self.pods = pods or {}
        self.deleted: list[str] = []

    def read_namespaced_pod(self, name, namespace, **kwargs):
        raise ApiException(status=403, reason="Forbidden")

    def list_namespaced_pod(self, namespace, **kwargs):
        items = [{"metadata": {"name": name, "labels": {ownership.RUN_ID_LABEL: meta.pop("run", "run-1")}, **meta}}
                 for name, meta in self.pods.items()]
        return types.SimpleNamespace(data=json.dumps({"items": items}))

    def delete_namespaced_pod(self, name, namespace, **kwargs):
        self.deleted.append(name)


def by(**fields) -> dict:
    """A pod's metadata with a launched-by annotation of these fields."""
    return {"annotations": {LAUNCHED_BY: " ".join(f"{k}={v}" for k, v in fields.items())}}


BOOT = open("/proc/sys/kernel/random/boot_id").read().strip()
PIDNS = os.readlink("/proc/self/ns/pid").strip("pid:[]")


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def sweep(pods: dict[str, dict], ended=lambda run_ids: run_ids) -> list[str]:
    """The pods the sweep deletes; ``ended`` (default: every run asked about ended) plays the
    sweeping night's Dagster instance."""
    api = FakeApi(pods)
    swept = ownership.sweep_stale_pods(api, NAMESPACE, ended)
    assert swept == sorted(api.deleted)
    return swept


def test_a_pod_records_the_boot_pid_namespace_pid_and_start_of_the_process_that_made_it():
    fields = ownership.launcher_fields(ownership.launched_by())
    assert (fields["boot"], fields["pidns"]) == (BOOT, PIDNS)
    assert (fields["pid"], fields["start"]) == (str(os.getpid()), start_time(os.getpid()))
    value = ownership.launched_by()
    assert value.isprintable() and len(value) < 120
    assert not ownership.process_gone(value), "this very process counts as gone"


def test_only_a_gone_process_of_this_boot_and_pid_namespace_lets_its_pods_be_swept():
    here = {"host": "localhost", "boot": BOOT, "pidns": PIDNS}
    gone, me = dead_pid(), os.getpid()
    swept = sweep({
        "killed-here": by(**here, pid=gone, start="12345"),
        "pid-reused-here": by(**here, pid=me, start="1"),
        "running-here": by(**here, pid=me, start=start_time(me)),
        # a machine or container that shares the hostname: its pids mean nothing here
        "another-machine": by(host="localhost", boot="6f1e2d3c-0000-4000-8000-000000000000",
                              pidns=here["pidns"], pid=gone, start="12345"),
        "another-container": by(**{**here, "pidns": "1"}, pid=gone, start="12345"),
        "no-start-time": by(**here, pid=gone),
        # the old HOST:PID form cannot tell two machines named alike apart: left to its deadline
        "old-form-here": {"annotations": {LAUNCHED_BY: f"{os.uname().nodename}:{gone}"}},
        "nothing-said": {},
    })
    assert swept == ["killed-here", "pid-reused-here"]


IN_A_RUN_POD = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "DAGSTER_RUN_JOB_NAME": "nightly"}


def test_a_run_pods_test_pods_without_an_owner_go_when_the_run_has_ended(tmp_path, monkeypatch, caplog):
    """The run pod could not look itself up (RBAC): no owner; a later night, in another pod, deletes
    its test pods once the instance says the run ended, and leaves them while it runs."""
    for name in ("POD_NAME", "POD_UID", "POD_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in IN_A_RUN_POD.items():
        monkeypatch.setenv(name, value)
    api = FakeApi()
    with caplog.at_level(logging.INFO, logger=ownership.__name__):
        owner = ownership.run_pod_owner(api, DEPLOYMENT.namespace)
    assert owner is None
    assert "a later night's sweep deletes them once this run has ended" in caplog.text
    body = KubernetesLauncher(api, DEPLOYMENT, owner=owner, pin_nodes=False).pod_for(request(tmp_path))
    meta = {k: v for k, v in body["metadata"].items() if k not in ("name", "namespace", "labels")}
    assert "ownerReferences" not in meta and meta["annotations"][LAUNCHED_BY].startswith("run-pod=")
    assert sweep({"test-pod": dict(meta)}, ended=lambda run_ids: []) == [], "a running night's pod was deleted"
    asked = []
    assert sweep({"test-pod": dict(meta)}, ended=lambda run_ids: asked.append(run_ids) or run_ids) == ["test-pod"]
    assert asked == [["run-1"]]


@pytest.mark.parametrize("env", [
    {**IN_A_RUN_POD, "POD_NAME": "dagster-run-1a2b-x7k2p", "POD_UID": "u-1", "POD_NAMESPACE": "dagster"},
    IN_A_RUN_POD,
], ids=["run-pod-in-another-namespace", "run-pod-that-cannot-read-itself"])
def test_every_run_pod_without_an_owner_marks_its_pods_as_a_cluster_runs(env):
    assert ownership.run_pod_owner(FakeApi(), DEPLOYMENT.namespace, env) is None
    marked = ownership.launched_by(env)
    assert marked.startswith("run-pod=") and marked.isprintable()
    assert sweep({"test-pod": {"annotations": {LAUNCHED_BY: marked}}}) == ["test-pod"]


def test_a_dev_pod_that_is_no_run_pod_is_not_judged_by_its_runs_status():
    """A pod running ``nightly run`` by hand has no Job the run monitor watches: its night may be
    marked failed while it runs, so its test pods keep the process rule."""
    marked = ownership.launched_by({"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert "run-pod" not in ownership.launcher_fields(marked)
    assert sweep({"test-pod": {"annotations": {LAUNCHED_BY: marked}}}) == []
