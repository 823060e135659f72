"""Production nights through an S3 outage: `nightly run` on the stand-in cluster with its state in a moto
server whose requests a hook refuses for a while (tests/support/moto.Refuse), as S3 answers during an
outage or after the credentials expired. What the night leaves in S3 must be what it would have left
without the outage once the store answers again.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from pipelines.cli import main
from tests.conftest import PROJECT_ROOT
from tests.launch.kubernetes import pods
from tests.launch.kubernetes.apiserver import StandInApiServer, Step
from tests.launch.kubernetes.kubelet import Kubelet
from tests.support.assets import example_assets
from tests.support.moto import CREDENTIALS, Refuse, moto_server, s3_client

pytestmark = pytest.mark.slow

EXAMPLE = PROJECT_ROOT / "examples" / "minirl"
LABEL = "short"  # two tests, both pass


def _kubeconfig(path, url: str) -> None:
    path.write_text(textwrap.dedent(f"""\
        apiVersion: v1
        kind: Config
        clusters: [{{name: stand-in, cluster: {{server: "{url}"}}}}]
        users: [{{name: nightly, user: {{token: stand-in-token}}}}]
        contexts: [{{name: stand-in, context: {{cluster: stand-in, user: nightly, namespace: nightly-e2e}}}}]
        current-context: stand-in
    """))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The stand-in cluster (its build pods really run, its test pods pass) and a moto server, shared by
    the tests here; each test uses its own bucket (``production``)."""
    tmp = tmp_path_factory.mktemp("outage")
    kubelet = Kubelet.create(tmp, EXAMPLE, EXAMPLE / "hub", {"hf-token": {"token": "hf_x"}})

    def script(pod, node):
        if pod["metadata"]["labels"]["app.kubernetes.io/name"] == "nightly-e2e-build":
            return kubelet.steps(pod, node)
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running()),
                Step(mutate=pods.terminated("Succeeded", 0, "Completed"), logs=("step 1 loss 0.5", "loss went down"))]

    with StandInApiServer(script=script) as server, moto_server() as s3_url:
        _kubeconfig(tmp / "kubeconfig", server.url)
        yield {"tmp": tmp, "s3_url": s3_url, "kubeconfig": tmp / "kubeconfig"}


@pytest.fixture
def production(cluster, tmp_path, monkeypatch):
    """``assets/`` whose ``production`` deployment keeps its state in a bucket of this test's own, and the
    environment a run pod has (credentials, endpoint, kubeconfig); returns (bucket, S3 client, home)."""
    bucket = f"outage-{tmp_path.name.lower().replace('_', '-')[-40:]}".rstrip("-")
    assets = example_assets(tmp_path / "assets")
    cluster_yaml = assets / "cluster.yaml"
    cluster_yaml.write_text(cluster_yaml.read_text().replace("s3_bucket: nightly-e2e-history", f"s3_bucket: {bucket}"))
    s3 = s3_client(cluster["s3_url"])
    s3.create_bucket(Bucket=bucket)
    for k, v in {**CREDENTIALS, "NIGHTLY_S3_ENDPOINT": cluster["s3_url"], "NIGHTLY_DEPLOYMENT": "production",
                 "NIGHTLY_ASSETS_DIR": str(assets), "KUBECONFIG": str(cluster["kubeconfig"])}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return bucket, s3, tmp_path / "home"


def _history(s3, bucket: str) -> list[dict]:
    rows = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="history/samples/"):
        for o in page.get("Contents", []):
            rows += [json.loads(line) for line in s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read().splitlines()]
    return rows


def _record(s3, bucket: str, key: str) -> dict:
    return json.loads(s3.get_object(Bucket=bucket, Key=f"state/{key}")["Body"].read())


class Outage:
    """S3 goes down at the night's first log upload and comes back after it refused the history write
    that follows (the first attempt's sample): every request in between is refused."""

    def __init__(self):
        self.state = "up"

    def __call__(self, operation: str, key: str) -> bool:
        if self.state == "up" and operation == "PutObject" and key.startswith("state/logs/"):
            self.state = "down"
        if self.state == "down" and operation == "PutObject" and key.startswith("history/samples/"):
            self.state = "back"
            return True
        return self.state == "down"


def test_after_an_outage_mid_night_every_sample_names_its_logs_copy_in_s3(production, monkeypatch, capsys):
    bucket, s3, home = production
    outage = Outage()
    Refuse(outage, "ServiceUnavailable").install(monkeypatch)
    assert main(["run", "--home", str(home), "--labels", LABEL]) == 0, capsys.readouterr().err
    assert outage.state == "back"  # the first attempt's log upload and sample were refused, then S3 answered
    (run,) = {s["run_id"] for s in _history(s3, bucket)}
    logs = {(a["test_id"], a["attempt"]): a["log_uri"] for a in _record(s3, bucket, f"runs/{run}.json")["attempts"]}
    sources = {(s["test_id"], s["attempt"]): s["source"] for s in _history(s3, bucket)}
    assert len(sources) == 2 and sources == logs, sources  # never the run pod's own folder, which goes with it
    for uri in sources.values():
        assert b"loss went down" in s3.get_object(Bucket=bucket, Key=uri.removeprefix(f"s3://{bucket}/"))["Body"].read()


