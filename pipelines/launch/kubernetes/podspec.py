"""The test pod a platform engineer would write, built from a LaunchRequest and the specs.

Pure: returns a plain dict in Kubernetes JSON shape, so the same body goes to the kubernetes
client, to dagster-k8s ``PipesK8sClient`` and to kubernetes-validate in the tests.

Choices that matter:
- GPUs: ``nvidia.com/gpu`` requests = limits (extended resources cannot be overcommitted).
- ``activeDeadlineSeconds`` counts from ``status.startTime``: queueing does not eat the test's
  time; the pre-flight budget is added on top so a slow CUDA init never shortens the test.
- The command is a constant ``sh -c`` script (the pre-flight) followed by the wrapper argv as
  positional parameters: test data never becomes shell text.
- The HF token comes only from a Secret (``secretKeyRef``); any literal token in the request's
  environment is dropped, never copied into the spec.
- The cache PVC mirrors ``/root``: ``/root/models/x`` is ``models/x`` on the volume (as in
  :class:`pipelines.storage.cache.AssetCache`). Test pods mount ``models`` and ``datasets``
  read-only, plus every other cached path the test needs (a converted checkpoint in ``/root``);
  the build pods of :mod:`builds` write the same layout.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

from pipelines.core.specs import DeploymentSpec, PoolSpec
from pipelines.launch.base import LaunchRequest
from pipelines.launch.kubernetes.outcomes import MAIN_CONTAINER, PREFLIGHT_EXIT_CODE

LABEL_PREFIX = "nightly-e2e.io"
PREFLIGHT_TIMEOUT_S = 60
HF_TOKEN_KEY = "token"
#: Environment names that must only ever come from a Secret.
SECRET_ENV = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN"})
MODELS_DIR, DATASETS_DIR = "/root/models", "/root/datasets"
CACHE_VOLUME = "cache"

_PREFLIGHT_PY = """\
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    print("nightly-preflight: cannot load libcuda.so.1:", exc)
    sys.exit(1)
count = ctypes.c_int(0)
rc = cuda.cuInit(0)
if rc == 0:
    rc = cuda.cuDeviceGetCount(ctypes.byref(count))
for i in range(count.value if rc == 0 else 0):
    dev, ctx = ctypes.c_int(0), ctypes.c_void_p()
    rc = cuda.cuDeviceGet(ctypes.byref(dev), i) or cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    if rc:
        break
    cuda.cuDevicePrimaryCtxRelease(dev)
if rc != 0 or count.value == 0:
    print("nightly-preflight: CUDA init failed: CUresult", rc, "devices", count.value,
          "(802 = system not ready: fabric manager down on NVSwitch nodes)")
    sys.exit(1)
print("nightly-preflight: CUDA initialised", count.value, "GPU(s)")
"""

#: Constant shell script: pre-flight, then ``exec "$@"`` (the wrapper argv). Never formatted
#: with test data; the only inputs are positional parameters and environment variables.
PREFLIGHT_SCRIPT = f"""\
set -u
bounded() {{ if command -v timeout >/dev/null 2>&1; then timeout "${{NIGHTLY_PREFLIGHT_TIMEOUT_S:-60}}" "$@"; else "$@"; fi; }}
if [ "${{NIGHTLY_PREFLIGHT:-1}}" = "1" ]; then
  if ! bounded nvidia-smi -L; then
    echo "nightly-preflight: nvidia-smi -L failed: GPUs not usable on $NIGHTLY_NODE_NAME" >&2
    exit {PREFLIGHT_EXIT_CODE}
  fi
  if ! bounded python -c '{_PREFLIGHT_PY}'; then
    echo "nightly-preflight: CUDA init failed on $NIGHTLY_NODE_NAME" >&2
    exit {PREFLIGHT_EXIT_CODE}
  fi
fi
exec "$@"
"""

_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]+")
_NAME_BAD = re.compile(r"[^a-z0-9-]+")


def label_value(text: str, limit: int = 63) -> str:
    """A valid label value (<= 63 chars, alphanumeric at both ends); long ones keep a hash."""
    value = _LABEL_BAD.sub("-", text).strip("-_.")
    if len(value) > limit:
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        value = value[: limit - 9].rstrip("-_.") + "-" + digest
    return value


def pod_name(request: LaunchRequest) -> str:
    """Stable per (run, night, test, attempt): a resubmitted attempt finds its old pod."""
    key = "\0".join((request.run_id, request.night, request.test.id, str(request.attempt)))
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    stem = _NAME_BAD.sub("-", request.test.path.removesuffix(".py").lower().rsplit("/", 1)[-1]).strip("-")
    return f"nt-{stem[:36].strip('-') or 'test'}-{digest}-a{request.attempt}"


def labels(request: LaunchRequest, pool: PoolSpec) -> dict[str, str]:
    out = {
        "app.kubernetes.io/name": "nightly-e2e-test",
        "app.kubernetes.io/managed-by": "nightly-e2e",
        f"{LABEL_PREFIX}/test": label_value(request.test.id),
        f"{LABEL_PREFIX}/attempt": str(request.attempt),
        f"{LABEL_PREFIX}/pool": label_value(pool.name),
    }
    if request.run_id:
        out[f"{LABEL_PREFIX}/run-id"] = label_value(request.run_id)
    if request.night:
        out[f"{LABEL_PREFIX}/night"] = label_value(request.night)
    if pool.queue:
        out["kueue.x-k8s.io/queue-name"] = pool.queue
    return out


def _env(request: LaunchRequest, deployment: DeploymentSpec) -> list[dict[str, Any]]:
    plain = {**request.env, **dict(request.test.env)}
    plain.update(
        NIGHTLY_TEST_ID=request.test.id,
        NIGHTLY_ATTEMPT=str(request.attempt),
        NIGHTLY_RUN_ID=request.run_id,
        NIGHTLY_NIGHT=request.night,
        NIGHTLY_PREFLIGHT="1" if request.test.gpus > 0 else "0",
        NIGHTLY_PREFLIGHT_TIMEOUT_S=str(PREFLIGHT_TIMEOUT_S),
        PYTHONUNBUFFERED="1",
    )
    env: list[dict[str, Any]] = [
        {"name": k, "value": str(v)} for k, v in sorted(plain.items()) if k not in SECRET_ENV and k != "NIGHTLY_NODE_NAME"
    ]
    env.append({"name": "NIGHTLY_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    return env + hf_token_env(deployment)


def hf_token_env(deployment: DeploymentSpec) -> list[dict[str, Any]]:
    """``HF_TOKEN`` from the deployment's Secret (nothing when none is configured)."""
    if not deployment.hf_token_secret:
        return []
    ref = {"name": deployment.hf_token_secret, "key": HF_TOKEN_KEY}
    return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}}]


