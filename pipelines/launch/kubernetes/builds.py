"""Build model weights, datasets and converted checkpoints on the cluster, into the cache PVC.

In production the test pods mount the cache PVC read-only, so its inputs must be built where
the PVC lives: one pod per requirement, with the PVC mounted read-write. The pod runs a
constant Python script (data reaches it only through environment variables and arguments):

1. probe: the destination already holds a completion marker of the same source and, for a
   conversion, the same identity -> print ``nightly: reused`` and exit 0 (a second night starts a
   tiny pod and builds nothing). The identity is the one :class:`pipelines.storage.cache.AssetCache`
   records (:mod:`pipelines.core.recipe`): the recipe digest comes in ``NIGHTLY_RECIPE``, computed
   here from the checkout the catalog reads plus the pod's image digest, and the pod adds its
   model's identity read from the model's marker on the PVC. Another identity is rebuilt;
2. run the command (``hf download ...`` or the framework's conversion argv) into a temporary
   sibling folder, write the same marker as :class:`pipelines.storage.cache.AssetCache`, and
   rename it into place; an interrupted build is never mistaken for a finished one. The pod
   says the identity it wrote and, when it replaced an entry, that entry's marker, so the run
   worker fills ``Built.identity`` and ``Built.rebuilt`` as the local cache does. Step 2 holds a
   ``flock`` on the PVC, so two pods (a night beside a backfill) never convert one checkpoint twice,
   and removes the half-built folders of pods killed mid-build.

The pod is followed and classified like a test pod (:meth:`KubernetesLauncher.run_pod`,
:func:`outcomes.classify`); infra failures are retried on another node, anything else is a
:class:`BuildError` carrying the verdict and the log tail. A conversion pod that asks for GPUs
starts with the test pods' GPU pre-flight (:mod:`preflight`): without it a node whose GPUs do not
initialise (CUDA Error 802) would fail the conversion as the converter's own error, not retried.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import time
import uuid
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from kubernetes import client

from pipelines.core.model import Requirement
from pipelines.core.recipe import Recipe
from pipelines.core.specs import ConversionSpec, DeploymentSpec, PoolSpec
from pipelines.launch.kubernetes.launcher import KubernetesLauncher
from pipelines.launch.kubernetes.ownership import launched_by
from pipelines.launch.kubernetes.podspec import (
    CACHE_VOLUME,
    LABEL_PREFIX,
    LAUNCHED_BY,
    MANAGED_BY,
    SECRET_ENV,
    cache_mounts,
    cache_subpath,
    hf_token_env,
    label_value,
    node_affinity,
)
from pipelines.launch.kubernetes.preflight import preflight_container
from pipelines.launch.kubernetes.resources import pinned_image, pod_resources, pull_policy
from pipelines.storage.cache import (
    MARKER,
    BuildError,
    Built,
    built_from,
    conversion_command,
    conversion_recipe,
    download_args,
    stale_reason,
)

#: The whole cache PVC, read-write, in build pods only: temporary folder and destination share
#: one mount, so the final rename is atomic (a rename across two subPath mounts is not).
BUILD_MOUNT = "/nightly-cache"
BUILD_CONTAINER = "build"
REUSED = "nightly: reused"
BUILT = "nightly: built"
#: exit code of the build script when a conversion's model is not in the cache
MISSING_INPUT_EXIT = 3

#: Constant: never formatted with data. Inputs: NIGHTLY_DEST, NIGHTLY_TMP, NIGHTLY_KEY,
#: NIGHTLY_SOURCE, NIGHTLY_NEEDS (a marker that must exist first), NIGHTLY_RECIPE (a conversion's
#: recipe digest), NIGHTLY_RECIPE_PARTS (the recipe as JSON, for the marker), NIGHTLY_BUILD_TIMEOUT_S
#: (the pod's deadline) and the command as argv.
#: One build per destination at a time, across pods and nodes: ``flock`` on ``.<leaf>.lock`` beside it
#: on the PVC, as :class:`pipelines.storage.cache.AssetCache` does locally; a pod that waited finds the
#: marker and reuses. Under the lock every ``.<leaf>.partial-*`` is a killed build's leftover and is
#: removed; where the volume cannot lock, only those older than the build timeout (no pod lives longer).
#: It reports ``nightly: reused|built files=N bytes=M [identity=X]``, and before it replaces a
#: complete entry ``nightly: replacing {source, identity, recipe}`` of the marker it found. ``identity`` and ``model_id`` are
#: :func:`pipelines.core.recipe.identity` and :func:`~pipelines.core.recipe.model_identity`.
BUILD_SCRIPT = f"""\
import fcntl, hashlib, json, os, shutil, subprocess, sys, time
dest, tmp = os.environ["NIGHTLY_DEST"], os.environ["NIGHTLY_TMP"]
parent, leaf = os.path.split(dest)
marker = os.path.join(dest, {MARKER!r})
needs, recipe = os.environ.get("NIGHTLY_NEEDS", ""), os.environ.get("NIGHTLY_RECIPE", "")
try:
    parts = json.loads(os.environ.get("NIGHTLY_RECIPE_PARTS", ""))
