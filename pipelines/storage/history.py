"""The one place that picks where history lives: the deployment's ``storage`` in assets/cluster.yaml."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from pipelines.core.calibrate.lineage import Lineage, Succession
from pipelines.core.history import FileHistoryStore, HistoryStore
from pipelines.core.model import CatalogError, Estimate, Problem, Test
from pipelines.core.specs import DeploymentSpec

log = logging.getLogger(__name__)

STORAGES = ("local", "s3")
#: checked in this order; the first one set wins (boto3 reads AWS_ENDPOINT_URL itself too)
ENDPOINT_ENV = ("NIGHTLY_S3_ENDPOINT", "AWS_ENDPOINT_URL")


def s3_endpoint(env: Mapping[str, str] | None = None) -> str | None:
    """The S3 endpoint to talk to (MinIO, a moto server, ...); None means AWS itself."""
    env = os.environ if env is None else env
    return next((env[k] for k in ENDPOINT_ENV if env.get(k)), None)


def _problem(deployment: DeploymentSpec, key: str, message: str) -> CatalogError:
    return CatalogError(Problem("assets/cluster.yaml", 1, f"deployments.{deployment.name}.{key}", message))


def history_store(deployment: DeploymentSpec, home: Path, env: Mapping[str, str] | None = None) -> HistoryStore:
    """``local``: ``<home>/history.sqlite``; ``s3``: ``s3://<s3_bucket>/<s3_prefix>history/``."""
    if deployment.storage == "local":
        return FileHistoryStore(Path(home) / "history.sqlite")
    if deployment.storage == "s3":
        if not deployment.s3_bucket:
            raise _problem(deployment, "s3_bucket", "storage is s3 but no bucket is named; "
                                                    "add `s3_bucket: NAME` (an existing bucket) or use `storage: local`")
        from pipelines.storage.s3 import S3HistoryStore  # boto3 only where S3 is used

        return S3HistoryStore(deployment.s3_bucket, deployment.s3_prefix, endpoint_url=s3_endpoint(env))
    raise _problem(deployment, "storage", f"unknown storage {deployment.storage!r}; "
                                          f"use one of {', '.join(STORAGES)}")


def successions(store: HistoryStore) -> list[Succession]:
    """The store's record of calibrate's est_time rewrites (lineage.py), local or S3; a store
    that keeps no such record (a stand-in) has none, and samples of rewritten files count as stale."""
    read = getattr(store, "successions", None)
    return list(read()) if read is not None else []


#: per history store of this process (by where it lives): the stamp its rewrites were read at, and
#: their lineage (see :func:`lineage`)
_lineages: dict[str, tuple[object, Lineage]] = {}
_lineages_lock = threading.Lock()


def lineage(store: HistoryStore) -> Lineage:
    """The lineage of the store's recorded rewrites (:func:`successions`), read again only when they may
    have changed.

    A long-running code server plans often (every sensor tick, every code-location load) and needs
    them whenever an estimates entry was made for an older digest of its test's file, which is so
    from any test edit until the next calibration; on S3 every read is a LIST and a GET per
    calibration ever recorded. So the lineage is kept per store in this process, with the store's
    ``successions_stamp()``: the keys under ``history/successions/`` on S3 (one LIST, no GET), the
    file's size and time locally (two ``stat``). A rewrite another process records (a night's
    calibration in its run worker, ``nightly calibrate --write``) changes the stamp, so the next
    plan sees it; :func:`record_successions` also drops this process's copy. A store without a
    stamp (a stand-in) is read every time."""
    stamp_of = getattr(store, "successions_stamp", None)
    if stamp_of is None:
        return Lineage.of(successions(store))
    key, stamp = f"{type(store).__name__}:{store!r}", stamp_of()
    with _lineages_lock:
        kept = _lineages.get(key)
    if kept is not None and kept[0] == stamp:
        return kept[1]
    found = Lineage.of(successions(store))
    with _lineages_lock:
        _lineages[key] = (stamp, found)
    return found


def record_successions(store: HistoryStore, items: Iterable[Succession]) -> str:
    """Record calibrate's rewrites; "" when done, else why the store cannot (a warning to print)."""
    items = list(items)
    add = getattr(store, "add_successions", None)
    if not items:
        return ""
    if add is None:
        return (f"{store!r}: this history store cannot record calibrate's rewrites; the samples of the "
                f"{len(items)} rewritten file(s) will count as stale next night. Use a local store (--store FILE) "
                "to keep them.")
    try:
        add(items)
    finally:
        with _lineages_lock:
            _lineages.pop(f"{type(store).__name__}:{store!r}", None)
    return ""


def recorded_patch(store: HistoryStore, repo: Path | str, tests: Sequence[Test],
                   estimates: Sequence[Estimate]) -> tuple[str | None, tuple[str, ...]]:
    """(the est_time patch of a night's calibration, or None when it would change no file; the
    files left alone, ``path: why`` each). The rewrites are recorded first so that applying the
    patch (``git apply``) keeps the patched tests' history current; a store that cannot record
    says so. None rather than a patch without hunks, which ``git apply`` refuses."""
    from pipelines.core.calibrate import plan_patch

    plan = plan_patch(repo, tests, estimates)
    warning = record_successions(store, plan.successions())
    if warning:
        log.warning("%s", warning)
    left_alone = tuple(f"{p}: {why}" for p, why in (*plan.skipped, *plan.unpatchable))
    return (plan.diff() if plan.patched else None), left_alone
