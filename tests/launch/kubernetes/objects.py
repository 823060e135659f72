"""Cluster objects as the real API server holds them: GPU nodes, and the QoS class it derives."""

from __future__ import annotations

from typing import Any


def gpu_node(name: str, gpus: int = 8, product: str = "NVIDIA-H200", **extra: Any) -> dict[str, Any]:
    """A Ready H200 node as the NVIDIA GPU operator labels it; ``extra`` overrides top-level keys."""
    node = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": product,
                                               "nvidia.com/gpu.count": str(gpus)}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "190", "memory": "1900Gi", "nvidia.com/gpu": str(gpus)},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }
    node.update(extra)
    return node


def qos_class(spec: dict[str, Any]) -> str:
    """BestEffort, Burstable or Guaranteed, by the rules of the real API server (cpu and memory)."""
    containers = [*(spec.get("initContainers") or []), *spec.get("containers", [])]
    req = [(c.get("resources") or {}).get("requests") or {} for c in containers]
    lim = [(c.get("resources") or {}).get("limits") or {} for c in containers]
    if not any(r.get(k) or m.get(k) for r, m in zip(req, lim, strict=True) for k in ("cpu", "memory")):
        return "BestEffort"
    full = all(m.get(k) and (r.get(k) or m.get(k)) == m.get(k) for r, m in zip(req, lim, strict=True) for k in ("cpu", "memory"))
    return "Guaranteed" if full else "Burstable"
