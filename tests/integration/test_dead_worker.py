"""A run worker killed with SIGKILL mid-night (an evicted pod, an OOM kill) still leaves its night in S3.

`nightly run` (the whole run worker: Dagster, dispatch, the local launcher) runs against a moto S3
state; one test hangs, so the night cannot end by itself. As soon as the record in S3 shows a
finished attempt, the worker's whole process group is SIGKILLed: nothing of it can write anything
after that. Then, from an empty folder as another pod would: the night's record is there, marked
as in progress, with each finished attempt's log stored in S3, and `nightly report` reports it as
incomplete and not OK.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import PROJECT_ROOT
from tests.support.assets import example_assets
from tests.support.env import child_env
from tests.support.moto import CREDENTIALS, moto_server, s3_client

pytestmark = pytest.mark.slow  # a real night in a fresh interpreter, a moto server

BUCKET = "nightly-e2e-history"
HANG = "test_lora_math"


@pytest.fixture
def setup(tmp_path):
    assets = example_assets(tmp_path / "assets")
    cluster = yaml.safe_load((assets / "cluster.yaml").read_text())
    cluster["deployments"]["s3dead"] = {"launcher": "local", "storage": "s3", "s3_bucket": BUCKET,
                                        "skip_hardware": ["mi300"], "pools": {"h200": {"nodes": 1, "gpus_per_node": 8}}}
    (assets / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    with moto_server() as url:
        s3 = s3_client(url)
        s3.create_bucket(Bucket=BUCKET)
        env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_", "AWS_"),
               **CREDENTIALS, "NIGHTLY_S3_ENDPOINT": url, "NIGHTLY_DEPLOYMENT": "s3dead",
               "NIGHTLY_ASSETS_DIR": str(assets)}
        yield s3, env, tmp_path


def _records(s3) -> list[dict]:
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="state/runs/").get("Contents", [])]
    return [json.loads(s3.get_object(Bucket=BUCKET, Key=k)["Body"].read()) for k in keys]


def test_a_worker_killed_mid_night_leaves_an_incomplete_night_with_its_logs(setup):
    s3, env, tmp = setup
    worker = subprocess.Popen(
        [sys.executable, "-m", "pipelines", "run", "--home", str(tmp / "worker"), "--env", f"MINIRL_HANG={HANG}",
         "--timeout-floor", "300", "--accept-problems"],
        cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and worker.poll() is None:
            if any(r.get("attempts") for r in _records(s3)):
                break
            time.sleep(0.5)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)  # the worker and the tests it started: no clean-up runs
        worker.wait(30)
    assert worker.returncode == -signal.SIGKILL, "the night ended by itself; it must be killed mid-night"

    [record] = _records(s3)
    latest = json.loads(s3.get_object(Bucket=BUCKET, Key="state/nights/latest.json")["Body"].read())
    assert latest["run_id"] == record["run_id"] and latest["status"] == "running"
    assert record["status"] == "running" and record["notes"][0].startswith("INCOMPLETE: this record was written at ")
    finished = {a["test_id"] for a in record["attempts"]}
    assert finished and f"tests/e2e/lora/{HANG}.py" not in finished
    verdict = record["verdict"]
    assert verdict["ok"] is False and f"tests/e2e/lora/{HANG}.py" in verdict["unfinished"]
    assert set(verdict["unfinished"]) == set(record["selected"]) - finished - set(record["unplanned"])
    for a in record["attempts"]:  # every finished attempt's log is in S3, not only on the dead worker's disk
        key = a["log_uri"].removeprefix(f"s3://{BUCKET}/")
        assert key == f"state/logs/{record['night']}/{os.path.basename(a['log_path'])}"
        assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    shutil.rmtree(tmp / "worker")  # the dead pod's folder is gone: the report reads S3 only
    report = subprocess.run([sys.executable, "-m", "pipelines", "report", "--json", "--home", str(tmp / "morning"),
                             "--repo", "minirl"], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert data["run_id"] == record["run_id"]
    assert data["verdict"].startswith("INCOMPLETE: ") and "the run is still going or its worker died" in data["verdict"]
    assert any(n.startswith("INCOMPLETE: ") for n in data["notes"])
    rows = {r["test_id"]: r["outcome"] for r in data["rows"]}
    assert rows[f"tests/e2e/lora/{HANG}.py"] == "not_run"
