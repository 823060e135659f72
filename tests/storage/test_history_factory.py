"""The deployment's `storage` picks the history store: local file by default, S3 in production."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from pipelines.core.history import FileHistoryStore
from pipelines.core.model import CatalogError, Sample
from pipelines.core.specs import DeploymentSpec, load_specs
from pipelines.storage.history import history_store, s3_endpoint
from pipelines.storage.s3 import S3HistoryStore
from tests.conftest import PROJECT_ROOT
from tests.support.moto import CREDENTIALS, moto_server, s3_client


@pytest.fixture(scope="module")
def endpoint():
    with moto_server() as url:
        yield url


def deployment(**kw) -> DeploymentSpec:
    return DeploymentSpec(**{"name": "production", "launcher": "kubernetes", "pools": (), **kw})


def test_local_storage_is_the_sqlite_file_in_the_state_folder(tmp_path):
    store = history_store(deployment(storage="local"), tmp_path)
    assert isinstance(store, FileHistoryStore)
    assert store.path == tmp_path / "history.sqlite"


def test_the_shipped_deployments_choose_local_by_default_and_s3_in_production(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    specs = load_specs(PROJECT_ROOT / "assets")
    assert isinstance(history_store(specs.deployment("local"), tmp_path), FileHistoryStore)
    prod = history_store(specs.deployment("production"), tmp_path)
    assert isinstance(prod, S3HistoryStore)
    assert prod.bucket == specs.deployment("production").s3_bucket


@pytest.mark.slow  # a real S3 server (moto)
def test_s3_storage_writes_to_the_bucket_and_prefix_at_the_endpoint_from_the_environment(endpoint, tmp_path,
                                                                                         monkeypatch):
    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("NIGHTLY_S3_ENDPOINT", endpoint)
    bucket = f"hist-{uuid.uuid4().hex[:12]}"
    client = s3_client(endpoint)
    client.create_bucket(Bucket=bucket)
    store = history_store(deployment(storage="s3", s3_bucket=bucket, s3_prefix="ci/nightly"), tmp_path)
    one = Sample("tests/e2e/test_a.py", "h200", "a" * 64, "passed", 12.5, "2026-12-01T00:00:00+00:00", run_id="r1")
    store.append([one])
    assert store.read() == [one]
    (key,) = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert key.startswith("ci/nightly/history/samples/")
    assert not (tmp_path / "history.sqlite").exists()


def test_the_nightly_endpoint_setting_wins_over_the_aws_one():
    assert s3_endpoint({"AWS_ENDPOINT_URL": "http://aws:1", "NIGHTLY_S3_ENDPOINT": "http://minio:9000"}) == \
        "http://minio:9000"
    assert s3_endpoint({"AWS_ENDPOINT_URL": "http://aws:1", "NIGHTLY_S3_ENDPOINT": ""}) == "http://aws:1"
    assert s3_endpoint({}) is None


def test_an_unknown_storage_is_an_error_naming_the_file_the_key_and_the_choices(tmp_path):
    with pytest.raises(CatalogError) as exc:
        history_store(deployment(storage="gcs"), tmp_path)
    assert str(exc.value.problems[0]) == ("assets/cluster.yaml:1: deployments.production.storage: "
                                          "unknown storage 'gcs'; use one of local, s3")


def test_s3_storage_without_a_bucket_says_which_key_to_add(tmp_path):
    with pytest.raises(CatalogError) as exc:
        history_store(dataclasses.replace(deployment(storage="s3"), name="staging"), tmp_path)
    assert str(exc.value.problems[0]) == (
        "assets/cluster.yaml:1: deployments.staging.s3_bucket: storage is s3 but no bucket is named; "
        "add `s3_bucket: NAME` (an existing bucket) or use `storage: local`")
