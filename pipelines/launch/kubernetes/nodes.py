"""The pool's real nodes: the plan's virtual node *i* pinned to one of them, and cordoning bad ones.

Pinning: the planner packs tests per node; if the scheduler spread them instead, the pool would
fragment and an 8-GPU test would wait for a whole free node until the unschedulable limit. So
the nodes matching the pool's ``node_selector`` that are Ready, schedulable, offer
``gpus_per_node`` allocatable GPUs and carry no NoSchedule/NoExecute taint the pool's tolerations
leave untolerated (disk pressure, an admin's maintenance taint: a pod pinned there would stay
Pending until the unschedulable limit) are listed (sorted by name) and virtual node *i* becomes
the *i*-th of them (a required node affinity on the node's name, ``metadata.name``). Listing needs
``get/list`` on nodes (``k8s/components/node-reader``); without it pods are simply not pinned.
The list is made once per night, so a node that fails during the night (:meth:`NodePins.fault`:
node lost, shut down, GPUs unusable) is pinned to no more: a pod pinned there would wait the
unschedulable limit (30 minutes) before its retry ran elsewhere. Its virtual node's later tests
run unpinned, and the night's notes and each such attempt's log say so.

Cordoning is a patch of ``spec.unschedulable`` on the Node; it needs the ClusterRole in
``k8s/components/node-cordon`` (RBAC cannot narrow it to that field). Off unless the deployment
says ``cordon_bad_nodes: true``; a refusal is a note in the night's report, never a failed run.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from pipelines.core.specs import DeploymentSpec, PoolSpec
from pipelines.launch.kubernetes.retries import CONNECTION_ERRORS, api_message, with_retries

log = logging.getLogger(__name__)
CORDON_ANNOTATION = "nightly-e2e.io/cordoned-because"


def label_selector(selector: dict[str, str]) -> str:
    """A pool's ``node_selector`` as the API's ``labelSelector`` (``k=v,...``)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def read_nodes(api: client.CoreV1Api, selector: dict[str, str], **retry: Any) -> list[dict[str, Any]]:
    """Nodes matching ``selector``, as plain dicts (Kubernetes JSON)."""
    resp = with_retries(api.list_node, label_selector=label_selector(selector), _preload_content=False, **retry)
    return list(json.loads(resp.data).get("items") or [])


