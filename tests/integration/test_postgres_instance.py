"""Production mode: the Dagster instance on a real PostgreSQL server stores our materializations."""


import contextlib

import dagster as dg
import psycopg2
import pytest

from pipelines.definitions import build_definitions
from pipelines.defs.resources import NightlyResource
from pipelines.instance import POSTGRES_ENV, ensure_dagster_home
from tests.support.assets import example_assets
from tests.support.postgres import postgres_server

pytestmark = pytest.mark.slow


@pytest.fixture
def pg_url():
    with postgres_server() as url:
        yield url


def test_assets_materialize_into_postgres_storage(pg_url, tmp_path, monkeypatch, project_root):
    monkeypatch.setenv(POSTGRES_ENV, pg_url)
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))  # restored after the test
    monkeypatch.setenv("NIGHTLY_HOME", str(home))
    dagster_home = ensure_dagster_home(home)
    assert "postgres_url" in (dagster_home / "dagster.yaml").read_text()
    assets = example_assets(tmp_path / "assets")
    defs = build_definitions(nightly=NightlyResource(home=str(home), assets_dir=str(assets)))
    job = defs.resolve_job_def("tests")
    test_id = "tests/e2e/megatron/test_dp8_chat.py"
    with dg.DagsterInstance.get() as instance:
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        result = job.execute_in_process(instance=instance, partition_key=test_id)
        assert result.success
        (mat,) = [m for m in result.asset_materializations_for_node("test_runs")
                  if m.asset_key == dg.AssetKey("test_runs")]
        assert mat.metadata["outcome"].value == "passed" and mat.partition == test_id
    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute("select count(*) from event_logs where dagster_event_type = 'ASSET_MATERIALIZATION' and partition = %s",
                    (test_id,))
        assert cur.fetchone()[0] == 1


@pytest.mark.parametrize("where, said", [("closed port", "Connection refused"),
                                         ("no such database", 'database "nosuch" does not exist')])
def test_a_postgres_url_that_cannot_be_reached_is_one_line_without_the_password(where, said, tmp_path, monkeypatch,
                                                                                 capsys):
    from pipelines.cli import main
    from tests.support.moto import _free_port

    server = postgres_server() if where == "no such database" else \
        contextlib.nullcontext(f"postgresql://nightly@127.0.0.1:{_free_port()}/dagster")
    with server as base:
        url = base.replace("nightly@", "nightly:s3cret@").rsplit("/", 1)[0] + \
            ("/nosuch" if where == "no such database" else "/dagster")
        monkeypatch.setenv(POSTGRES_ENV, url)
        monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(example_assets(tmp_path / "assets")))
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))  # restored after the test
        assert main(["run", "--home", str(tmp_path / "home"), "--labels", "short"]) == 2
    err = capsys.readouterr().err
    assert f"{POSTGRES_ENV}: cannot connect to {url.split('@', 1)[1]} (OperationalError: " in err and said in err, err
    assert "check the server or unset it to use SQLite" in err
    assert "s3cret" not in err and "Traceback" not in err


def test_a_short_password_is_masked_where_it_stands_not_in_the_drivers_words(tmp_path, monkeypatch, capsys):
    """A password that is also a letter of the driver's text (``p``) was replaced everywhere:
    ``***ort 45999 failed``, garbled, and the stars gave the password away."""
    from pipelines.cli import main
    from tests.support.moto import _free_port

    port = _free_port()
    monkeypatch.setenv(POSTGRES_ENV, f"postgresql://u:p@127.0.0.1:{port}/dagster")
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(example_assets(tmp_path / "assets")))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))  # restored after the test
    assert main(["run", "--home", str(tmp_path / "home"), "--labels", "short"]) == 2
    err = capsys.readouterr().err
    assert f"port {port} failed" in err and "***" not in err, err
    assert "Connection refused" in err and "Traceback" not in err


def test_the_password_is_masked_in_a_scheme_refusal_and_nowhere_else(tmp_path, monkeypatch, capsys):
    from pipelines.cli import main

    monkeypatch.setenv(POSTGRES_ENV, "postgres://postgres:postgres@db.example:5432/postgres")
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(example_assets(tmp_path / "assets")))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))  # restored after the test
    assert main(["run", "--home", str(tmp_path / "home"), "--labels", "short"]) == 2
    err = capsys.readouterr().err
    assert "write postgresql://postgres:***@db.example:5432/postgres (or postgresql+psycopg2://)" in err, err


@pytest.mark.parametrize("scheme", ["postgres", "postgresql+psycopg"])
def test_a_postgres_url_in_a_scheme_dagster_cannot_read_is_refused_before_the_night_saying_what_to_write(
        scheme, pg_url, tmp_path, monkeypatch, capsys):
    """psycopg2 accepts ``postgres://`` and the server is up, but SQLAlchemy refuses the scheme halfway
    through the night; ``postgresql+psycopg://`` (psycopg 3) is not installed. Both are one line, exit 2."""
    from pipelines.cli import main

    url = pg_url.replace("postgresql://", f"{scheme}://", 1).replace("nightly@", "nightly:s3cret@")
    monkeypatch.setenv(POSTGRES_ENV, url)
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(example_assets(tmp_path / "assets")))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))  # restored after the test
    assert main(["run", "--home", str(tmp_path / "home"), "--labels", "short"]) == 2
    err = capsys.readouterr().err
    fixed = "postgresql://" + url.split("://", 1)[1].replace("s3cret", "***")
    assert f"{POSTGRES_ENV}: {scheme}:// is not read by Dagster's PostgreSQL storage; write {fixed}" in err, err
    assert "s3cret" not in err and "Traceback" not in err
