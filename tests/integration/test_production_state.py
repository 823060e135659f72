"""Production mode: every Dagster run starts in a fresh folder, as separate pods do, and still feeds the next.

A night of test pods runs on the stand-in cluster with its state in S3 (a moto server); the
calibration run then starts in another empty folder and finds that night's record in S3; a
third empty folder plans the next night with the calibrated estimates; the attempt logs are
read back from S3.
"""

from __future__ import annotations

import json
import textwrap

import dagster as dg
import pytest

from pipelines.cli import main
from pipelines.definitions import build_definitions
from pipelines.defs.resources import NightlyResource
from pipelines.night import Night, NightSettings
from tests.conftest import PROJECT_ROOT
from tests.launch.kubernetes import pods
from tests.launch.kubernetes.apiserver import StandInApiServer, Step
from tests.launch.kubernetes.kubelet import Kubelet
from tests.support.assets import example_assets
from tests.support.moto import CREDENTIALS, moto_server, s3_client

pytestmark = pytest.mark.slow

EXAMPLE = PROJECT_ROOT / "examples" / "minirl"
BUCKET = "nightly-e2e-history"
LABEL = "megatron"


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
def production(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("production")
    assets = example_assets(tmp / "assets")
    kubelet = Kubelet.create(tmp, EXAMPLE, EXAMPLE / "hub", {"hf-token": {"token": "hf_x"}})

    def script(pod, node):
        if pod["metadata"]["labels"]["app.kubernetes.io/name"] == "nightly-e2e-build":
            return kubelet.steps(pod, node)
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running()),
                Step(mutate=pods.terminated("Succeeded", 0, "Completed"), logs=("step 1 loss 0.5", "loss went down"))]

    with StandInApiServer(script=script) as server, moto_server() as s3_url, pytest.MonkeyPatch.context() as mp:
        s3 = s3_client(s3_url)
        s3.create_bucket(Bucket=BUCKET)
        for k, v in {**CREDENTIALS, "NIGHTLY_S3_ENDPOINT": s3_url, "NIGHTLY_DEPLOYMENT": "production",
                     "NIGHTLY_ASSETS_DIR": str(assets)}.items():
            mp.setenv(k, v)
        _kubeconfig(tmp / "kubeconfig", server.url)
        mp.setenv("KUBECONFIG", str(tmp / "kubeconfig"))
        mp.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        homes = {name: tmp / name for name in ("night", "calibration", "next")}
        with dg.instance_for_test() as instance:
            def defs_in(home):
                return build_definitions(nightly=NightlyResource(home=str(home), assets_dir=str(assets),
                                                                 deployment="production"))
            keys = sorted(t.id for t in Night(NightSettings(home=homes["night"], assets_dir=assets)).catalog.tests)
            night = defs_in(homes["night"]).resolve_job_def("tests").execute_in_process(
                instance=instance, run_config={"ops": {"test_runs": {"config": {"labels": [LABEL],
                                                                                "cadence": "nightly"}}}},
                tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
            calibration = defs_in(homes["calibration"]).resolve_job_def("calibration").execute_in_process(
                instance=instance, tags={"nightly/source_run": night.run_id})
        yield {"night": night, "calibration": calibration, "homes": homes, "s3": s3, "assets": assets,
               "created": list(server.created)}


def test_the_night_ran_pods_and_left_its_record_in_s3_not_in_its_folder(production):
    assert production["night"].success
    s3 = production["s3"]
    key = f"state/runs/{production['night'].run_id}.json"
    summary = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    assert summary["deployment"] == "production" and len(summary["attempts"]) >= 3
    assert all(a["outcome"] == "passed" for a in summary["attempts"])
    assert not (production["homes"]["night"] / "runs").exists()


def test_calibration_in_a_fresh_folder_reads_the_night_from_s3_and_writes_estimates_there(production):
    calib = production["calibration"]
    assert calib.success
    (report,) = calib.asset_materializations_for_node("night_report")
    assert report.metadata["report"].value.startswith(f"s3://{BUCKET}/state/reports/")
    assert report.metadata["source_run"].value == production["night"].run_id
    estimates = json.loads(production["s3"].get_object(Bucket=BUCKET, Key="state/estimates/minirl.json")["Body"].read())
    assert estimates and all(e["sha256"] for e in estimates.values())


def test_the_next_night_plans_with_the_calibrated_estimates_from_a_third_fresh_folder(production, capsys):
    estimates = json.loads(production["s3"].get_object(Bucket=BUCKET, Key="state/estimates/minirl.json")["Body"].read())
    night = Night(NightSettings(home=production["homes"]["next"], assets_dir=production["assets"]))
    by_id = night.catalog.by_id()
    for tid, e in estimates.items():
        assert by_id[tid].est_time == e["est_time"] and by_id[tid].est_source == "history", tid
    assert main(["run", "--home", str(production["homes"]["next"]), "--labels", LABEL, "--list-only"]) == 0
    out = capsys.readouterr().out
    some_id, some = next(iter(estimates.items()))
    assert some_id in out
    assert f"state s3://{BUCKET}/state (history and records; " in out  # not the pod's throwaway folder


def test_attempt_logs_are_readable_from_s3(production):
    s3 = production["s3"]
    summary = json.loads(s3.get_object(Bucket=BUCKET, Key=f"state/runs/{production['night'].run_id}.json")["Body"].read())
    uris = [a["log_uri"] for a in summary["attempts"] if a.get("log_uri")]
    assert len(uris) == len(summary["attempts"])
    key = uris[0].removeprefix(f"s3://{BUCKET}/")
    assert "loss went down" in s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()


def test_the_ui_names_each_attempts_stored_log_not_the_run_pods_folder(production):
    """The run pod's folder goes with the pod: a test_runs materialization's `log` is the S3 copy."""
    summary = json.loads(production["s3"].get_object(
        Bucket=BUCKET, Key=f"state/runs/{production['night'].run_id}.json")["Body"].read())
    uris = {a["test_id"]: a["log_uri"] for a in summary["attempts"]}
    shown = {m.partition: m.metadata["log"].value for m in production["night"].asset_materializations_for_node("test_runs")
             if m.asset_key == dg.AssetKey("test_runs")}
    assert shown and shown == uris
    assert all(v.startswith(f"s3://{BUCKET}/state/logs/") for v in shown.values()), shown


def test_history_and_calibrate_read_the_production_history_when_told_the_deployment(production, capsys, monkeypatch):
    """From a maintainer's laptop (no NIGHTLY_DEPLOYMENT): --deployment names the store the pods wrote."""
    monkeypatch.delenv("NIGHTLY_DEPLOYMENT")
    laptop = production["homes"]["next"].parent / "laptop"
    ran = {a["test_id"] for a in json.loads(production["s3"].get_object(
        Bucket=BUCKET, Key=f"state/runs/{production['night'].run_id}.json")["Body"].read())["attempts"]}
    assert main(["history", "show", "--deployment", "production", "--home", str(laptop), "--limit", "all"]) == 0
    shown = capsys.readouterr().out
    assert ran and all(tid in shown for tid in ran), shown
    # each sample's source is the log's stored copy, not the folder of the pod that ran it
    rows = [line for line in shown.splitlines() if any(tid in line for tid in ran)]
    assert rows and all(f"s3://{BUCKET}/state/logs/" in line for line in rows), rows
    assert main(["calibrate", "--deployment", "production", "--home", str(laptop)]) == 0
    said = capsys.readouterr().out.splitlines()[0]
    assert f"s3://{BUCKET}" in said and " 0 samples" not in said, said
    assert not (laptop / "history.sqlite").exists()  # nothing local was created or read
