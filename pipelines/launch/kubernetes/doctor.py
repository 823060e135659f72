"""``nightly doctor``: what must be true of a cluster before the first night, checked on the cluster.

Each check says what it saw and, when it fails, how to fix it. Run with the launcher's
identity (in a Dagster run pod, or a kubeconfig for the ``nightly-launcher`` ServiceAccount):
the RBAC checks are SelfSubjectAccessReviews, so they answer for whoever runs the doctor.

1. RBAC: every verb the launcher uses (pods, logs, events; nodes to pin; nodes patch to cordon).
2. Nodes of each pool: selected by its ``node_selector``, GPU product and count labels, enough
   allocatable GPUs, CPU and memory for a whole-node pod, every taint tolerated.
3. The cache PVC: Bound and ReadWriteMany (every test pod mounts it, on every node).
4. Kueue: the pool's LocalQueue and its ClusterQueue exist (when the pool names a queue).
5. The image: pinned by digest, and the node really ran that digest.
6. Pre-flight pods per pool, 1 GPU and a whole node: device count equals the request, CUDA
   initialises, ``/dev/shm`` is as large as the pool says.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from pipelines.core.model import Test
from pipelines.core.specs import DeploymentSpec, PoolSpec
from pipelines.launch.base import LaunchRequest
from pipelines.launch.kubernetes.launcher import KubernetesLauncher
from pipelines.launch.kubernetes.nodes import gpus_of, read_nodes, ready, untolerated
from pipelines.launch.kubernetes.outcomes import MAIN_CONTAINER, image_id, terminated
from pipelines.launch.kubernetes.podspec import build_pod
from pipelines.launch.kubernetes.preflight import OK_PREFIX, preflight_container, preflight_verdict
from pipelines.launch.kubernetes.resources import bytes_of, millicores, pinned_image, pod_resources
from pipelines.launch.kubernetes.retries import CONNECTION_ERRORS, api_message

KUEUE = ("kueue.x-k8s.io", "v1beta1")
OVERLAY = "kubectl apply -k k8s/overlays/production"
#: what a 403 on listing nodes means: the production overlay's node-reader ClusterRole is missing
NODES_FIX = f"{OVERLAY} (its node-reader ClusterRole grants get/list nodes to nightly-launcher)"


@dataclasses.dataclass(frozen=True)
class Check:
    """One line of the doctor's table."""

    name: str
    ok: bool
    detail: str
    fix: str = ""


def needed_verbs(deployment: DeploymentSpec) -> list[tuple[str, str, str, bool]]:
    """(API group, resource, verb, namespaced) for everything the launcher and the doctor call."""
    out = [("", "pods", v, True) for v in ("create", "get", "list", "watch", "delete")]
    out += [("", "pods/log", "get", True)] + [("", "events", v, True) for v in ("get", "list", "watch")]
    out += [("", "nodes", "list", False)]
    if deployment.cache_pvc:
        out.append(("", "persistentvolumeclaims", "get", True))
    if deployment.cordon_bad_nodes:
        out.append(("", "nodes", "patch", False))
    return out


def check_rbac(api: client.CoreV1Api, deployment: DeploymentSpec) -> list[Check]:
    authz = client.AuthorizationV1Api(api.api_client)
    checks = []
    for group, resource, verb, namespaced in needed_verbs(deployment):
        name, _, sub = resource.partition("/")
        attrs = {"group": group, "resource": name, "verb": verb, **({"subresource": sub} if sub else {}),
                 **({"namespace": deployment.namespace} if namespaced else {})}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs}}
        try:
            answer = authz.create_self_subject_access_review(body, _preload_content=False)
        except ApiException as exc:
            if exc.status != 403:
                raise
            # every authenticated user may ask this (system:basic-user): this identity is not the launcher's
            return [Check("rbac: access review", False, f"SelfSubjectAccessReview refused (403 {api_message(exc)[:120]}); "
                          "the launcher's rights below were not checked",
                          "run the doctor with the nightly-launcher's identity (`kubectl -n "
                          f"{deployment.namespace} create token nightly-launcher` in a kubeconfig, after {OVERLAY}); "
                          "an identity refused even this has lost the system:basic-user ClusterRoleBinding")]
        allowed = bool((json.loads(answer.data).get("status") or {}).get("allowed"))
        where = f" in {deployment.namespace}" if namespaced else " (cluster)"
        fix = OVERLAY if resource != "nodes" or verb != "patch" else "kubectl apply -k k8s/overlays/cordon"
        checks.append(Check(f"rbac: {verb} {resource}", allowed, f"{'allowed' if allowed else 'denied'}{where}",
                            "" if allowed else f"{fix} (grants {verb} {resource} to nightly-launcher)"))
    return checks


