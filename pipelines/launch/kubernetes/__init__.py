"""The Kubernetes launcher: test pods on GPU nodes, outcomes told apart, bad nodes cordoned.

``podspec`` and ``outcomes`` are pure; ``launcher`` and ``nodes`` talk to the API through the
kubernetes client (about 3 s to import, so loaded on first use); ``pipes`` runs the same pod
through dagster-k8s (Dagster imported only there); ``dryrun`` renders a night's pods without a
cluster; ``doctor`` checks a cluster before the first night.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "KubernetesLauncher": "launcher",
    "launcher_from_deployment": "connect",
    "core_v1_api": "connect",
    "cordon": "nodes",
    "cordon_bad_nodes": "nodes",
    "Verdict": "outcomes",
    "classify": "outcomes",
    "build_pod": "podspec",
    "render_night_pods": "dryrun",
    "sweep_stale_pods": "ownership",
    "run_pod_owner": "ownership",
    "diagnose": "doctor",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
