"""What the night-start sweep deletes, pod by pod, against a fake API (no server, no Dagster).

A pod is deleted only on evidence that its run is over: its run's Dagster status when the run is
one the cluster's run monitor watches, else the process that made it being gone, which only a
process on the same boot of the same machine and in the same PID namespace can see.
"""

from __future__ import annotations

import json
import os
import subprocess
import types

from pipelines.launch.kubernetes import ownership
from pipelines.launch.kubernetes.podspec import LAUNCHED_BY
from pipelines.launch.procs import start_time

NAMESPACE = types.SimpleNamespace(namespace="nightly-e2e")


class FakeApi:
    """Lists the given pods (all ours, labelled with a run id) and records deletions."""

    def __init__(self, pods: dict[str, dict]):
        self.pods = pods
        self.deleted: list[str] = []

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
