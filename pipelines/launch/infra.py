"""What a pool's tests run on, as it is right now: image digest, GPU driver / CUDA, pool spec.

A tag such as ``:nightly`` can move under the same name and a driver upgrade changes nothing in
``assets/``, so the infra-change sensor and every attempt's record use what is observed:
- image digest: the pool's ``image_digest_command`` (argv, e.g. ``crane digest IMAGE``) when
  given, else the pinned ``image_digest``; for the local launcher with neither, a digest of this
  machine's Python environment (interpreter + the distributions installed in its site-packages,
  whatever the working folder), which is the "image" local tests run in;
- driver: ``nvidia-smi`` when present (local), the GPU nodes' feature-discovery labels
  (Kubernetes), else the pool's declared ``driver``;
- spec: a digest of what a test sees on the pool's nodes (``SPEC_FIELDS``: hardware, image, selector,
  its /dev/shm and CPU/memory limits); where and when pods are scheduled (node count, queue,
  priority, tolerations) is left out, and so is any field a later version adds, so neither starts
  a full nightly run.
Probing never raises: what cannot be observed is reported empty with the reason in ``notes``;
where a probe that should answer failed (the digest command, nvidia-smi, the node API), the field
also carries ``<field>_problem``: its value is a fallback, not an observation, and the
infra-change sensor keeps the last observed value instead (an outage is not an infra change).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from importlib import metadata

from pipelines.core.specs import DeploymentSpec, PoolSpec
from pipelines.core.trends import INFRA_FIELDS as FIELDS

PROBE_TIMEOUT_S = 30
#: GPU feature discovery's node labels for the driver and CUDA versions
DRIVER_LABELS = ("nvidia.com/cuda.driver-version.full", "nvidia.com/cuda.driver.major")
CUDA_LABELS = ("nvidia.com/cuda.runtime-version.full", "nvidia.com/cuda.runtime.major")
NO_NVIDIA_SMI = "no nvidia-smi on this machine"


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


#: the pool fields that change what a test sees on its node (docs/ui.md lists them); changing this
#: list changes SPEC_FORM, so a value of the former form is taken as the new baseline, not a change
SPEC_FIELDS = ("hardware", "gpus_per_node", "image", "image_digest", "node_selector",
               # a test pod's /dev/shm size and its CPU and memory limits: a conversion or data loader
               # that fit before can fail after a cut
               "shm_size", "cpu_per_gpu", "memory_per_gpu")
SPEC_FORM = "node-v1"


def spec_digest(pool: PoolSpec) -> str:
    """``node-v1:<16 hex>``, a digest of the pool's ``SPEC_FIELDS``."""
    fields = {k: getattr(pool, k) for k in SPEC_FIELDS}
    return f"{SPEC_FORM}:{_sha(json.dumps(fields, sort_keys=True, default=str))[7:23]}"


def comparable(field: str, old: str, new: str) -> bool:
    """Whether two observed values of a field tell a change: spec digests of different forms (one
    stored before an upgrade changed what it covers, ``sha256:...`` before ``node-v1``) do not."""
    return field != "spec" or old.partition(":")[0] == new.partition(":")[0]


def site_dirs() -> list[str]:
    """Where this interpreter's installed distributions are: its site-packages (and dist-packages)
    folders, those on ``sys.path`` included (a Nix environment's), never the working folder or a
    checkout on ``PYTHONPATH``: a checkout's ``*.egg-info`` (``pip install -e .`` leaves one) is no
    installed package, and ``python -m`` puts the working folder on ``sys.path``."""
    dirs = [*getattr(site, "getsitepackages", list)(), *sysconfig.get_paths().values()]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    dirs += [p for p in sys.path if os.path.basename(os.path.normpath(p or ".")) in ("site-packages", "dist-packages")]
    return [d for d in dict.fromkeys(dirs) if os.path.basename(os.path.normpath(d)) in ("site-packages", "dist-packages")
            and os.path.isdir(d)]


def environment_digest() -> str:
    """This machine's Python environment: what a local test 'image' is (the interpreter and its
    installed distributions, each once by name and version), the same from any working folder."""
    dists = sorted({f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions(path=site_dirs())
                    if d.metadata["Name"]})
    return _sha("\n".join([sys.version, *dists]))


