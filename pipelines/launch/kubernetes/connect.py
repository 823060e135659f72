"""Credentials for the API: the pod's service account in the cluster, else a kubeconfig.

Also where a launcher for a deployment is made, with the run's own pod as the owner of the
pods it creates (:func:`ownership.run_pod_owner`).
"""

from __future__ import annotations

import os
from typing import Any

from kubernetes import client

from pipelines.core.specs import DeploymentSpec
from pipelines.launch.kubernetes.launcher import KubernetesLauncher


def launcher_from_deployment(deployment: DeploymentSpec, *, kubeconfig: str | None = None,
                             context: str | None = None, retries: int = 0, owner: Any = "auto",
                             **kwargs: Any) -> KubernetesLauncher:
    """A launcher for ``deployment`` with credentials from the pod (in cluster) or the kubeconfig.

    ``retries`` defaults to 0 because :func:`pipelines.launch.dispatch.run_plan` already retries
    infra errors on another node; use ``deployment.max_infra_retries`` when calling directly.
    ``owner="auto"``: the run's own pod when there is one (:func:`ownership.run_pod_owner`).
    """
    api = core_v1_api(kubeconfig=kubeconfig, context=context)
    if owner == "auto":
        from pipelines.launch.kubernetes.ownership import run_pod_owner

        owner = run_pod_owner(api, deployment.namespace)
    return KubernetesLauncher(api, deployment, retries=retries, owner=owner, **kwargs)


def core_v1_api(*, kubeconfig: str | None = None, context: str | None = None) -> client.CoreV1Api:
    """A CoreV1Api from the in-cluster service account, or ``$KUBECONFIG`` / ``~/.kube/config``."""
    from kubernetes import config

    if os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
        config.load_incluster_config()
    else:
        # $KUBECONFIG read now: the client reads it once, when kubernetes is first imported
        config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG") or None, context=context)
    return client.CoreV1Api()
