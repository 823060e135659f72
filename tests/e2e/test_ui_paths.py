"""Every way in through the UI runs tests the same way: GPU-aware, one run per pick, checks, feedback.

``dagster dev -w workspace.yaml`` (webserver + daemon) on a fresh state folder, driven through
the GraphQL API the UI itself calls:
- a pick of three scattered test_runs partitions (``launchPartitionBackfill``) becomes three
  runs (one per contiguous key range) that share the GPU pool: their tests run side by side
  (the example's MINIRL_BARRIER makes each of the three wait until all three run at once, so
  runs that serialized on GPUs would fail, however fast or slow the machine);
- a backfill of every partition is ONE run that never launches disabled or skipped tests;
- after that backfill alone, the calibration sensor (on by default) recalibrates, and
  ``nightly plan`` shows the new estimates.
Expectations come from what the runs recorded, never from wall-clock speed.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.e2e.test_ui import cli
from tests.support.assets import example_assets
from tests.support.dagster_dev import dagster_dev, graphql
from tests.support.env import child_env

pytestmark = pytest.mark.slow

#: three tests of 2, 2 and 4 GPUs, not adjacent in key order: three runs that fit on one 8-GPU node together
PICKS = ["tests/e2e/fsdp/test_fsdp_sft_chat.py", "tests/e2e/lora/test_lora_moe_6layer.py",
         "tests/e2e/megatron/test_sft_math.py"]
DISABLED = "tests/e2e/megatron/test_multinode_sft.py"
ROCM = "tests/e2e/ckpt/test_ckpt_resume.py::rocm-stage-c-4-gpu-mi300"
RUN_TIMEOUT_S = 900  # a hang guard only: these runs take ~30-120 s depending on load

LAUNCH = """mutation($names: [String!]!) { launchPartitionBackfill(backfillParams: {
  partitionNames: $names, assetSelection: [{path: ["test_runs"]}], fromFailure: false}) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
RUNS = """{ runsOrError(filter: {tags: [{key: "dagster/backfill", value: "%s"}]}) { ... on Runs { results {
  runId status jobName tags { key value } } } } }"""
ALL_RUNS = "{ runsOrError { ... on Runs { results { runId status jobName tags { key value } } } } }"


def backfill(url: str, names: list[str]) -> str:
    out = graphql(url, LAUNCH, {"names": names})["launchPartitionBackfill"]
    assert out["__typename"] == "LaunchBackfillSuccess", out
    return out["backfillId"]


def wait_for(predicate, what: str, timeout_s: float = RUN_TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(2)
    pytest.fail(f"timed out waiting for {what}")


def finished_runs(url: str, backfill_id: str, expected: int) -> list[dict]:
    def done():
        runs = graphql(url, RUNS % backfill_id)["runsOrError"]["results"]
        return runs if len(runs) >= expected and all(r["status"] in ("SUCCESS", "FAILURE", "CANCELED") for r in runs) \
            else None
    return wait_for(done, f"{expected} run(s) of backfill {backfill_id}")


def summaries(home: Path, runs: list[dict]) -> dict[str, dict]:
    return {r["runId"]: json.loads((home / "runs" / f"{r['runId']}.json").read_text()) for r in runs}


def interval(attempt: dict) -> tuple[float, float]:
    """When the attempt may have run: started_at is cut to the millisecond when its GPUs were held, and
    its process starts a moment after that, so it ended somewhat after start + elapsed (1 s of slack)."""
    start = datetime.fromisoformat(attempt["started_at"]).timestamp()
    return start, start + 1.0 + attempt["elapsed_s"]


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    home = tmp_path_factory.mktemp("ui-paths")
    # a timeout floor above the barrier's wait: a slow start is no timeout
    assets = example_assets(home.parent / "assets", floor_s=900)
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"),
           "NIGHTLY_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "NIGHTLY_ASSETS_DIR": str(assets),
           "MINIRL_BARRIER": f"{home.parent / 'barrier'}:{','.join(Path(p).stem for p in PICKS)}",
           "MINIRL_BARRIER_S": "600"}
    cli("ui", "--print-command", env=env)  # writes dagster.yaml as `make ui` does
    with dagster_dev(env, home) as dev:
        dev.wait_until_loaded()
        yield {"url": dev.url, "home": home, "env": env, "log": dev.log}


@pytest.fixture(scope="module")
def picked(ui):
    backfill_id = backfill(ui["url"], PICKS)
    runs = finished_runs(ui["url"], backfill_id, expected=3)
    return runs, summaries(ui["home"], runs)


@pytest.fixture(scope="module")
def everything(ui, picked):
    keys = json.loads(cli("catalog", "--json", env=ui["env"]).stdout)
    backfill_id = backfill(ui["url"], sorted(t["id"] for t in keys))
    runs = finished_runs(ui["url"], backfill_id, expected=1)
    return runs, summaries(ui["home"], runs)


def test_a_pick_of_three_scattered_partitions_runs_them_side_by_side_on_free_gpus(picked):
    runs, records = picked
    assert len(runs) == 3 and all(r["status"] == "SUCCESS" for r in runs)
    attempts = {a["test_id"]: a for s in records.values() for a in s["attempts"]}
    assert sorted(attempts) == sorted(PICKS)
    assert all(a["outcome"] == "passed" for a in attempts.values())
    # side by side: every pair of the three tests overlapped in time (serialized runs never do)
    spans = [interval(a) for a in attempts.values()]
    assert max(s for s, _ in spans) < min(e for _, e in spans), spans
    # and on distinct GPUs of the one node: no slot was given to two of them
    slots = [s for a in attempts.values() for s in a["gpu_slots"]]
    assert len(slots) == len(set(slots)) == 8


def test_a_backfill_of_all_partitions_is_one_run_that_never_launches_disabled_or_skipped_tests(everything):
    runs, records = everything
    assert len(runs) == 1 and runs[0]["status"] == "SUCCESS"
    (summary,) = records.values()
    launched = {a["test_id"] for a in summary["attempts"]}
    assert DISABLED not in launched and ROCM not in launched
    assert DISABLED in summary["skipped"] and "disabled" in summary["skip_reasons"][DISABLED]
    assert len(launched) >= 10  # every enabled test of every label, long ones too (no cadence: a pick)


def test_after_the_ui_backfill_alone_calibration_follows_and_nightly_plan_shows_the_new_estimates(ui, everything):
    runs, records = everything
    source = runs[0]["runId"]

    def calibrated():
        for r in graphql(ui["url"], ALL_RUNS)["runsOrError"]["results"]:
            tags = {t["key"]: t["value"] for t in r["tags"]}
            if r["jobName"] == "calibration" and tags.get("nightly/source_run") == source and r["status"] == "SUCCESS":
                return r
        return None
    wait_for(calibrated, f"the calibration run after {source}")
    estimates = json.loads((ui["home"] / "estimates" / "minirl.json").read_text())
    plan = json.loads(cli("plan", "--json", env=ui["env"]).stdout)
    planned = {a["test_id"]: a for a in plan["assignments"]}
    checked = [tid for tid in estimates if tid in planned]
    assert checked
    for tid in checked:
        assert planned[tid]["est_time"] == estimates[tid]["est_time"] and planned[tid]["est_source"] == "history"
