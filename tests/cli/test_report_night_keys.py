"""``nightly report`` without ``--night`` reports the newest night by night id, whatever else sits in
``nights/``: a copy saved there under another name, a hand-made file, or a newest record that cannot be
read. The same on a local state folder and on an S3 deployment's store (a moto server)."""

from __future__ import annotations

import json
import shutil

import pytest

from pipelines.cli import main
from tests.reporting.nights import example_night, write_home
from tests.support.assets import example_assets
from tests.support.moto import CREDENTIALS, moto_server, s3_client

pytestmark = pytest.mark.slow

FIRST, NEWEST = "2026-11-01T150000Z", "2026-11-06T150000Z"
BUCKET, PREFIX = "night-keys", "team-a/nightly/state/"


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """The example's six nights as `nightly run` leaves them in a state folder."""
    return write_home(example_night(tmp_path_factory.mktemp("home")))


@pytest.fixture(scope="module")
def endpoint():
    with moto_server() as url:
        yield url


def junk(nights) -> dict[str, str]:
    """Keys a bucket (or folder) of nights/ gathers besides the records nightly writes."""
    return {"nights/backup-of-first-night.json": (nights / "nights" / f"{FIRST}.json").read_text(),
            "nights/garbage.json": "{not json",
            "nights/2026-11-07T000000Z-deadbeef.json": "{not json"}  # a newest night that cannot be read


def local_state(nights, tmp_path, monkeypatch, endpoint) -> tuple:
    home = tmp_path / "home"
    shutil.copytree(nights, home)
    for key, text in junk(nights).items():
        (home / key).write_text(text)
    return home, str(home / "nights")


def s3_state(nights, tmp_path, monkeypatch, endpoint) -> tuple:
    """A deployment ``s3local`` whose state is in the bucket: the nights and the junk uploaded there."""
    assets = example_assets(tmp_path / "assets")
    cluster = assets / "cluster.yaml"
    cluster.write_text(cluster.read_text().replace("deployments:\n", (
        "deployments:\n"
        "  s3local:\n"
        "    launcher: local\n"
        "    storage: s3\n"
        f"    s3_bucket: {BUCKET}\n"
        "    s3_prefix: team-a/nightly\n"
        "    skip_hardware: [mi300]\n"
        "    pools:\n"
        "      h200: {nodes: 1, gpus_per_node: 8}\n"), 1))
    for k, v in {**CREDENTIALS, "NIGHTLY_S3_ENDPOINT": endpoint, "NIGHTLY_DEPLOYMENT": "s3local",
                 "NIGHTLY_ASSETS_DIR": str(assets)}.items():
        monkeypatch.setenv(k, v)
    s3 = s3_client(endpoint)
    s3.create_bucket(Bucket=BUCKET)
    texts = {f"nights/{p.name}": p.read_text() for p in (nights / "nights").glob("*.json")}
    for key, text in {**texts, **junk(nights)}.items():
        s3.put_object(Bucket=BUCKET, Key=PREFIX + key, Body=text.encode())
    return tmp_path / "home", f"s3://{BUCKET}/{PREFIX}nights"


@pytest.mark.parametrize("state", [local_state, s3_state], ids=["local", "s3"])
def test_the_newest_night_is_reported_whatever_else_nights_holds(nights, tmp_path, monkeypatch, capsys, endpoint, state):
    home, where = state(nights, tmp_path, monkeypatch, endpoint)
    code = main(["report", "--home", str(home), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["night"] == NEWEST, err
    for key in ("backup-of-first-night.json", "garbage.json"):  # no night's name: never a night
        assert f"{where}/{key}: left out: not a night's record" in err, err
    # a night's name, but no record: passed over, named, as a damaged earlier night is
    (said,) = [line for line in err.splitlines() if f"{where}/2026-11-07T000000Z-deadbeef.json:1: summary: not valid JSON" in line]
    assert "; left out: " in said, err
    # the page written is the newest night's, not the first's again
    assert main(["report", "--home", str(home)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(f"reports/{NEWEST}.html")
