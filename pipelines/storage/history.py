"""The one place that picks where history lives: the deployment's ``storage`` in assets/cluster.yaml."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pipelines.core.history import FileHistoryStore, HistoryStore
from pipelines.core.model import CatalogError, Problem
from pipelines.core.specs import DeploymentSpec

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