def check_nodes(api: client.CoreV1Api, pool: PoolSpec) -> list[Check]:
    name = f"pool {pool.name}: nodes"
    selector = ",".join(f"{k}={v}" for k, v in sorted(pool.node_selector.items())) or "(none)"
    try:
        nodes = read_nodes(api, pool.node_selector)
    except ApiException as exc:
        if exc.status != 403:
            raise
        return [Check(name, False, f"listing nodes refused (403 {api_message(exc)[:120]})", NODES_FIX)]
    if not nodes:
        return [Check(name, False, f"no node matches {selector}",
                      "label the GPU nodes (the NVIDIA GPU operator's feature discovery sets nvidia.com/gpu.product) "
                      "or fix node_selector in assets/cluster.yaml")]
    whole = pod_resources(pool, pool.gpus_per_node)["requests"]
    usable, checks = 0, []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        n, labels = node["metadata"]["name"], node["metadata"].get("labels") or {}
        alloc = (node.get("status") or {}).get("allocatable") or {}
        problems = []
        if "nvidia.com/gpu.product" not in labels or "nvidia.com/gpu.count" not in labels:
            problems.append(("no nvidia.com/gpu.product/count labels", "install GPU feature discovery (NVIDIA GPU operator)"))
        elif labels["nvidia.com/gpu.count"] != str(pool.gpus_per_node):
            problems.append((f"labelled {labels['nvidia.com/gpu.count']} GPUs, the pool says {pool.gpus_per_node}",
                             "fix gpus_per_node in assets/cluster.yaml or the node"))
        if gpus_of(node) < pool.gpus_per_node:
            problems.append((f"{gpus_of(node)} allocatable GPUs < {pool.gpus_per_node}",
                             "check the NVIDIA device plugin on the node (unhealthy GPUs drop out)"))
        if millicores(alloc.get("cpu", "0")) < millicores(whole["cpu"]) or bytes_of(alloc.get("memory", "0")) < bytes_of(whole["memory"]):
            problems.append((f"allocatable cpu {alloc.get('cpu')} / memory {alloc.get('memory')} < a whole-node pod's "
                             f"{whole['cpu']} / {whole['memory']}", "lower cpu_per_gpu / memory_per_gpu in assets/cluster.yaml"))
        for t in untolerated(node, pool.tolerations):  # the launcher never pins a pod there (nodes.usable)
            problems.append((f"taint {t.get('key')}={t.get('value', '')}:{t.get('effect')} not tolerated",
                             f"add a toleration for {t.get('key')} to pools.{pool.name}.tolerations"))
        if not ready(node) or (node.get("spec") or {}).get("unschedulable"):
            problems.append(("not Ready or cordoned", f"kubectl describe node {n}; uncordon it once fixed"))
        usable += not problems
        checks.append(Check(f"{name}: {n}", not problems, "; ".join(p for p, _ in problems) or
                            f"{labels.get('nvidia.com/gpu.product')} x{labels.get('nvidia.com/gpu.count')}, taints tolerated",
                            "; ".join(f for _, f in problems)))
    checks.insert(0, Check(name, usable >= pool.nodes, f"{usable} usable of {len(nodes)} matching {selector}; the plan has {pool.nodes}",
                           "" if usable >= pool.nodes else f"fix the nodes below or set pools.{pool.name}.nodes: {usable}"))
    return checks


def check_pvc(api: client.CoreV1Api, deployment: DeploymentSpec) -> list[Check]:
    name = f"cache PVC {deployment.cache_pvc}"
    try:
        pvc = json.loads(api.read_namespaced_persistent_volume_claim(deployment.cache_pvc, deployment.namespace,
                                                                     _preload_content=False).data)
    except ApiException as exc:
        return [Check(name, False, f"cannot be read ({exc.status} {api_message(exc)[:120]})", OVERLAY)]
    phase = (pvc.get("status") or {}).get("phase", "Pending")
    modes = (pvc.get("status") or {}).get("accessModes") or (pvc.get("spec") or {}).get("accessModes") or []
    ok = phase == "Bound" and "ReadWriteMany" in modes
    fix = "" if ok else ("a storage class that provisions ReadWriteMany volumes (NFS, CephFS, EFS, Lustre); "
                         f"kubectl -n {deployment.namespace} describe pvc {deployment.cache_pvc}")
    return [Check(name, ok, f"{phase}, {', '.join(modes) or 'no access modes'}", fix)]