except ValueError:
    parts = None
def read(path):
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
def model_id(m):
    if not m:
        return ""
    man = m.get("manifest")
    if isinstance(man, dict) and man.get("digest"):
        return "files:" + man["digest"]
    return "built:%s|%s|%s" % (m.get("key", ""), m.get("source", ""), m.get("built_at", ""))
def identity():
    if not recipe:
        return ""
    return hashlib.sha256((recipe + "\\0" + model_id(read(needs))).encode()).hexdigest()
def current(path):
    m = read(path)
    if m is None or m.get("source", "") != os.environ.get("NIGHTLY_SOURCE", ""):
        return False
    return not recipe or m.get("identity") == identity()
def report(word, path):
    files = size = 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            if n != {MARKER!r}:
                files += 1
                size += os.path.getsize(os.path.join(root, n))
    print("nightly: " + word, "files=%d" % files, "bytes=%d" % size,
          *(["identity=" + identity()] if recipe else []), flush=True)
if current(marker):
    report("reused", dest)
    sys.exit(0)
def take_lock():
    path = os.path.join(parent, "." + leaf + ".lock")
    try:
        fh = open(path, "a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("nightly: waiting for another build of", os.environ.get("NIGHTLY_KEY", ""), "(it holds", path + ")",
                  flush=True)
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        return fh
    except OSError as exc:
        print("nightly: cannot lock", path, "(%s): building without a lock; two pods may build this input at once"
              % exc, flush=True)
        return None
if needs and not os.path.isfile(needs):
    print("nightly: input missing:", os.path.dirname(needs), "(build it first)", flush=True)
    sys.exit({MISSING_INPUT_EXIT})
os.makedirs(parent, exist_ok=True)
lock = take_lock()
if current(marker):
    report("reused", dest)
    sys.exit(0)
limit = float(os.environ.get("NIGHTLY_BUILD_TIMEOUT_S", "") or 0)
for name in sorted(os.listdir(parent)):
    old_tmp = os.path.join(parent, name)
    if not name.startswith("." + leaf + ".partial-") or old_tmp == tmp:
        continue
    if lock is not None or (limit and time.time() - os.path.getmtime(old_tmp) > limit):
        shutil.rmtree(old_tmp, ignore_errors=True)
        print("nightly: removed a half-built folder an earlier build left:", old_tmp, flush=True)
shutil.rmtree(tmp, ignore_errors=True)
print("nightly: building", os.environ.get("NIGHTLY_KEY", ""),
      "(its marker is from another source or conversion identity)" if os.path.isfile(marker) else "", flush=True)
old = read(marker)
if old is not None:
    print("nightly: replacing", json.dumps({{k: old.get(k) for k in ("source", "identity", "recipe")}}), flush=True)
rc = subprocess.call(sys.argv[1:], stdin=subprocess.DEVNULL)
if rc != 0:
    shutil.rmtree(tmp, ignore_errors=True)
    print("nightly: command exited", rc, flush=True)
    sys.exit(rc if 0 < rc < 256 else 1)
if not os.path.isdir(tmp):
    print("nightly: the command exited 0 but wrote nothing to", tmp, flush=True)
    sys.exit(1)
done = {{"key": os.environ.get("NIGHTLY_KEY", ""), "source": os.environ.get("NIGHTLY_SOURCE", ""),
        "built_at": time.time()}}
if recipe:
    whole = isinstance(parts, dict) and parts.get("digest") == recipe
    done.update(identity=identity(), recipe=parts if whole else {{"digest": recipe}})
with open(os.path.join(tmp, {MARKER!r}), "w") as fh:
    json.dump(done, fh)
if current(marker):
    shutil.rmtree(tmp, ignore_errors=True)
    report("reused", dest)
    sys.exit(0)