def _run(argv: list[str]) -> tuple[str, str]:
    """(stdout, problem) of a probe command; never raises."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "", f"{argv[0]}: {exc}"
    if out.returncode != 0:
        return "", f"{' '.join(argv[:3])}: exit {out.returncode}: {out.stderr.strip()[-200:]}"
    return out.stdout.strip(), ""


def local_driver() -> tuple[str, str]:
    """(driver/cuda, problem) from nvidia-smi, or ("", why) where there is none."""
    if not shutil.which("nvidia-smi"):
        return "", NO_NVIDIA_SMI
    out, problem = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    driver = out.splitlines()[0].strip() if out else ""
    cuda_out, _ = _run(["nvidia-smi"])
    cuda = ""
    for word in cuda_out.replace("|", " ").split("CUDA Version:")[1:2]:
        cuda = word.split()[0]
    return (f"{driver}/{cuda}" if cuda else driver), problem


def kubernetes_driver(deployment: DeploymentSpec, pool: PoolSpec) -> tuple[str, str]:
    """The driver/CUDA labels of the pool's nodes (all nodes should agree; a mix is reported)."""
    try:
        from pipelines.launch.kubernetes import launcher_from_deployment

        api = launcher_from_deployment(deployment).api
        selector = ",".join(f"{k}={v}" for k, v in pool.node_selector.items()) or None
        nodes = api.list_node(label_selector=selector).items
    except Exception as exc:  # noqa: BLE001 - probing must not stop a sensor or a night
        return "", f"node labels unreadable: {exc}"
    seen = set()
    for n in nodes:
        labels = n.metadata.labels or {}
        drv = next((labels[k] for k in DRIVER_LABELS if labels.get(k)), "")
        cuda = next((labels[k] for k in CUDA_LABELS if labels.get(k)), "")
        if drv:
            seen.add(f"{drv}/{cuda}" if cuda else drv)
    if not seen:
        return "", "no node of the pool carries GPU feature-discovery driver labels"
    return ",".join(sorted(seen)), ("" if len(seen) == 1 else "nodes of the pool run different drivers")


def probe_pool(deployment: DeploymentSpec, pool: PoolSpec) -> dict[str, str]:
    """What the pool runs now: image, image_digest, driver, spec and notes (why something is empty)."""
    notes: list[str] = []
    failed: dict[str, str] = {}
    digest = ""
    if pool.image_digest_command:
        digest, problem = _run(list(pool.image_digest_command))
        digest = digest.splitlines()[0].strip() if digest else ""
        if problem or not digest:
            failed["image_digest"] = problem or f"{' '.join(pool.image_digest_command[:3])}: printed nothing"
            notes.append(f"image digest: {failed['image_digest']}")
    if not digest:
        digest = pool.image_digest
    if not digest and deployment.launcher == "local":
        digest = environment_digest()
    if deployment.launcher == "kubernetes":
        driver, problem = kubernetes_driver(deployment, pool)
    else:
        driver, problem = local_driver()
    if not driver:
        if problem and problem != NO_NVIDIA_SMI:  # no nvidia-smi: the declared driver is the answer, always
            failed["driver"] = problem
        driver = pool.driver
        if problem and not driver:
            notes.append(f"driver: {problem}")
    return {"image": pool.image or ("local python environment" if deployment.launcher == "local" else ""),
            "image_digest": digest, "driver": driver, "spec": spec_digest(pool), "notes": "; ".join(notes),
            **{f"{field}_problem": why for field, why in failed.items()}}


def probe(deployment: DeploymentSpec) -> dict[str, dict[str, str]]:
    """Every pool of the deployment, by pool name."""
    return {p.name: probe_pool(deployment, p) for p in deployment.pools}


def fingerprint(observed: dict[str, str]) -> str:
    """A short digest of all of a pool's observed values, in full: two states that differ only early in
    a long value (a mixed-driver pool, then the finished upgrade) must not share a run key."""
    return _sha(json.dumps([observed.get(f, "") for f in FIELDS]))[7:23]


def keep_last_observed(before: dict[str, dict[str, str]],
                       now: dict[str, dict[str, str]]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """``now`` with each field whose probe failed set to its value in ``before`` (the last observed
    one), or left out when nothing was observed yet (a first tick, a new pool), and those failures
    as ``"pool field: problem"``: a probe outage must not read as a change, then or later."""
    kept: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    for pool, cur in now.items():
        cur = dict(cur)
        for field in FIELDS:
            problem = cur.pop(f"{field}_problem", "")
            if problem:
                problems.append(f"{pool} {field}: {problem}")
                if field in before.get(pool, {}):
                    cur[field] = before[pool][field]
                else:  # the fallback (declared value, or nothing) was never observed
                    cur.pop(field, None)
        kept[pool] = cur
    return kept, problems


def changed_pools(before: dict[str, dict[str, str]], now: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    """Pools whose digest, driver or spec changed, with what changed (pools new to ``before`` are not
    changes, nor are fields ``before`` never observed: the first observation after a probe outage,
    nor a spec digest ``before`` holds in an earlier form: the first tick after an upgrade)."""
    out: dict[str, list[str]] = {}
    for pool, cur in now.items():
        old = before.get(pool)
        if not old:
            continue
        what = [f"{k} {old.get(k) or '?'} -> {cur.get(k) or '?'}" for k in FIELDS
                if k in old and k in cur and old[k] != cur[k] and comparable(k, old[k], cur[k])]
        if what:
            out[pool] = what
    return out
