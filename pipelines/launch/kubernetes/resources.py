"""CPU and memory for a pod, per GPU from the pool spec, and the image it runs, pinned by digest.

A pod that requests only ``nvidia.com/gpu`` is BestEffort: evicted first under node pressure and
starved of CPU by its neighbours, and those evictions are then blamed on the node. Every pod
here requests CPU and memory (one GPU's share for a CPU-only pod) and limits memory to its
request: Burstable QoS, CPU free to burst. Kubernetes quantities are parsed and multiplied
exactly (integers of millicores and bytes), never as floats.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from pipelines.core.specs import PoolSpec

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_FACTOR = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _parse(text: str) -> tuple[Decimal, str]:
    m = _QUANTITY.match(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a Kubernetes quantity; write e.g. \"12\", \"500m\" or \"200Gi\"")
    return Decimal(m.group(1)), m.group(2) or ""


def millicores(text: str) -> int:
    """CPU quantity in millicores ("12" -> 12000, "500m" -> 500)."""
    value, unit = _parse(text)
    if unit not in ("", "m"):
        raise ValueError(f"{text!r} is not a CPU quantity; write cores (\"12\") or millicores (\"500m\")")
    return int(value if unit == "m" else value * 1000)


def bytes_of(text: str) -> int:
    """Memory quantity in bytes ("200Gi" -> 214748364800)."""
    value, unit = _parse(text)
    if unit == "m":
        raise ValueError(f"{text!r} is not a memory quantity; write e.g. \"200Gi\"")
    return int(value * _FACTOR[unit])


def cpu_text(m: int) -> str:
    return str(m // 1000) if m % 1000 == 0 else f"{m}m"


def memory_text(n: int) -> str:
    for unit in ("Ti", "Gi", "Mi", "Ki"):
        if n % _FACTOR[unit] == 0:
            return f"{n // _FACTOR[unit]}{unit}"
    return str(n)


def pod_resources(pool: PoolSpec, gpus: int) -> dict[str, Any]:
    """Requests and limits of a pod using ``gpus`` GPUs of ``pool`` (Burstable, never BestEffort)."""
    share = max(1, gpus)
    cpu = cpu_text(millicores(pool.cpu_per_gpu) * share)
    memory = memory_text(bytes_of(pool.memory_per_gpu) * share)
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {"memory": memory}
    if gpus > 0:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    return {"requests": requests, "limits": limits}


def pinned_image(pool: PoolSpec, digest: str = "") -> tuple[str, str]:
    """(image reference, digest) every pod of the night runs.

    ``digest`` (the night's, e.g. resolved when the night starts) wins over the pool's
    ``image_digest``; an image already written ``name@sha256:...`` keeps its own. Without any
    digest the reference is the moving tag and the digest is "".
    """
    image = pool.image
    if "@sha256:" in image:
        return image, image.split("@", 1)[1]
    digest = digest or pool.image_digest
    return (f"{image}@{digest}", digest) if digest and image else (image, "")


def pull_policy(image: str) -> str:
    """A digest never changes, so a node's copy is good; a tag may have moved, so pull it."""
    return "IfNotPresent" if "@sha256:" in image else "Always"