@pytest.mark.parametrize("outage", ["no answer", "503"])
def test_a_store_that_does_not_answer_at_the_nights_start_is_its_own_exit_status_not_a_wrong_input(
        production, monkeypatch, capsys, outage):
    """Exit 2 is a wrong flag or input (README): a scheduler must not give up on an S3 outage as on a typo."""
    bucket, s3, home = production
    if outage == "no answer":
        from tests.support.moto import _free_port

        monkeypatch.setenv("NIGHTLY_S3_ENDPOINT", f"http://127.0.0.1:{_free_port()}")  # nothing listens there
    else:
        Refuse(lambda operation, key: True, "ServiceUnavailable").install(monkeypatch)
    assert main(["run", "--home", str(home), "--labels", LABEL]) == 5
    err = capsys.readouterr().err
    assert "the deployment's store did not answer (exit 5); no flag or input is wrong" in err, err
    assert ("Could not connect to the endpoint" if outage == "no answer" else "ServiceUnavailable") in err, err
    assert "Traceback" not in err
    assert not s3.list_objects_v2(Bucket=bucket).get("KeyCount")  # nothing ran


def test_a_store_that_refuses_the_night_at_its_start_is_still_a_wrong_setting(production, monkeypatch, capsys):
    bucket, s3, home = production
    s3.delete_bucket(Bucket=bucket)  # a bucket that does not exist: fix the setting, retrying will not help
    assert main(["run", "--home", str(home), "--labels", LABEL]) == 2
    assert "NoSuchBucket" in capsys.readouterr().err


def _re_add(line: str, s3, bucket: str) -> int:
    """One re-add command as its README prints it, run as a maintainer would (`aws s3 cp --recursive` as
    boto3 uploads, for a README that names it)."""
    import shlex
    from pathlib import Path

    argv = shlex.split(line)
    if argv[0] == "nightly":
        return main(argv[1:])
    assert argv[:4] == ["aws", "s3", "cp", "--recursive"], line
    source, target = Path(argv[4]), argv[5].removeprefix(f"s3://{bucket}/")
    for f in source.rglob("*"):
        if f.is_file():
            s3.upload_file(str(f), bucket, f"{target}{f.relative_to(source)}")
    return 0


class ToTheEnd:
    """S3 goes down at the night's first log upload and stays down until ``over`` is set."""

    def __init__(self):
        self.down = self.over = False

    def __call__(self, operation: str, key: str) -> bool:
        self.down = self.down or (operation == "PutObject" and key.startswith("state/logs/"))
        return self.down and not self.over


def test_after_the_re_add_of_a_refused_night_latest_json_is_its_whole_record(production, monkeypatch, capsys):
    """S3 out from the first log upload to the night's end: exit 4, the results kept; the commands the kept
    README prints, run once S3 answers, leave the night's whole record as nights/latest.json (the newest
    night's record, docs/storage.md), not the partial `running` one the night wrote before the outage."""
    bucket, s3, home = production
    outage = ToTheEnd()
    Refuse(outage, "ServiceUnavailable").install(monkeypatch)
    assert main(["run", "--home", str(home), "--labels", LABEL]) == 4
    capsys.readouterr()
    outage.over = True  # S3 answers again
    assert _record(s3, bucket, "nights/latest.json")["status"] == "running"  # written as the run was planned
    (folder,) = (home / "unsaved").iterdir()
    readme = (folder / "README.txt").read_text().splitlines()
    start = next(i for i, line in enumerate(readme) if line.endswith("re-add them:"))
    commands = [line.strip() for line in readme[start + 1:] if line.strip()]
    assert commands and all(_re_add(c, s3, bucket) == 0 for c in commands), commands
    whole = json.loads(next((folder / "state" / "runs").iterdir()).read_text())
    assert whole["status"] == "finished" and _record(s3, bucket, "nights/latest.json") == whole
    assert {s["source"] for s in _history(s3, bucket)} == {a["log_uri"] for a in whole["attempts"]}


@pytest.mark.parametrize("argv", [["plan"], ["report"], ["history", "show"], ["calibrate"], ["quarantine", "list"],
                                  ["quarantine", "add", "t", "--by", "me", "--why", "flaky"]])
def test_every_command_answers_a_store_that_does_not_answer_with_the_runs_exit_status(production, monkeypatch,
                                                                                      capsys, argv):
    """A scheduler or a wrapper script retries on 5 and gives up on 2 (README): `nightly report` or `calibrate`
    in a morning job must not read an S3 outage as a wrong flag, as `nightly run` does not."""
    bucket, s3, home = production
    Refuse(lambda operation, key: True, "ServiceUnavailable").install(monkeypatch)
    assert main([*argv, "--home", str(home)]) == 5
    err = capsys.readouterr().err
    assert f"nightly {argv[0]}: error:" in err and "ServiceUnavailable" in err, err
    assert err.rstrip().endswith("the deployment's store did not answer (exit 5); no flag or input is wrong: "
                                 "run the command again once it answers"), err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["report"], ["calibrate"]])
def test_a_store_that_refuses_a_command_is_still_a_wrong_setting(production, capsys, argv):
    bucket, s3, home = production
    s3.delete_bucket(Bucket=bucket)
    assert main([*argv, "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert "NoSuchBucket" in err and "did not answer" not in err, err