def ready(node: dict[str, Any]) -> bool:
    conds = (node.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def gpus_of(node: dict[str, Any]) -> int:
    try:
        return int(((node.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu", "0"))
    except ValueError:
        return 0


def tolerated(taint: dict[str, Any], tolerations: Iterable[dict[str, Any]]) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint``, by the scheduler's rules: the effect is
    the taint's or empty (every effect); ``Exists`` matches the key (an empty key: every taint),
    ``Equal`` (or no operator) the key and the value."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t["key"] == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and str(t.get("value") or "") == str(taint.get("value") or ""):
            return True
    return False


def untolerated(node: dict[str, Any], tolerations: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The node's taints that keep a pod with ``tolerations`` off it (NoSchedule, NoExecute) and are not tolerated."""
    tolerations = list(tolerations)
    return [t for t in (node.get("spec") or {}).get("taints") or ()
            if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerated(t, tolerations)]


def usable(node: dict[str, Any], gpus: int, tolerations: Iterable[dict[str, Any]] = ()) -> bool:
    return ready(node) and not (node.get("spec") or {}).get("unschedulable") and gpus_of(node) >= gpus and \
        not untolerated(node, tolerations)


def pool_nodes(api: client.CoreV1Api, pool: PoolSpec, notes: list[str] | None = None, **retry: Any) -> list[str]:
    """Names of the pool's usable nodes, sorted (virtual node i -> the i-th). ``notes`` gets a line
    for each node left out only for a taint the pool does not tolerate: nothing else says why it sits idle."""
    names = []
    for n in read_nodes(api, pool.node_selector, **retry):
        if usable(n, pool.gpus_per_node, pool.tolerations):
            names.append(n["metadata"]["name"])
        elif notes is not None and usable(n, pool.gpus_per_node, [{"operator": "Exists"}]):
            taints = ", ".join(f"{t.get('key')}={t.get('value') or ''}:{t.get('effect')}"
                               for t in untolerated(n, pool.tolerations))
            notes.append(f"pool {pool.name}: node {n['metadata']['name']} not used: taint {taints} not tolerated; "
                         f"remove the taint (kubectl taint nodes {n['metadata']['name']} KEY-) or tolerate it in "
                         f"pools.{pool.name}.tolerations of the deployment")
    return sorted(names)


def _not_listed(pool: PoolSpec, exc: Exception) -> str:
    """The note for a node listing that failed, with the fix its cause calls for."""
    unpinned = "pods are not pinned to the plan's nodes"
    if isinstance(exc, ApiException) and exc.status == 400:  # the selector itself, not the rights
        return (f"pool {pool.name}: nodes not listed: the API server refused the node_selector "
                f"{label_selector(pool.node_selector)!r} (400 {api_message(exc)[:200]}); {unpinned}; "
                "fix node_selector in assets/cluster.yaml")
    why = f"{exc.status} {exc.reason}" if isinstance(exc, ApiException) else type(exc).__name__
    return f"pool {pool.name}: nodes not listed ({why}); {unpinned}; apply k8s/components/node-reader"


class NodePins:
    """Virtual node index -> real node name per pool, listed once per night (lazily, thread-safe);
    a node that failed tonight (:meth:`fault`) is no pin any more."""

    def __init__(self, api: client.CoreV1Api, **retry: Any):
        self.api, self.retry = api, retry
        self.lock = threading.Lock()
        self.nodes: dict[str, list[str]] = {}
        self.notes: list[str] = []
        #: real node -> the node fault it had tonight (reason, test): pinned to no more
        self.faults: dict[str, str] = {}
        self._unpinned: set[tuple[str, int]] = set()

    def fault(self, node: str, why: str) -> None:
        """``node`` failed tonight (``why``: the attempt's reason and test): pin nothing to it any more."""
        with self.lock:
            self.faults.setdefault(node, why)

    def unpinned_because(self, pool: PoolSpec, index: int) -> str:
        """Why virtual node ``index`` of ``pool`` is not pinned to its real node ("" when it is, or has none)."""
        self.real(pool, index)
        with self.lock:
            names = self.nodes.get(pool.name) or []
            node = names[index] if 0 <= index < len(names) else ""
            why = self.faults.get(node, "") if node else ""
        if not why:
            return ""
        return (f"not pinned to {node} (the plan's node {index} of pool {pool.name}): {why} there earlier tonight; "
                "the scheduler picks the node")

    def real(self, pool: PoolSpec, index: int) -> str:
        """The real node for virtual node ``index`` of ``pool`` ("" when it cannot be known)."""
        with self.lock:
            if pool.name not in self.nodes:
                try:
                    left_out: list[str] = []
                    self.nodes[pool.name] = pool_nodes(self.api, pool, left_out, **self.retry)
                    for note in left_out:
                        self.notes.append(note)
                        log.warning(note)
                except (ApiException, *CONNECTION_ERRORS) as exc:
                    self.notes.append(_not_listed(pool, exc))
                    log.warning(self.notes[-1])
                    self.nodes[pool.name] = []
                if 0 < len(self.nodes[pool.name]) < pool.nodes:
                    self.notes.append(f"pool {pool.name}: {len(self.nodes[pool.name])} usable node(s), "
                                      f"the plan has {pool.nodes}; the rest run unpinned")
            names = self.nodes[pool.name]
            node = names[index] if 0 <= index < len(names) else ""
            if node not in self.faults:
                return node
            if (pool.name, index) not in self._unpinned:
                self._unpinned.add((pool.name, index))
                self.notes.append(f"pool {pool.name}: the plan's node {index} no longer pinned to {node} "
                                  f"({self.faults[node]}); its later tests ran unpinned")
                log.warning(self.notes[-1])
        return ""


def cordon(core_v1_api: client.CoreV1Api, node: str, reason: str = "") -> None:
    """Mark ``node`` unschedulable, recording why in an annotation (a merge patch)."""
    body: dict = {"spec": {"unschedulable": True}}
    if reason:
        body["metadata"] = {"annotations": {CORDON_ANNOTATION: reason[:1000]}}
    # the client would send a dict as a JSON Patch (a list is expected there): say merge patch
    with_retries(core_v1_api.patch_node, node, body, _content_type="application/merge-patch+json")


def cordon_bad_nodes(core_v1_api: client.CoreV1Api, deployment: DeploymentSpec,
                     findings: Iterable[tuple[str, str]], notes: list[str] | None = None) -> list[str]:
    """Cordon each ``(node, evidence)`` when the deployment allows it; returns the nodes cordoned.

    A node the API will not cordon (403 without the cordon overlay, a vanished node) is a line
    in ``notes`` and the log: the night's results are worth more than the cordon.
    """
    if not deployment.cordon_bad_nodes:
        return []
    done = []
    for node, evidence in findings:
        try:
            cordon(core_v1_api, node, evidence)
        except ApiException as exc:
            note = (f"cordon {node}: refused ({exc.status} {api_message(exc)[:200]}); cordon it by hand "
                    "(kubectl cordon) or apply k8s/overlays/cordon")
        except CONNECTION_ERRORS as exc:
            note = f"cordon {node}: API unreachable ({type(exc).__name__}); cordon it by hand (kubectl cordon)"
        else:
            done.append(node)
            continue
        log.warning(note)
        if notes is not None:
            notes.append(note)
    return done
