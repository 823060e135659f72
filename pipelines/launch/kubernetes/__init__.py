"""The Kubernetes launcher: test pods on GPU nodes, outcomes told apart, bad nodes cordoned.

``podspec`` and ``outcomes`` are pure; ``launcher`` and ``nodes`` talk to the API through the
kubernetes client (about 3 s to import, so loaded on first use); ``pipes`` runs the same pod
through dagster-k8s (Dagster imported only there).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "KubernetesLauncher": "launcher",
    "launcher_from_deployment": "launcher",
    "cordon": "nodes",
    "cordon_bad_nodes": "nodes",
    "Verdict": "outcomes",
    "classify": "outcomes",
    "build_pod": "podspec",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