shutil.rmtree(dest, ignore_errors=True)
os.rename(tmp, dest)
report("built", dest)
"""

_STATS = re.compile(r"^nightly: (reused|built) files=(\d+) bytes=(\d+)(?: identity=([0-9a-f]+))?\s*$")
REPLACING = "nightly: replacing "
#: a recipe longer than this as JSON (a converter importing thousands of modules) is passed as its
#: digest only: the pod's environment stays small, and its marker then cannot say which part changed
MAX_RECIPE_PARTS = 64 * 1024
_NAME_BAD = re.compile(r"[^a-z0-9-]+")


def on_pvc(container_path: str) -> str:
    """The path of a cached asset inside a build pod (``/root/models/x`` -> ``/nightly-cache/models/x``)."""
    try:
        return f"{BUILD_MOUNT}/{cache_subpath(container_path)}"
    except ValueError as exc:
        raise BuildError(str(exc)) from None


def build_pod_name(req: Requirement, nonce: str, attempt: int) -> str:
    stem = _NAME_BAD.sub("-", req.key.lower()).strip("-")[:30].strip("-") or "input"
    digest = hashlib.sha256(f"{req.kind}\0{req.key}\0{nonce}".encode()).hexdigest()[:8]
    return f"nb-{req.kind[:5]}-{stem}-{digest}-a{attempt}"


class ClusterBuilder:
    """Builds one requirement per pod into the deployment's cache PVC (see the module docstring)."""

    def __init__(self, core_v1_api: client.CoreV1Api, deployment: DeploymentSpec, pool: PoolSpec | None = None,
                 *, timeout_s: int | None = None, workdir: str = "", retries: int | None = None, run_id: str = "",
                 digest: str = "", owner: dict[str, Any] | None = None, **launcher_kwargs: Any):
        if not deployment.cache_pvc:
            raise BuildError(f"deployment {deployment.name}: no cache_pvc; set deployments.{deployment.name}.cache_pvc "
                             "in assets/cluster.yaml to the PVC the test pods mount")
        if pool is None:
            if not deployment.pools:
                raise BuildError(f"deployment {deployment.name}: no pools to build on; add one in assets/cluster.yaml")
            pool = max(deployment.pools, key=lambda p: p.gpus_per_node)
        self.deployment, self.pool = deployment, pool
        # None: the deployment's ``cache: build_timeout_s``, so a dry run prints what a night runs
        self.timeout_s = deployment.build_timeout_s if timeout_s is None else timeout_s
        self.workdir = workdir
        self.run_id, self.owner = run_id, owner
        self.image, self.digest = pinned_image(pool, digest)
        self.retries = deployment.max_infra_retries if retries is None else retries
        self.pods = KubernetesLauncher(core_v1_api, deployment, [pool], retries=0, workdir=workdir, pin_nodes=False,
                                       **launcher_kwargs)

    # -- what runs ---------------------------------------------------------------------
    def command(self, req: Requirement, tmp: str, conversion: ConversionSpec | None,
                models: Mapping[str, Requirement], repo: Path | None = None,
                env: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str], int]:
        """(argv, extra environment, GPUs) of the build of ``req`` writing into ``tmp``; a conversion's
        recipe digest is read from ``repo``, the checkout the image carries (see the module docstring)."""
        if req.kind in ("model", "dataset"):
            return ["hf", "download", req.source, *download_args(req), "--local-dir", tmp], {}, 0
        if conversion is None:
            raise BuildError(f"conversion {req.key}: no conversion command is declared in assets/checkpoints.yaml")
        if not req.depends_on or req.depends_on[0] not in models:
            raise BuildError(f"conversion {req.key}: its model {req.depends_on!r} is not a known requirement")
        model = models[req.depends_on[0]]
        params = dict(req.params)
        try:
            gpus = int(params.get("num_gpus_per_node", "1"))
        except ValueError:
            raise BuildError(f"conversion {req.key}: num_gpus_per_node {params['num_gpus_per_node']!r} is not a number") from None
        if gpus > self.pool.gpus_per_node:
            raise BuildError(f"conversion {req.key}: needs {gpus} GPUs but pool {self.pool.name} has "
                             f"{self.pool.gpus_per_node} per node; lower num_gpus_per_node or add a larger pool")
        if repo is None:
            raise BuildError(f"conversion {req.key}: no checkout to read what the conversion runs from; "
                             "pass the repo the catalog reads (its converter decides whether the cache is current)")
        recipe = conversion_recipe(conversion, req, repo, dict(env or {}), image=self.digest)
        argv, extra = conversion_command(conversion, req, "python3", on_pvc(model.path), tmp)
        extra["NIGHTLY_NEEDS"] = f"{on_pvc(model.path)}/{MARKER}"
        extra["NIGHTLY_RECIPE"] = recipe.digest
        parts = json.dumps(recipe.as_json(), sort_keys=True)
        if len(parts) <= MAX_RECIPE_PARTS:
            extra["NIGHTLY_RECIPE_PARTS"] = parts
        return argv, extra, gpus

    def pod(self, req: Requirement, name: str, argv: list[str], env: Mapping[str, str], gpus: int,
            avoid: tuple[str, ...] = ()) -> dict[str, Any]:
        """The build pod body (apiVersion v1, kind Pod)."""
        plain = {k: v for k, v in env.items() if k not in SECRET_ENV}
        container: dict[str, Any] = {
            "name": BUILD_CONTAINER,
            "image": self.image,
            "imagePullPolicy": pull_policy(self.image),
            "command": ["python3", "-c", BUILD_SCRIPT, *argv],
            "env": [{"name": k, "value": str(v)} for k, v in sorted(plain.items())] + (
                hf_token_env(self.deployment) if req.kind in ("model", "dataset") else []),
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                             {"name": CACHE_VOLUME, "mountPath": BUILD_MOUNT},
                             *cache_mounts(read_only=False)],
        }
        if self.workdir:
            container["workingDir"] = self.workdir
        container["resources"] = pod_resources(self.pool, gpus)
        if gpus == 0:
            container["env"].append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"})
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": int(self.timeout_s),
            "terminationGracePeriodSeconds": 30,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [container],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": self.pool.shm_size}},
                        {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": self.deployment.cache_pvc}}],
        }
        if gpus > 0:  # as in test pods: a broken node (CUDA Error 802) is an infra outcome, retried elsewhere
            spec["initContainers"] = [preflight_container(self.image, container["imagePullPolicy"], gpus,
                                                          container["resources"], needs_wrapper=False)]
        if self.pool.node_selector:
            spec["nodeSelector"] = dict(self.pool.node_selector)
        if self.pool.tolerations:
            spec["tolerations"] = [dict(t) for t in self.pool.tolerations]
        if self.pool.priority_class:
            spec["priorityClassName"] = self.pool.priority_class
        affinity = node_affinity(avoid)
        if affinity:
            spec["affinity"] = affinity
        labels = {"app.kubernetes.io/name": "nightly-e2e-build", MANAGED_BY[0]: MANAGED_BY[1],
                  f"{LABEL_PREFIX}/requirement": label_value(req.key), f"{LABEL_PREFIX}/kind": req.kind}
        if self.run_id:  # the sweeper deletes build pods of dead runs too
            labels[f"{LABEL_PREFIX}/run-id"] = label_value(self.run_id)
        if self.pool.queue:
            labels["kueue.x-k8s.io/queue-name"] = self.pool.queue
        annotations = {f"{LABEL_PREFIX}/requirement-key": req.key, f"{LABEL_PREFIX}/path": req.path,
                       LAUNCHED_BY: launched_by()}
        metadata: dict[str, Any] = {"name": name, "namespace": self.deployment.namespace, "labels": labels,
                                    "annotations": annotations}
        if self.owner:
            metadata["ownerReferences"] = [dict(self.owner)]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    def prepared(self, req: Requirement, models: Mapping[str, Requirement], conversion: ConversionSpec | None,
                 env: Mapping[str, str], nonce: str, repo: Path | None = None) -> tuple[list[str], dict[str, str], int]:
        """(argv, pod environment, GPUs) of the build of ``req``, its temporary folder named by ``nonce``."""
        dest = on_pvc(req.path)
        parent, leaf = PurePosixPath(dest).parent, PurePosixPath(dest).name
        tmp = f"{parent}/.{leaf}.partial-{nonce}"
        argv, extra, gpus = self.command(req, tmp, conversion, models, repo, env)
        pod_env = {**env, **extra, "NIGHTLY_DEST": dest, "NIGHTLY_TMP": tmp, "NIGHTLY_KEY": req.key,
                   "NIGHTLY_SOURCE": built_from(req), "NIGHTLY_BUILD_TIMEOUT_S": str(int(self.timeout_s)),
                   "PYTHONUNBUFFERED": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
        if req.kind in ("model", "dataset"):
            endpoint = env.get("HF_ENDPOINT") or os.environ.get("HF_ENDPOINT", "")
            if endpoint:
                pod_env["HF_ENDPOINT"] = endpoint
        return argv, pod_env, gpus

    # -- running it --------------------------------------------------------------------
    def build(self, req: Requirement, models: Mapping[str, Requirement], conversion: ConversionSpec | None,
              env: Mapping[str, str], *, repo: Path | None = None, log_path: Path | None = None) -> Built:
        """Build ``req`` into the PVC unless a current marker is there; one pod (per infra retry)."""
        nonce = uuid.uuid4().hex[:12]
        argv, pod_env, gpus = self.prepared(req, models, conversion, env, nonce, repo)
        t0 = time.monotonic()
        failed: list[str] = []
        for attempt in range(1, self.retries + 2):
            body = self.pod(req, build_pod_name(req, nonce, attempt), argv, pod_env, gpus, tuple(failed))
            lines: list[str] = []
            log = _log_file(log_path, attempt)
            try:
                log.write(f"# nightly: {req.kind} {req.key} -> {req.path} pod {self.deployment.namespace}/"
                          f"{body['metadata']['name']} attempt {attempt}\n")
                run = self.pods.run_pod(body, log, lines.append, container=BUILD_CONTAINER)
            finally:
                log.close()
            v = run.verdict
            if v.outcome == "passed":
                return _built(req, lines, time.monotonic() - t0, _recipe_of(pod_env))
            if not (v.outcome == "infra_error" and v.retriable_infra and attempt <= self.retries):
                tail = "\n".join(lines[-15:])
                raise BuildError(f"{req.kind} {req.key}: build pod {run.name} ended {v.outcome}"
                                 f"{'/' + v.reason if v.reason else ''} on {v.node or 'no node'}: {run.message}"
                                 + (f"\nlog tail:\n{tail}" if tail else ""))
            if v.node:
                failed.append(v.node)
        raise AssertionError("unreachable")  # pragma: no cover


def _log_file(log_path: Path | None, attempt: int):
    if log_path is None:
        return io.StringIO()
    path = log_path if attempt == 1 else log_path.with_name(f"{log_path.stem}.attempt{attempt}{log_path.suffix}")
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "w", encoding="utf-8")


