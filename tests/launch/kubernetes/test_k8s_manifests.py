"""k8s/: every overlay renders offline, validates strictly, and grants nothing beyond the list."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache

import kubernetes_validate
import pytest
import yaml

from tests.conftest import PROJECT_ROOT

K8S = PROJECT_ROOT / "k8s"
OVERLAYS = ["base", "overlays/production", "overlays/kueue", "overlays/cordon"]
KUEUE_KINDS = {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl renders the kustomizations")


@cache
def render(overlay: str) -> tuple[dict, ...]:
    out = subprocess.run(["kubectl", "kustomize", str(K8S / overlay)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def by_kind(overlay: str, kind: str) -> list[dict]:
    return [d for d in render(overlay) if d["kind"] == kind]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_renders_and_validates_strictly(overlay):
    docs = render(overlay)
    assert docs
    for doc in docs:
        if doc["kind"] in KUEUE_KINDS:
            continue  # CRDs: kubernetes-validate has no schema; checked by shape below
        kubernetes_validate.validate(doc, "1.31", strict=True)


def test_the_launcher_role_grants_exactly_pods_logs_and_events():
    [role] = by_kind("overlays/production", "Role")
    grants = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    expected = {("", "pods", v) for v in ("create", "get", "list", "watch", "delete")}
    expected |= {("", "pods/log", "get")} | {("", "events", v) for v in ("get", "list", "watch")}
    assert grants == expected
    assert role["metadata"]["namespace"] == "nightly-e2e"
    [binding] = by_kind("overlays/production", "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "nightly-launcher", "namespace": "nightly-e2e"}]


@pytest.mark.parametrize("overlay", ["base", "overlays/production", "overlays/kueue"])
def test_no_cluster_wide_rights_unless_the_cordon_overlay_is_chosen(overlay):
    assert not by_kind(overlay, "ClusterRole") and not by_kind(overlay, "ClusterRoleBinding")


def test_the_cordon_overlay_adds_only_node_read_and_patch():
    [role] = by_kind("overlays/cordon", "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]}]


def test_the_code_location_serves_the_definitions_on_port_4000():
    [dep] = by_kind("overlays/production", "Deployment")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["dagster", "api", "grpc", "-m", "pipelines.definitions", "-h", "0.0.0.0", "-p", "4000"]
    assert c["image"] == "ghcr.io/example/nightly-e2e:2026.12.01"
    assert {e["name"]: e["value"] for e in c["env"]}["DAGSTER_CURRENT_IMAGE"] == c["image"]
    [svc] = by_kind("overlays/production", "Service")
    assert svc["spec"]["ports"][0]["port"] == 4000


def test_the_pvc_and_priority_class_match_the_production_deployment_in_assets():
    from pipelines.core.specs import load_specs

    prod = load_specs(PROJECT_ROOT / "assets").deployment("production")
    assert [p["metadata"]["name"] for p in by_kind("overlays/production", "PersistentVolumeClaim")] == [prod.cache_pvc]
    assert [p["metadata"]["name"] for p in by_kind("overlays/production", "PriorityClass")] == [prod.pools[0].priority_class]
    assert {d["metadata"]["namespace"] for d in render("overlays/production") if "namespace" in d["metadata"]} == {prod.namespace}


def test_kueue_objects_have_the_shape_kueue_expects():
    docs = {d["kind"]: d for d in by_kind("overlays/kueue", "ResourceFlavor") + by_kind("overlays/kueue", "ClusterQueue")
            + by_kind("overlays/kueue", "LocalQueue")}
    assert {d["apiVersion"] for d in docs.values()} == {"kueue.x-k8s.io/v1beta1"}
    assert "namespace" not in docs["ResourceFlavor"]["metadata"] and "namespace" not in docs["ClusterQueue"]["metadata"]
    [group] = docs["ClusterQueue"]["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu"]
    assert group["flavors"] == [{"name": "h200", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 32}]}]
    assert docs["LocalQueue"]["metadata"] == {"name": "h200-nightly", "namespace": "nightly-e2e"}
    assert docs["LocalQueue"]["spec"]["clusterQueue"] == docs["ClusterQueue"]["metadata"]["name"]


def test_helm_values_use_the_k8s_run_launcher_postgres_psycopg2_monitoring_and_a_run_queue():
    values = yaml.safe_load((K8S / "helm" / "values.yaml").read_text())
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    k8s = values["runLauncher"]["config"]["k8sRunLauncher"]
    assert k8s["jobNamespace"] == "nightly-e2e"
    assert k8s["runK8sConfig"]["podSpecConfig"]["serviceAccountName"] == "nightly-launcher"
    assert values["postgresql"]["postgresqlScheme"] == "postgresql+psycopg2"
    assert values["dagsterDaemon"]["runMonitoring"]["enabled"] is True
    assert values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]["maxConcurrentRuns"] > 0
    assert values["dagsterWebserver"]["workspace"]["servers"][0]["port"] == 4000