def check_kueue(api: client.CoreV1Api, deployment: DeploymentSpec, pool: PoolSpec) -> list[Check]:
    custom = client.CustomObjectsApi(api.api_client)
    group, version = KUEUE
    fix = "install Kueue, then kubectl apply -k k8s/overlays/kueue (or remove queue from the pool)"
    try:
        lq = custom.get_namespaced_custom_object(group, version, deployment.namespace, "localqueues", pool.queue)
        cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
        custom.get_cluster_custom_object(group, version, "clusterqueues", cq_name)
    except ApiException as exc:
        return [Check(f"pool {pool.name}: Kueue queue {pool.queue}", False, f"{exc.status} {api_message(exc)[:120]}", fix)]
    return [Check(f"pool {pool.name}: Kueue queue {pool.queue}", True, f"LocalQueue -> ClusterQueue {cq_name}")]


def _probe_pod(pool: PoolSpec, deployment: DeploymentSpec, gpus: int) -> dict[str, Any]:
    """A pod whose only container is the pre-flight (its log carries the facts), shaped like a test pod."""
    test = Test(id=f"nightly-doctor/{pool.name}/{gpus}gpu", path="nightly-doctor", backend="cuda", suite="doctor",
                gpus=gpus, est_time=60)
    req = LaunchRequest(test=test, repo_path=Path("."), timeout_s=300, log_path=Path("/dev/null"),
                        run_id="nightly-doctor", pool=pool.name)
    body = build_pod(req, pool, deployment, name=f"nightly-doctor-{uuid.uuid4().hex[:8]}-{gpus}gpu")
    main = body["spec"]["containers"][0]
    probe = preflight_container(main["image"], main["imagePullPolicy"], gpus, main["resources"])
    body["spec"]["containers"] = [{**probe, "name": MAIN_CONTAINER}]
    body["spec"].pop("initContainers", None)
    body["spec"]["volumes"] = [v for v in body["spec"]["volumes"] if v["name"] == "dshm"]
    return body


def check_preflight(launcher: KubernetesLauncher, pool: PoolSpec, deployment: DeploymentSpec,
                    gpus: int) -> list[Check]:
    name = f"pool {pool.name}: pre-flight {gpus} GPU{'s' if gpus > 1 else ''}"
    lines: list[str] = []
    run = launcher.run_pod(_probe_pod(pool, deployment, gpus), io.StringIO(), lines.append, timeout_s=300)
    facts_line = next((x for x in reversed(lines) if x.startswith(OK_PREFIX)), "")
    if run.verdict.outcome != "passed" or not facts_line:
        said = next((x for x in reversed(lines) if x.startswith("nightly-preflight")), run.message)
        verdict = f"{run.verdict.outcome}/{run.verdict.reason or '-'}"
        code = terminated(run.pod or {}).get("exitCode")
        if run.verdict.reason == "exit_code" and code:  # the probe's container *is* the pre-flight
            verdict = f"infra_error/{preflight_verdict(int(code))[0]}"
        return [Check(name, False, f"{verdict} on {run.verdict.node or '-'}: {said[:200]}", _preflight_fix(run, deployment.namespace))]
    facts = json.loads(facts_line[len(OK_PREFIX):])
    shm_ok = facts.get("shm_bytes", 0) >= 0.9 * bytes_of(pool.shm_size)
    checks = [Check(name, facts.get("gpus") == gpus and shm_ok,
                    f"{facts.get('gpus')} GPU(s) on {run.verdict.node}, /dev/shm {facts.get('shm_bytes', 0) / 2**30:.1f} GiB",
                    "" if shm_ok else f"/dev/shm below shm_size {pool.shm_size}: enable memory-backed volume sizing "
                                      "(SizeMemoryBackedVolumes) or lower shm_size")]
    ran, (_, digest) = image_id(run.pod), pinned_image(pool)
    if ran and digest:
        same = ran.endswith(digest)
        checks.append(Check(f"pool {pool.name}: image digest", same, f"node ran {ran.rsplit('@', 1)[-1][:19]}…",
                            "" if same else f"set pools.{pool.name}.image_digest to {ran.rsplit('@', 1)[-1]} (crane digest)"))
    return checks