def _recipe_of(pod_env: Mapping[str, str]) -> Recipe | None:
    """The recipe a conversion pod was given (None: a download, or one passed as its digest only)."""
    try:
        data = json.loads(pod_env.get("NIGHTLY_RECIPE_PARTS", ""))
        return Recipe(tuple(data["argv"]), tuple(sorted(data["env"].items())), data["files"], data["image"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _built(req: Requirement, lines: list[str], seconds: float, recipe: Recipe | None = None) -> Built:
    """The pod's own report: ``nightly: reused|built files=N bytes=M [identity=X]`` (the last such
    line), and when it replaced an entry, why (the marker it found, as the local cache says it)."""
    for line in reversed(lines):
        m = _STATS.match(line.strip())
        if m:
            reused = m.group(1) == "reused"
            want = m.group(4) or ""
            rebuilt = "" if reused else _why_rebuilt(req, lines, want, recipe)
            return Built(req.key, Path(req.path), reused, 0.0 if reused else round(seconds, 3),
                         int(m.group(2)), int(m.group(3)), rebuilt=rebuilt, identity=want)
    raise BuildError(f"{req.kind} {req.key}: the build pod succeeded but never reported '{BUILT}' or '{REUSED}'; "
                     "check that the pool image runs python3 and that the log reached the API")


def _why_rebuilt(req: Requirement, lines: list[str], want: str, recipe: Recipe | None) -> str:
    """Why the pod replaced the complete entry it found ("" when there was none)."""
    for line in reversed(lines):
        if line.strip().startswith(REPLACING):
            try:
                old = json.loads(line.strip()[len(REPLACING):])
            except ValueError:
                old = None
            if not isinstance(old, dict):
                return "its marker is from another source or conversion identity"
            return stale_reason(old, req, want, recipe) or "its marker is from another source or conversion identity"
    return ""


def builder_from_deployment(deployment: DeploymentSpec, *, kubeconfig: str | None = None,
                            context: str | None = None, **kwargs: Any) -> ClusterBuilder:
    """A builder with credentials from the pod (in cluster) or the kubeconfig, like the launcher."""
    from pipelines.launch.kubernetes.connect import launcher_from_deployment

    launcher = launcher_from_deployment(deployment, kubeconfig=kubeconfig, context=context)
    kwargs.setdefault("owner", launcher.owner)
    return ClusterBuilder(launcher.api, deployment, **kwargs)
