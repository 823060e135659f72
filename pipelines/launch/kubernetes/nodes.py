"""Cordon a node that the night found bad, so nothing else is scheduled there.

A cordon is a patch of ``spec.unschedulable`` on the Node; it needs the ClusterRole in
``k8s/components/node-cordon`` (RBAC cannot narrow it to that field). Off unless the deployment
says ``cordon_bad_nodes: true``; a person uncordons after fixing the node.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubernetes import client

from pipelines.core.specs import DeploymentSpec

CORDON_ANNOTATION = "nightly-e2e.io/cordoned-because"


def cordon(core_v1_api: client.CoreV1Api, node: str, reason: str = "") -> None:
    """Mark ``node`` unschedulable, recording why in an annotation (a merge patch)."""
    body: dict = {"spec": {"unschedulable": True}}
    if reason:
        body["metadata"] = {"annotations": {CORDON_ANNOTATION: reason[:1000]}}
    # the client would send a dict as a JSON Patch (a list is expected there): say merge patch
    core_v1_api.patch_node(node, body, _content_type="application/merge-patch+json")


def cordon_bad_nodes(core_v1_api: client.CoreV1Api, deployment: DeploymentSpec,
                     findings: Iterable[tuple[str, str]]) -> list[str]:
    """Cordon each ``(node, evidence)`` when the deployment allows it; returns the nodes cordoned."""
    if not deployment.cordon_bad_nodes:
        return []
    done = []
    for node, evidence in findings:
        cordon(core_v1_api, node, evidence)
        done.append(node)
    return done