def pod_env(template: Mapping[str, str], extra: Mapping[str, str] | None = None, *, workdir: str = "") -> dict[str, str]:
    """The repo's environment (``assets/repos.yaml`` ``env``) as it must read inside a pod.

    Locally ``{cache}``, ``{repo}`` and ``{hub}`` name folders of the machine that plans; in a pod
    the cache is the PVC at ``/root``, the checkout is the image's working directory and there
    is no local hub. ``extra`` (the night's switches) is added as is; secrets are dropped.
    """
    values = {"cache": "/root", "repo": workdir or ".", "home": "/tmp/nightly", "hub": ""}
    env = {k: v.format(**values) for k, v in template.items()}
    env.update(extra or {})
    return {k: v for k, v in env.items() if k not in SECRET_ENV}


def cache_subpath(container_path: str) -> str:
    """Where a container path lives on the cache PVC (``/root/models/x`` -> ``models/x``)."""
    parts = PurePosixPath(container_path).parts
    rel = parts[2:] if parts[:2] == ("/", "root") else parts[1:]
    if not container_path.startswith("/") or not rel or ".." in rel:
        raise ValueError(f"{container_path!r}: not a usable path for a cached asset; use an absolute path under /root")
    return "/".join(rel)


def cache_mounts(paths: Iterable[str] = (), *, read_only: bool = True) -> list[dict[str, Any]]:
    """Mounts of the cache volume: ``/root/models``, ``/root/datasets`` and each other path in ``paths``.

    A path under a folder already mounted is reached through that mount (no nested mounts).
    """
    mounted = [MODELS_DIR, DATASETS_DIR]
    for p in sorted({str(PurePosixPath(p)) for p in paths}, key=lambda p: (p.count("/"), p)):
        if not any(p == m or p.startswith(m + "/") for m in mounted):
            mounted.append(p)
    return [{"name": CACHE_VOLUME, "mountPath": m, "subPath": cache_subpath(m), "readOnly": read_only} for m in mounted]


def _affinity(avoid: tuple[str, ...]) -> dict[str, Any]:
    expr = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": sorted(set(avoid))}
    terms = [{"matchExpressions": [expr]}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def build_pod(
    request: LaunchRequest,
    pool: PoolSpec,
    deployment: DeploymentSpec,
    *,
    name: str | None = None,
    workdir: str = "",
    image: str = "",
    cache_paths: Iterable[str] = (),
) -> dict[str, Any]:
    """The Pod body for one attempt (apiVersion v1, kind Pod).

    ``cache_paths``: the container paths of the test's requirements, so that a converted
    checkpoint outside ``/root/models`` is mounted too.
    """
    test = request.test
    argv = ["python", "-m", "pipelines.launch.wrapper", "--file", test.path, "--func", "execute"]
    if test.args:
        argv += ["--", *test.args]
    container: dict[str, Any] = {
        "name": MAIN_CONTAINER,
        "image": image or pool.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", PREFLIGHT_SCRIPT, "nightly-preflight", *argv],
        "env": _env(request, deployment),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if workdir:
        container["workingDir"] = workdir
    if test.gpus > 0:
        gpus = {"nvidia.com/gpu": str(test.gpus)}
        container["resources"] = {"requests": dict(gpus), "limits": dict(gpus)}
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": pool.shm_size}}]
    if deployment.cache_pvc:
        volumes.append({"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": deployment.cache_pvc, "readOnly": True}})
        container["volumeMounts"] += cache_mounts(cache_paths, read_only=True)
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": int(request.timeout_s) + (PREFLIGHT_TIMEOUT_S if test.gpus > 0 else 0),
        "terminationGracePeriodSeconds": 30,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": volumes,
    }
    if pool.node_selector:
        spec["nodeSelector"] = dict(pool.node_selector)
    if pool.tolerations:
        spec["tolerations"] = [dict(t) for t in pool.tolerations]
    if request.avoid_nodes:
        spec["affinity"] = _affinity(request.avoid_nodes)
    if pool.priority_class:
        spec["priorityClassName"] = pool.priority_class
    annotations = {f"{LABEL_PREFIX}/test-id": test.id, f"{LABEL_PREFIX}/test-path": test.path}
    if request.avoid_nodes:
        annotations[f"{LABEL_PREFIX}/avoid-nodes"] = ",".join(sorted(set(request.avoid_nodes)))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name or pod_name(request),
            "namespace": deployment.namespace,
            "labels": labels(request, pool),
            "annotations": annotations,
        },
        "spec": spec,
    }
