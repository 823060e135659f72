"""Every command that reads an S3 deployment's state answers a refused request with one line that
says what to do (exit 2), never a botocore traceback: a missing bucket, refused credentials, an
endpoint that does not answer."""

from __future__ import annotations

import pytest

from pipelines.cli import main
from tests.support.assets import example_assets
from tests.support.moto import CREDENTIALS, Refuse, moto_server

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
    assert main(["report", "--home", str(tmp_path / "home")]) == 5  # no answer: a job retries on 5 (a wrong setting, e.g. a missing bucket, is 2)
    err = capsys.readouterr().err
    assert "Could not connect to the endpoint" in err and "NIGHTLY_S3_ENDPOINT" in err and "Traceback" not in err, err


class Expiry:
    """The credentials "expire" at the night's first log upload: it and every request after are refused."""

    def __init__(self):
        self.expired = False

    def __call__(self, operation: str, key: str) -> bool:
        self.expired = self.expired or (operation == "PutObject" and "/state/logs/" in key)
        return self.expired


def test_a_store_that_refuses_writes_mid_night_keeps_the_results_in_home_and_says_how_to_re_add_them(
        endpoint, tmp_path, monkeypatch, capsys):
    import json
    import shlex

    from pipelines.storage import s3
    from tests.support.moto import s3_client

    client = s3_client(endpoint)
    client.create_bucket(Bucket="refusing")
    use(monkeypatch, s3_assets(tmp_path / "assets", "refusing"), endpoint)
    make_client = s3.make_client
    expiry = Expiry()
    Refuse(expiry, "InvalidAccessKeyId").install(monkeypatch)
    home = tmp_path / "home"
    assert main(["run", "--home", str(home), "--labels", "short"]) == 4
    out, err = capsys.readouterr()
    assert expiry.expired
    assert "Traceback" not in err and "STEP_FAILURE" not in err and "RUN_FAILURE" not in err, err
    (folder,) = (home / "unsaved").iterdir()
    said = err[err.index("nightly run: error: "):]
    assert said.startswith(f"nightly run: error: 2 result(s) of night {folder.name} and its record were not stored: "
                           "the store refused writes (") and "InvalidAccessKeyId" in said, said
    assert said.rstrip("\n").removeprefix("nightly run: error: ") == (folder / "README.txt").read_text().rstrip("\n")
    assert not client.list_objects_v2(Bucket="refusing", Prefix="team-a/nightly/history/").get("KeyCount")
    (record,) = (folder / "state" / "runs").iterdir()
    attempts = json.loads(record.read_text())["attempts"]
    assert len(attempts) == 2 and all(a["log_uri"].startswith("s3://refusing/team-a/nightly/state/logs/") for a in attempts)
    # each kept sample names its log where the re-add puts it, as the kept record does, not the run's own folder
    sources = {(s["test_id"], s["attempt"]): s["source"] for s in map(json.loads, (folder / "history.jsonl").open())}
    assert sources == {(a["test_id"], a["attempt"]): a["log_uri"] for a in attempts}, sources
    # the credentials renewed: the command it printed puts everything back
    monkeypatch.setattr(s3, "make_client", make_client)  # new clients, without the hook
    readd = said.splitlines()[-1].strip()
    assert readd == f"nightly readd --deployment s3local --home {home} {folder}"
    assert main(shlex.split(readd)[1:]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "readd: 2 samples (2 new, 0 already stored), 4 files of the night's state",
        f"readd: nights/latest.json is night {folder.name}'s record"]
    state = "team-a/nightly/state/"
    whole = json.loads(record.read_text())
    assert whole["status"] == "finished"
    # latest.json held the partial record the night wrote before the store refused: now the whole one
    assert json.loads(client.get_object(Bucket="refusing", Key=f"{state}nights/latest.json")["Body"].read()) == whole
    assert json.loads(client.get_object(Bucket="refusing", Key=f"{state}nights/{folder.name}.json")["Body"].read()) == whole
    for uri in sources.values():  # each sample's source is there now
        assert client.get_object(Bucket="refusing", Key=uri.removeprefix("s3://refusing/"))["ContentLength"] > 0
    assert main(shlex.split(readd)[1:]) == 0  # twice is harmless
    assert "(0 new, 2 already stored)" in capsys.readouterr().out
    assert main(["report", "--home", str(home), "--night", record.stem, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["night"] == folder.name


def test_a_re_added_night_leaves_latest_json_to_a_night_that_started_after_it(endpoint, tmp_path, monkeypatch, capsys):
    """The re-add may come days later: the nights run since are newer, and latest.json stays theirs."""
    import json
    import shlex

    from pipelines.storage import s3
    from tests.support.moto import s3_client

    client = s3_client(endpoint)
    client.create_bucket(Bucket="refused-then-newer")
    use(monkeypatch, s3_assets(tmp_path / "assets", "refused-then-newer"), endpoint)
    make_client = s3.make_client
    Refuse(Expiry(), "InvalidAccessKeyId").install(monkeypatch)
    home = tmp_path / "home"
    assert main(["run", "--home", str(home), "--labels", "short"]) == 4
    readd = capsys.readouterr().err.rstrip("\n").splitlines()[-1].strip()
    (folder,) = (home / "unsaved").iterdir()
    monkeypatch.setattr(s3, "make_client", make_client)
    assert main(["run", "--home", str(home), "--labels", "short"]) == 0  # the next night, the store answering
    capsys.readouterr()
    key = "team-a/nightly/state/nights/latest.json"
    newer = json.loads(client.get_object(Bucket="refused-then-newer", Key=key)["Body"].read())
    assert newer["night"] > folder.name and newer["status"] == "finished"
    assert main(shlex.split(readd)[1:]) == 0
    assert "readd: nights/latest.json left as it is: it holds a night that started later" in capsys.readouterr().out
    assert json.loads(client.get_object(Bucket="refused-then-newer", Key=key)["Body"].read()) == newer
    assert client.get_object(Bucket="refused-then-newer", Key=f"team-a/nightly/state/nights/{folder.name}.json")


def _failing_night(endpoint, tmp_path, monkeypatch, bucket: str, refuse: Refuse) -> list[str]:
    """A night whose two tests fail (so calibration proposes nothing and a stale patch is removed),
    with an earlier night's patch in the store; returns ``nightly run``'s exit code, stdout, stderr."""
    from tests.support.moto import s3_client

    client = s3_client(endpoint)
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="team-a/nightly/state/calibration/minirl/est_time.patch", Body=b"--- a/x\n")
    use(monkeypatch, s3_assets(tmp_path / "assets", bucket), endpoint)
    refuse.install(monkeypatch)
    return main(["run", "--home", str(tmp_path / "home"), "--labels", "short",
                 "--env", "MINIRL_FAIL=test_sft_math,test_fsdp_sft_chat"])


def test_without_delete_permission_the_calibration_still_writes_evidence_and_estimates(endpoint, tmp_path, monkeypatch,
                                                                                      capsys):
    """The documented policy without s3:DeleteObject: the stale patch stays, with a warning."""
    refuse = Refuse(lambda op, key: op in ("DeleteObject", "DeleteObjects"))
    assert _failing_night(endpoint, tmp_path, monkeypatch, "no-delete", refuse) == 1
    out, err = capsys.readouterr()
    assert refuse.count and "calibration: failed" not in out, out
    assert "stale est_time patch not removed: s3://no-delete/team-a/nightly/state/calibration/minirl/est_time.patch: " \
           "cannot be deleted (AccessDenied" in err, err
    assert "evidence: s3://no-delete/team-a/nightly/state/calibration/minirl/evidence.csv\n" in out
    assert "estimates: s3://no-delete/team-a/nightly/state/estimates/minirl.json\n" in out
    assert "report: s3://no-delete/team-a/nightly/state/reports/" in out


def test_a_calibration_that_fails_prints_no_paths_it_did_not_write(endpoint, tmp_path, monkeypatch, capsys):
    refuse = Refuse(lambda op, key: op == "PutObject" and "/state/calibration/" in key)
    assert _failing_night(endpoint, tmp_path, monkeypatch, "no-calibration", refuse) == 1
    out, err = capsys.readouterr()
    assert "evidence:" not in out and "estimates:" not in out and "report:" not in out, out
    assert "calibration: failed (Dagster run " in out and "no report, evidence, patch or estimates were written" in out


def _night_with_an_s3_log(s3, bucket: str) -> str:
    """A night in ``bucket`` whose failed test's log is in S3; returns that log's URI."""
    import json

    log = f"s3://{bucket}/team-a/nightly/state/logs/n1/tests%2Fe2e%2Ftest_a.py.attempt1.log"
    record = {"night": "2026-12-04T165637Z-r1", "run_id": "r1", "repo": "minirl", "cadence": "nightly",
              "selected": ["tests/e2e/test_a.py"],
              "attempts": [{"test_id": "tests/e2e/test_a.py", "outcome": "failed", "elapsed_s": 3.0, "node": "n0",
                            "started_at": "2026-12-04T16:57:00+00:00", "exit_code": 1, "log_uri": log}]}
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="team-a/nightly/state/nights/2026-12-04T165637Z-r1.json",
                  Body=json.dumps(record).encode())
    return log


