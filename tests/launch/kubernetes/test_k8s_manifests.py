"""k8s/: every overlay renders offline, validates strictly, and grants nothing beyond the list."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import cache

import kubernetes_validate
import pytest
import yaml

from tests.conftest import PROJECT_ROOT

K8S = PROJECT_ROOT / "k8s"
OVERLAYS = ["base", "overlays/production", "overlays/kueue", "overlays/cordon", "overlays/irsa"]
KUEUE_KINDS = {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
#: the oldest kubectl whose kustomize (v4.2) reads k8s/: `labels:` came in kustomize v4.1; Debian 12's
#: kubectl 1.20 (kustomize v2) fails every overlay with "unknown field" (as scripts/system-deps.sh says)
MIN_KUBECTL = (1, 22)


def kubectl_too_old(version_json: str) -> str | None:
    """Why this ``kubectl version --client -o json`` cannot render k8s/, or None when it can."""
    git = json.loads(version_json).get("clientVersion", {}).get("gitVersion", "")
    found = re.match(r"v(\d+)\.(\d+)", git)
    if found and (int(found[1]), int(found[2])) >= MIN_KUBECTL:
        return None
    return (f"kubectl {git or '(version unknown)'} is too old to render k8s/: kubectl {'.'.join(map(str, MIN_KUBECTL))} "
            "or newer is needed (its kustomize reads `labels:` and `components:`); install a current one "
            "(`make system-deps` does, from pkgs.k8s.io) and put it first on PATH")


@cache
def kubectl_problem() -> str | None:
    out = subprocess.run(["kubectl", "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=60)
    return kubectl_too_old(out.stdout) if out.returncode == 0 else f"`kubectl version --client` failed: {out.stderr}"


@cache
def render(overlay: str) -> tuple[dict, ...]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl renders the kustomizations (`make system-deps` installs it)")
    if kubectl_problem():
        pytest.skip(kubectl_problem())  # said once as a failure by the test below, not once per rendering test
    out = subprocess.run(["kubectl", "kustomize", str(K8S / overlay)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def by_kind(overlay: str, kind: str) -> list[dict]:
    return [d for d in render(overlay) if d["kind"] == kind]


def test_the_kubectl_on_path_can_render_k8s():
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl renders the kustomizations (`make system-deps` installs it)")
    if kubectl_problem():
        pytest.fail(kubectl_problem(), pytrace=False)


@pytest.mark.parametrize(("git", "ok"), [("v1.20.2", False), ("v1.21.14", False), ("v1.22.0", True),
                                         ("v1.32.4-dispatcher", True), ("v2.0.0", True), ("", False)])
def test_a_kubectl_older_than_1_22_is_named_with_the_version_needed(git, ok):
    problem = kubectl_too_old(json.dumps({"clientVersion": {"gitVersion": git}}))
    assert (problem is None) == ok
    if not ok:
        assert problem.startswith(f"kubectl {git or '(version unknown)'} is too old to render k8s/: kubectl 1.22 or newer")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_renders_and_validates_strictly(overlay):
    docs = render(overlay)
    assert docs
    for doc in docs:
        if doc["kind"] in KUEUE_KINDS:
            continue  # CRDs: kubernetes-validate has no schema; checked by shape below
        kubernetes_validate.validate(doc, "1.31", strict=True)


def test_the_launcher_role_grants_exactly_pods_logs_events_and_reading_the_cache_claim():
    [role] = by_kind("overlays/production", "Role")
    grants = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    expected = {("", "pods", v) for v in ("create", "get", "list", "watch", "delete")}
    expected |= {("", "pods/log", "get")} | {("", "events", v) for v in ("get", "list", "watch")}
    expected |= {("", "persistentvolumeclaims", "get")}
    assert grants == expected
    assert role["metadata"]["namespace"] == "nightly-e2e"
    [binding] = by_kind("overlays/production", "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "nightly-launcher", "namespace": "nightly-e2e"}]


def cluster_grants(overlay: str) -> set[tuple[str, str, str]]:
    return {(g, r, v) for role in by_kind(overlay, "ClusterRole") for rule in role["rules"]
            for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


@pytest.mark.parametrize("overlay", ["base", "overlays/production", "overlays/kueue", "overlays/irsa"])
def test_cluster_wide_rights_only_read_unless_the_cordon_overlay_is_chosen(overlay):
    grants = cluster_grants(overlay)
    assert {v for _, _, v in grants} <= {"get", "list"}
    nodes = {("", "nodes", "get"), ("", "nodes", "list")}
    assert grants - nodes <= {("kueue.x-k8s.io", r, "get") for r in ("clusterqueues", "localqueues", "resourceflavors")}
    assert (grants >= nodes) == (overlay != "base"), "production lists nodes to pin the plan's nodes"


def test_the_cordon_overlay_adds_only_node_read_and_patch():
    [role] = [r for r in by_kind("overlays/cordon", "ClusterRole") if r["metadata"]["name"] == "nightly-e2e-node-cordon"]
    assert cluster_grants("overlays/cordon") - cluster_grants("overlays/production") == {("", "nodes", "watch"), ("", "nodes", "patch")}
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]}]


def test_the_code_location_is_hardened_and_probed():
    [dep] = by_kind("overlays/production", "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [c] = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    health = ["dagster", "api", "grpc-health-check", "-p", "4000"]
    assert c["livenessProbe"]["exec"]["command"] == c["readinessProbe"]["exec"]["command"] == health
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/tmp", "/var/lib/dagster"}, "writable places on a read-only root"


def test_the_namespace_enforces_baseline_pod_security_and_warns_on_restricted():
    [ns] = by_kind("overlays/production", "Namespace")
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "restricted"


def test_network_policies_open_only_the_code_location_port_to_this_namespace():
    policies = {p["metadata"]["name"]: p["spec"] for p in by_kind("overlays/production", "NetworkPolicy")}
    grpc = policies["nightly-code-location"]
    assert grpc["ingress"] == [{"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": 4000}]}]
    tests = policies["nightly-test-pods-no-ingress"]
    assert tests["podSelector"] == {"matchLabels": {"app.kubernetes.io/managed-by": "nightly-e2e"}}
    assert tests["policyTypes"] == ["Ingress"] and "ingress" not in tests


def test_s3_credentials_come_from_irsa_on_the_launcher_not_from_static_keys():
    [sa] = by_kind("overlays/irsa", "ServiceAccount")
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    values = yaml.safe_load((K8S / "helm" / "values.yaml").read_text())
    k8s = values["runLauncher"]["config"]["k8sRunLauncher"]
    assert "envSecrets" not in k8s, "static keys only as a documented fallback"
    env = {e["name"]: e for e in k8s["runK8sConfig"]["containerConfig"]["env"]}
    assert env["POD_UID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}, "run pods own their test pods"


@pytest.mark.parametrize("overlay", ["overlays/production", "overlays/irsa", "overlays/kueue", "overlays/cordon"])
def test_the_code_location_loads_with_the_launchers_s3_identity_and_node_read(overlay):
    """Loading the definitions reads estimates from S3 and the infra sensor reads node labels: without
    an identity and a token the production code location does not load."""
    [dep] = by_kind(overlay, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "nightly-launcher" and pod.get("automountServiceAccountToken", True)
    [sa] = by_kind(overlay, "ServiceAccount")
    assert sa["metadata"]["name"] == pod["serviceAccountName"]
    if overlay == "overlays/irsa":
        assert "eks.amazonaws.com/role-arn" in sa["metadata"]["annotations"]
    [reader] = [b for b in by_kind(overlay, "ClusterRoleBinding") if b["roleRef"]["name"] == "nightly-e2e-node-reader"]
    assert {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": "nightly-e2e"} in reader["subjects"]


def test_the_code_location_serves_the_definitions_on_port_4000():
    [dep] = by_kind("overlays/production", "Deployment")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["dagster", "api", "grpc", "-m", "pipelines.definitions", "-h", "0.0.0.0", "-p", "4000"]
    assert re.fullmatch(r"ghcr\.io/example/nightly-e2e:2026\.12\.01@sha256:[0-9a-f]{64}", c["image"]), c["image"]
    assert {e["name"]: e["value"] for e in c["env"]}["DAGSTER_CURRENT_IMAGE"] == c["image"], "run pods: the same digest"
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
    assert docs["ClusterQueue"]["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "nightly-e2e"}}
    [group] = docs["ClusterQueue"]["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    [flavor] = group["flavors"]
    quota = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
    assert flavor["name"] == "h200" and quota["nvidia.com/gpu"] == 32
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


def test_helm_values_deploy_no_postgresql_and_no_code_server_of_the_charts_own():
    """helm is not installed here: the keys the Dagster chart reads are checked, nothing is rendered.

    ``postgresql.enabled: true`` deploys the chart's PostgreSQL and points Dagster at it, ignoring
    ``postgresqlHost``; ``dagster-user-deployments.enableSubchart`` (the subchart's condition) deploys
    the chart's example code server beside ours; ``enabled`` must stay on for the workspace to be written."""
    values = yaml.safe_load((K8S / "helm" / "values.yaml").read_text())
    pg = values["postgresql"]
    assert pg["enabled"] is False and pg["postgresqlHost"] == "postgres.nightly-e2e.svc.cluster.local"
    assert (pg["postgresqlUsername"], pg["postgresqlDatabase"], pg["service"]["port"]) == ("dagster", "dagster", 5432)
    # the password Secret is ours (docs/kubernetes.md creates it); the chart makes none
    assert values["generatePostgresqlPasswordSecret"] is False
    assert values["global"]["postgresqlSecretName"] == "dagster-postgresql-secret"
    docs = " ".join((PROJECT_ROOT / "docs" / "kubernetes.md").read_text().split())
    assert "create secret generic dagster-postgresql-secret --from-literal=postgresql-password=" in docs
    users = values["dagster-user-deployments"]
    assert users["enabled"] is True and users["enableSubchart"] is False and "deployments" not in users
    [service] = [d for d in yaml.safe_load_all((K8S / "base" / "code-location.yaml").read_text())
                 if d and d["kind"] == "Service"]
    [server] = values["dagsterWebserver"]["workspace"]["servers"]
    assert server["host"] == f"{service['metadata']['name']}.nightly-e2e.svc.cluster.local"
    assert server["port"] == service["spec"]["ports"][0]["port"]


def test_kueue_quota_admits_a_whole_night_of_the_pools_pods():
    """Every node full of whole-node pods must fit the quota, or Kueue holds pods the nodes could run."""
    from pipelines.core.specs import load_specs
    from pipelines.launch.kubernetes.resources import bytes_of, millicores

    pool = load_specs(PROJECT_ROOT / "assets").deployment("production").pools[0]
    [cq] = by_kind("overlays/kueue", "ClusterQueue")
    quota = {r["name"]: r["nominalQuota"] for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    gpus = pool.nodes * pool.gpus_per_node
    assert quota["nvidia.com/gpu"] == gpus
    assert millicores(str(quota["cpu"])) >= millicores(pool.cpu_per_gpu) * gpus
    assert bytes_of(str(quota["memory"])) >= bytes_of(pool.memory_per_gpu) * gpus