def _preflight_fix(run: Any, namespace: str) -> str:
    """What to do about a pre-flight pod that did not pass: a pod the API refused is no node's fault."""
    if run.verdict.reason == "create_rejected":  # the launcher's message: "the API refused the pod (403 Forbidden): ..."
        if "(403 " in run.message:
            return f"{OVERLAY} (its Role grants create pods in {namespace} to nightly-launcher)"
        return ("admission refused the pod (Pod Security, a ResourceQuota, Kueue's webhook): the detail says which; "
                f"`kubectl -n {namespace} get events`")
    if run.verdict.reason == "api_unreachable":
        return UNREACHABLE_FIX
    return ("fix the node's driver / fabric manager (gpu_unusable), the image (preflight_tool_missing) or "
            "scheduling (unschedulable); the pod's events say more")


def check_image(pool: PoolSpec) -> Check:
    image, digest = pinned_image(pool)
    return Check(f"pool {pool.name}: image pinned", bool(digest), image,
                 "" if digest else f"set pools.{pool.name}.image_digest (crane digest {pool.image}) so no node runs a stale tag")


UNREACHABLE_FIX = ("check the server address in the kubeconfig (`kubectl cluster-info`), the network or VPN to it, "
                   "and that the API server is up; the checks that need the API were not run")


CREDENTIALS_FIX = ("the kubeconfig's token or certificate is not accepted (expired?): get a fresh one, e.g. "
                   "`kubectl -n {namespace} create token nightly-launcher`; the checks that need the API were not run")


def connection_problem(exc: BaseException) -> str:
    """A connection failure in one line: urllib3's innermost reason, without object reprs."""
    reason: BaseException = exc
    while isinstance(getattr(reason, "reason", None), BaseException):
        reason = reason.reason  # type: ignore[attr-defined]
    text = re.sub(r"<[^<>]* object at 0x[0-9a-f]+>:?\s*", "", str(reason) or type(reason).__name__)
    text = re.sub(r"^\w+\(host='[^']*', port=\d+\):\s*", "", " ".join(text.split()))
    return text[:200]


def diagnose(api: client.CoreV1Api, deployment: DeploymentSpec, *, pods: bool = True, **launcher_kwargs: Any) -> list[Check]:
    """Every check, in the order a maintainer fixes things; never raises for an API answer.

    When the API server cannot be reached at all, or refuses the credentials (401), that is one row
    (the server, the error, what to do) and the checks that need the API stop there: each would
    only fail the same way.
    """
    steps: list[tuple[bool, str, Any]] = [(True, "rbac", lambda: check_rbac(api, deployment))]
    if deployment.cache_pvc:
        steps.append((True, f"cache PVC {deployment.cache_pvc}", lambda: check_pvc(api, deployment)))
    launcher = KubernetesLauncher(api, deployment, pin_nodes=False, retries=0, **launcher_kwargs)
    for pool in deployment.pools:
        steps.append((True, f"pool {pool.name}: nodes", lambda p=pool: check_nodes(api, p)))
        if pool.queue:
            steps.append((True, f"pool {pool.name}: Kueue queue {pool.queue}", lambda p=pool: check_kueue(api, deployment, p)))
        steps.append((False, f"pool {pool.name}: image pinned", lambda p=pool: [check_image(p)]))
        if pods:
            for gpus in dict.fromkeys((1, pool.gpus_per_node)):
                steps.append((True, f"pool {pool.name}: pre-flight {gpus} GPU{'s' if gpus > 1 else ''}",
                              lambda p=pool, g=gpus: check_preflight(launcher, p, deployment, g)))
    checks: list[Check] = []
    api_usable = True
    for needs_api, name, step in steps:
        if needs_api and not api_usable:
            continue
        try:
            checks += step()
        except CONNECTION_ERRORS as exc:
            api_usable = False
            host = api.api_client.configuration.host
            checks.append(Check("api: cluster unreachable", False, f"{host}: {connection_problem(exc)}", UNREACHABLE_FIX))
        except ApiException as exc:
            if exc.status == 401:  # every later call would be refused the same way
                api_usable = False
                host = api.api_client.configuration.host
                checks.append(Check("api: credentials refused", False, f"{host}: 401 {api_message(exc)[:120]}",
                                    CREDENTIALS_FIX.format(namespace=deployment.namespace)))
                continue
            fix = (f"{OVERLAY} (the Role and ClusterRoles nightly-launcher needs); run the doctor with its identity"
                   if exc.status == 403 else "check KUBECONFIG / the cluster's address")
            checks.append(Check(name, False, f"the API answered {exc.status} {api_message(exc)[:120]}", fix))
    return checks


def table(checks: list[Check]) -> str:
    """The checks as an aligned text table; the fix is shown for failures only."""
    rows = [("check", "result", "detail", "fix")] + [(c.name, "ok" if c.ok else "FAIL", c.detail, c.fix) for c in checks]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip() for r in rows)