def test_the_commands_printed_for_s3_objects_go_to_the_deployments_endpoint(endpoint, tmp_path, monkeypatch, capsys):
    """On MinIO or Ceph (NIGHTLY_S3_ENDPOINT), a pasted `aws s3 ...` without --endpoint-url would ask AWS."""
    import shlex

    from tests.support.moto import s3_client

    use(monkeypatch, s3_assets(tmp_path / "assets", "endpoint-cmds"), endpoint)
    s3 = s3_client(endpoint)
    log = _night_with_an_s3_log(s3, "endpoint-cmds")
    page = tmp_path / "page.html"
    assert main(["report", "--home", str(tmp_path / "home"), "--out", str(page)]) == 0, capsys.readouterr().err
    assert f"aws s3 cp --endpoint-url {shlex.quote(endpoint)} {log} -" in page.read_text()

    bad = "team-a/nightly/history/samples/2026-12-04/000000000000-r9-feed.jsonl"
    s3.put_object(Bucket="endpoint-cmds", Key=bad, Body=b'{"test_id": "t"\n')
    assert main(["report", "--home", str(tmp_path / "home"), "--out", str(page)]) != 0
    err = capsys.readouterr().err
    assert (f"`aws s3 mv --endpoint-url {shlex.quote(endpoint)} s3://endpoint-cmds/{bad} "
            f"s3://endpoint-cmds/team-a/nightly/quarantine/history/samples/2026-12-04/") in err, err
