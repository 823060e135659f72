"""A workstation's night recorded into the cluster's instance: the cluster's run monitor fails it
while it runs (K8sRunLauncher finds no Job for a run executed in a workstation's process), and the
cluster's next night must still leave its pods alone.

The instance is the cluster's as k8s/helm/values.yaml configures it (K8sRunLauncher, run
monitoring, no resume), SQLite standing in for the shared PostgreSQL; the daemon's own
``monitor_started_run`` judges the run; the sweep is the one every night starts with.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
import yaml

from pipelines.launch.kubernetes.ownership import sweep_stale_pods
from tests.conftest import PROJECT_ROOT
from tests.launch.kubernetes.apiserver import StandInApiServer, Step
from tests.launch.kubernetes.test_k8s_launcher import DEPLOYMENT, launcher, request
from tests.launch.kubernetes.test_k8s_pipes import kubeconfig

pytestmark = pytest.mark.slow  # Dagster and dagster-k8s imported, an instance made
dg = pytest.importorskip("dagster")
pytest.importorskip("dagster_k8s")


def cluster_instance_overrides(kubeconfig_file: str) -> dict:
    """The daemon's instance settings from the Helm values, pointed at the stand-in API server."""
    values = yaml.safe_load((PROJECT_ROOT / "k8s/helm/values.yaml").read_text())
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    monitoring = values["dagsterDaemon"]["runMonitoring"]
    assert monitoring["enabled"] and monitoring["maxResumeRunAttempts"] == 0
    return {
        "run_launcher": {"module": "dagster_k8s", "class": "K8sRunLauncher", "config": {
            "job_namespace": DEPLOYMENT.namespace, "load_incluster_config": False, "kubeconfig_file": kubeconfig_file,
            "instance_config_map": "dagster-instance", "dagster_home": "/opt/dagster/dagster_home",
            "service_account_name": "nightly-launcher"}},
        "run_monitoring": {"enabled": True, "start_timeout_seconds": monitoring["startTimeoutSeconds"],
                           "poll_interval_seconds": monitoring["pollIntervalSeconds"],
                           "max_resume_run_attempts": monitoring["maxResumeRunAttempts"]},
    }


def test_the_cluster_fails_a_live_workstation_night_but_its_next_night_leaves_that_nights_pods(tmp_path):
    from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus
    from dagster._daemon.monitoring.run_monitoring import monitor_started_run
    from kubernetes import client

    default = client.Configuration.get_default_copy()  # K8sRunLauncher loads the kubeconfig as the default
    with StandInApiServer(script=lambda pod, node: [Step(mutate=lambda p: None)]) as server:
        try:
            overrides = cluster_instance_overrides(kubeconfig(tmp_path, server.url))
            with dg.instance_for_test(overrides=overrides) as instance:
                run_id = "a1b2c3d4-0000-4000-8000-workstation1"
                instance.add_run(DagsterRun(job_name="nightly", run_id=run_id, status=DagsterRunStatus.STARTED,
                                            tags={"nightly/reason": "nightly run (command line)"}))
                # the workstation's night (this process) has a test pod running: no owner, launched from here
                pods, _ = launcher(server)
                body = pods.pod_for(dataclasses.replace(request(tmp_path), run_id=run_id))
                server.core_v1().create_namespaced_pod(DEPLOYMENT.namespace, body)

                record = instance.get_run_records(filters=dg.RunsFilter(run_ids=[run_id]))[0]
                monitor_started_run(instance, None, record, logging.getLogger("monitor"))
                assert instance.get_run_by_id(run_id).status == DagsterRunStatus.FAILURE, "the monitor let it be"

                def ended(run_ids):  # as test_runs asks the instance
                    return [r.run_id for r in instance.get_runs(filters=dg.RunsFilter(run_ids=run_ids)) if r.is_finished]

                assert sweep_stale_pods(server.core_v1(), DEPLOYMENT, ended) == []
                assert list(server.state.pods) == [body["metadata"]["name"]]
        finally:
            client.Configuration.set_default(default)
