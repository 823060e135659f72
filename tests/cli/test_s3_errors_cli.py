"""Every command that reads an S3 deployment's state answers a refused request with one line that
says what to do (exit 2), never a botocore traceback: a missing bucket, refused credentials, an
endpoint that does not answer."""

from __future__ import annotations

import pytest

from pipelines.cli import main
from tests.support.assets import example_assets
from tests.support.moto import CREDENTIALS, moto_server

pytestmark = pytest.mark.slow


def s3_assets(dest, bucket: str):
    """assets/ with a deployment ``s3local``: local launcher, state and history in ``bucket``."""
    assets = example_assets(dest)
    cluster = assets / "cluster.yaml"
    cluster.write_text(cluster.read_text().replace("deployments:\n", (
        "deployments:\n"
        "  s3local:\n"
        "    launcher: local\n"
        "    storage: s3\n"
        f"    s3_bucket: {bucket}\n"
        "    s3_prefix: team-a/nightly\n"
        "    skip_hardware: [mi300]\n"
        "    pools:\n"
        "      h200: {nodes: 1, gpus_per_node: 8}\n"), 1))
    return assets


def use(monkeypatch, assets, endpoint: str) -> None:
    for k, v in {**CREDENTIALS, "NIGHTLY_S3_ENDPOINT": endpoint, "NIGHTLY_DEPLOYMENT": "s3local",
                 "NIGHTLY_ASSETS_DIR": str(assets)}.items():
        monkeypatch.setenv(k, v)


@pytest.fixture(scope="module")
def endpoint():
    with moto_server() as url:
        yield url


@pytest.mark.parametrize("argv", [["report"], ["report", "--json"], ["quarantine", "list"]])
def test_a_missing_bucket_is_one_line_naming_it_and_how_to_create_it(endpoint, tmp_path, monkeypatch, capsys, argv):
    use(monkeypatch, s3_assets(tmp_path / "assets", "no-such-bucket-x"), endpoint)
    assert main([*argv, "--home", str(tmp_path / "home")]) == 2
    err = capsys.readouterr().err
    assert "s3://no-such-bucket-x/team-a/nightly/" in err and "NoSuchBucket" in err, err
    assert "`aws s3 mb s3://no-such-bucket-x`" in err and "Traceback" not in err


def test_refused_credentials_are_one_line_naming_the_credentials(tmp_path, monkeypatch, capsys):
    with moto_server(auth_after=0) as url:
        use(monkeypatch, s3_assets(tmp_path / "assets", "nightly-e2e-history"), url)
        assert main(["report", "--home", str(tmp_path / "home")]) == 2
    err = capsys.readouterr().err
    assert "InvalidAccessKeyId" in err and "AWS_ACCESS_KEY_ID" in err and "Traceback" not in err, err


def test_an_endpoint_that_does_not_answer_is_one_line_naming_the_setting(tmp_path, monkeypatch, capsys):
    from tests.support.moto import _free_port

    use(monkeypatch, s3_assets(tmp_path / "assets", "nightly-e2e-history"), f"http://127.0.0.1:{_free_port()}")
    assert main(["report", "--home", str(tmp_path / "home")]) == 2
    err = capsys.readouterr().err
    assert "Could not connect to the endpoint" in err and "NIGHTLY_S3_ENDPOINT" in err and "Traceback" not in err, err
