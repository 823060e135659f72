"""The test pod a platform engineer would write, built from a LaunchRequest and the specs.

Pure: returns a plain dict in Kubernetes JSON shape, so the same body goes to the kubernetes
client, to dagster-k8s ``PipesK8sClient`` and to kubernetes-validate in the tests.

Choices that matter:
- Resources: CPU and memory per GPU from the pool (:mod:`resources`), so pods are Burstable,
  never BestEffort; ``nvidia.com/gpu`` requests = limits. A 0-GPU pod on a GPU node gets
  ``NVIDIA_VISIBLE_DEVICES=void`` (otherwise the runtime shows it every GPU).
- The image is pinned by digest for the night (``IfNotPresent`` is then safe); the GPU
  pre-flight is an init container (:mod:`preflight`) with exit codes of its own.
- Time: the test's timeout is enforced by the launcher from the *test container's* start;
  ``activeDeadlineSeconds`` (counted by Kubernetes from ``status.startTime``, image pull and
  pre-flight included) is only a backstop: timeout + the deployment's ``startup_wait_s``.
- The command is the wrapper argv, no shell: test data never becomes shell text. A pass needs
  the wrapper's completion record, as on the local launcher: the wrapper writes it to the
  container's termination-message file (``--result /dev/termination-log``), the kubelet hands it
  on in ``state.terminated.message``, and it carries the attempt's fresh
  ``NIGHTLY_ATTEMPT_TOKEN`` (:func:`outcomes.classify`). A test that exits 0 halfway writes none.
- No credential in test pods: ``HF_TOKEN`` goes only to build pods that download (:mod:`builds`);
  any literal token in the request's environment is dropped, never copied into a spec.
- The cache PVC mirrors ``/root``: ``/root/models/x`` is ``models/x`` on the volume, a path outside
  ``/root`` is under ``_outside_root`` (``/dev/shm/x`` is ``_outside_root/dev/shm/x``, never the
  ``dev/shm/x`` of ``/root/dev/shm/x``), as in :class:`pipelines.storage.cache.AssetCache`. Test pods mount ``models`` and ``datasets``
  read-only, plus every other cached path the test needs (a converted checkpoint in ``/root``);
  the build pods of :mod:`builds` write the same layout.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

from pipelines.core.catalog.requirements import CACHE_PATH_RULE, cache_relpath
from pipelines.core.specs import DeploymentSpec, PoolSpec
from pipelines.launch.base import LaunchRequest
from pipelines.launch.kubernetes.outcomes import MAIN_CONTAINER, TOKEN_ENV
from pipelines.launch.kubernetes.preflight import preflight_container
from pipelines.launch.kubernetes.resources import pinned_image, pod_resources, pull_policy

LABEL_PREFIX = "nightly-e2e.io"
MANAGED_BY = ("app.kubernetes.io/managed-by", "nightly-e2e")
#: the launcher's own key for a pod, so a create retried after a lost answer adopts its own pod
ATTEMPT_UID = f"{LABEL_PREFIX}/attempt-uid"
#: who created the pod (:func:`ownership.launched_by`: a run pod of the cluster, or a process), for the sweeper
LAUNCHED_BY = f"{LABEL_PREFIX}/launched-by"
HF_TOKEN_KEY = "token"
#: Environment names that must only ever come from a Secret.
SECRET_ENV = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN"})
MODELS_DIR, DATASETS_DIR = "/root/models", "/root/datasets"
CACHE_VOLUME = "cache"
#: the wrapper, with python3: images often have no ``python``
WRAPPER = ("python3", "-m", "pipelines.launch.wrapper")
#: where the wrapper writes its completion record: the kubelet reads it into the pod status
RESULT_PATH = "/dev/termination-log"
#: where the test image holds the wrapper's package (the Dockerfile's and nix/images.nix's
#: ``test-pod`` layer): ``/opt/nightly-e2e/pipelines``, on the image's ``PYTHONPATH``
WRAPPER_PYTHONPATH = "/opt/nightly-e2e"

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
        MANAGED_BY[0]: MANAGED_BY[1],
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


def wrapper_pythonpath(value: str) -> str:
    """A ``PYTHONPATH`` the pod sets, with the image's wrapper folder first.

    A container's env entry replaces the image's ``ENV PYTHONPATH=/opt/nightly-e2e``, so a repo env
    of ``PYTHONPATH: "{repo}"`` (``.`` in a pod) would leave ``python3 -m pipelines.launch.wrapper``
    without its package. First, not last: ``pipelines`` must be ours even when the checkout has a
    package of that name. The test's own folder still comes before it: the wrapper gives the test
    the ``sys.path`` of ``python3 FILE`` (the file's folder first, then ``PYTHONPATH``'s entries).
    """
    rest = [p for p in value.split(":") if p != WRAPPER_PYTHONPATH] if value else []
    return ":".join([WRAPPER_PYTHONPATH, *rest])


def _env(request: LaunchRequest, token: str) -> list[dict[str, Any]]:
    plain = {**request.env, **dict(request.test.env)}
    plain.update(
        {TOKEN_ENV: token},
        NIGHTLY_TEST_ID=request.test.id,
        NIGHTLY_ATTEMPT=str(request.attempt),
        NIGHTLY_RUN_ID=request.run_id,
        NIGHTLY_NIGHT=request.night,
        PYTHONUNBUFFERED="1",
    )
    if "PYTHONPATH" in plain:
        plain["PYTHONPATH"] = wrapper_pythonpath(str(plain["PYTHONPATH"]))
    if request.test.gpus == 0:  # the NVIDIA runtime shows every GPU of the node to a pod that asked for none
        plain["NVIDIA_VISIBLE_DEVICES"] = "void"
    env: list[dict[str, Any]] = [
        {"name": k, "value": str(v)} for k, v in sorted(plain.items()) if k not in SECRET_ENV and k != "NIGHTLY_NODE_NAME"
    ]
    env.append({"name": "NIGHTLY_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    return env


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


def cache_subpath(container_path: str, *, mount: bool = False) -> str:
    """Where a container path lives on the cache PVC (``/root/models/x`` -> ``models/x``); the catalog
    checks tests' paths by the same rule. ``mount``: a folder mounted whole (``/root/models``), which no
    input may be built into."""
    rel = cache_relpath(container_path, entry=not mount)
    if rel is None:
        raise ValueError(f"{container_path!r}: {CACHE_PATH_RULE}")
    return rel


def cache_mounts(paths: Iterable[str] = (), *, read_only: bool = True) -> list[dict[str, Any]]:
    """Mounts of the cache volume: ``/root/models``, ``/root/datasets`` and each other path in ``paths``.

    A path under a folder already mounted is reached through that mount (no nested mounts).
    """
    mounted = [MODELS_DIR, DATASETS_DIR]
    for p in sorted({str(PurePosixPath(p)) for p in paths}, key=lambda p: (p.count("/"), p)):
        if not any(p == m or p.startswith(m + "/") for m in mounted):
            mounted.append(p)
    return [{"name": CACHE_VOLUME, "mountPath": m, "subPath": cache_subpath(m, mount=True), "readOnly": read_only} for m in mounted]


def node_affinity(avoid: Iterable[str] = (), pin: str = "") -> dict[str, Any] | None:
    """Required node affinity: on ``pin`` (a real node of the plan) and never on ``avoid``.

    By the node's *name* (``matchFields`` on ``metadata.name``), the name the node listing and
    ``spec.nodeName`` give: the ``kubernetes.io/hostname`` label is not always that name (EKS and
    kops name nodes by FQDN, ``ip-10-0-1-1.ec2.internal``, and label them ``ip-10-0-1-1``). The
    API server allows one value per field requirement, so each avoided node is a requirement of
    its own (requirements of a term must all hold).
    """
    fields = []
    if pin:
        fields.append({"key": "metadata.name", "operator": "In", "values": [pin]})
    fields += [{"key": "metadata.name", "operator": "NotIn", "values": [n]} for n in sorted(set(avoid))]
    if not fields:
        return None
    terms = [{"matchFields": fields}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def build_pod(
    request: LaunchRequest,
    pool: PoolSpec,
    deployment: DeploymentSpec,
    *,
    name: str | None = None,
    workdir: str = "",
    image: str = "",
    digest: str = "",
    cache_paths: Iterable[str] = (),
    node_name: str = "",
    owner: Mapping[str, Any] | None = None,
    attempt_uid: str = "",
    token: str = "",
    launched_by: str = "",
) -> dict[str, Any]:
    """The Pod body for one attempt (apiVersion v1, kind Pod).

    ``cache_paths``: the container paths of the test's requirements, so that a converted
    checkpoint outside ``/root/models`` is mounted too. ``digest``: the night's image digest
    (default: the pool's ``image_digest``). ``node_name``: the real node the plan's virtual
    node maps to (ignored when that node is to be avoided). ``owner``: an ownerReference (the
    run's pod), so that deleting the run deletes its test pods; ``launched_by``: the creating
    process (:func:`ownership.launched_by`), for the sweeper when there is no owner. ``token``: the attempt's
    ``NIGHTLY_ATTEMPT_TOKEN``, which the wrapper's completion record must carry for a pass
    (default: a fresh one; every attempt needs its own, so a record can never be a stale one).
    """
    test = request.test
    token = token or uuid.uuid4().hex
    argv = [*WRAPPER, "--file", test.path, "--func", "execute", "--result", RESULT_PATH]
    if test.args:
        argv += ["--", *test.args]
    ref, _ = pinned_image(pool, digest) if not image else (image, "")
    policy = pull_policy(ref)
    resources = pod_resources(pool, test.gpus)
    container: dict[str, Any] = {
        "name": MAIN_CONTAINER,
        "image": ref,
        "imagePullPolicy": policy,
        "command": argv,
        "env": _env(request, token),
        "resources": resources,
        "terminationMessagePath": RESULT_PATH,
        # the record when the wrapper wrote one; else, on a failure, the log's end, where the wrapper says
        # why it could not write it (a test that exits 74 itself is told apart by that line's absence)
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if workdir:
        container["workingDir"] = workdir
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": pool.shm_size}}]
    if deployment.cache_pvc:
        volumes.append({"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": deployment.cache_pvc, "readOnly": True}})
        container["volumeMounts"] += cache_mounts(cache_paths, read_only=True)
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # a backstop only: the launcher times the test from its container's start
        "activeDeadlineSeconds": int(request.timeout_s) + int(deployment.startup_wait_s),
        "terminationGracePeriodSeconds": 30,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": volumes,
    }
    # every test pod runs the wrapper, so every one checks it is in the image (0 GPUs: that check alone);
    # the test's own resources, so the pre-flight adds nothing to what the pod asks of the node
    spec["initContainers"] = [preflight_container(ref, policy, test.gpus, resources)]
    if pool.node_selector:
        spec["nodeSelector"] = dict(pool.node_selector)
    if pool.tolerations:
        spec["tolerations"] = [dict(t) for t in pool.tolerations]
    pin = node_name if node_name and node_name not in request.avoid_nodes else ""
    affinity = node_affinity(request.avoid_nodes, pin)
    if affinity:
        spec["affinity"] = affinity
    if pool.priority_class:
        spec["priorityClassName"] = pool.priority_class
    annotations = {f"{LABEL_PREFIX}/test-id": test.id, f"{LABEL_PREFIX}/test-path": test.path}
    if request.avoid_nodes:
        annotations[f"{LABEL_PREFIX}/avoid-nodes"] = ",".join(sorted(set(request.avoid_nodes)))
    if attempt_uid:
        annotations[ATTEMPT_UID] = attempt_uid
    if launched_by:
        annotations[LAUNCHED_BY] = launched_by
    metadata: dict[str, Any] = {
        "name": name or pod_name(request),
        "namespace": deployment.namespace,
        "labels": labels(request, pool),
        "annotations": annotations,
    }
    if owner:
        metadata["ownerReferences"] = [dict(owner)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
