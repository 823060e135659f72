"""The Dagster UI on the night's instance, as ``make ui`` serves it: GraphQL answers and a real browser.

One module fixture runs a short night (the 8-GPU suite: two tests and the disabled one) into a temp
state folder while ``dagster dev -w workspace.yaml`` starts on the same instance; every test
then reads that one instance. Expected values come from the CLI's own output (the catalog JSON and
the night's table), so the UI must show exactly what the command line ran.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.support import browser as chromium
from tests.support.dagster_dev import PROJECT, dagster_dev, graphql
from tests.support.env import child_env

pytestmark = pytest.mark.slow

SUITE = "stage-c-8-gpu-h200"  # two short tests and the disabled one: a night of ~10 s
NIGHT_TIMEOUT_S = 600  # the night takes ~10 s idle; the limit only stops a hang, never judges speed
# each test's timeout in the night: the 8-GPU rollout test took 41 s at load 10 against the example's
# 60 s floor; nothing here hangs, so a generous floor costs nothing and keeps a loaded night green
TIMEOUT_FLOOR_S = 600
BROWSER_TOTAL_S = 900  # four pages one after another: ~40 s idle, a few minutes loaded; a hang guard
UPSTREAM = {"converted_checkpoints": "model_weights", "test_runs": "converted_checkpoints",
            "calibrated_estimates": "test_runs", "night_report": "calibrated_estimates"}


@dataclass(frozen=True)
class Ui:
    url: str
    home: Path
    catalog: list[dict]  # `nightly catalog --json`
    rows: dict[str, dict]  # the night's final table, by test id
    night_run: str
    calibration_run: str


def cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "pipelines", *args], cwd=PROJECT, env=env,
                         capture_output=True, text=True, timeout=NIGHT_TIMEOUT_S, check=False)
    assert out.returncode == 0, f"nightly {' '.join(args)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return out


def night_table(stdout: str) -> dict[str, dict]:
    """The rows of the table `nightly run` prints at the end (cells hold no spaces)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["test", "outcome"])
    header = lines[start].split()
    rows = {}
    for line in lines[start + 2:]:
        if not line.strip():
            break
        row = dict(zip(header, line.split(), strict=False))
        rows[row["test"]] = row
    return rows


@pytest.fixture(scope="module")
def ui(tmp_path_factory) -> Iterator[Ui]:
    home = tmp_path_factory.mktemp("nightly-home")
    env = {**child_env("NIGHTLY_", "DAGSTER_"),
           "NIGHTLY_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    # the same instance `make ui` opens: `nightly ui` writes its dagster.yaml and names its DAGSTER_HOME
    printed = cli("ui", "--print-command", env=env).stdout
    assert printed.startswith(f"DAGSTER_HOME={home / 'dagster'} "), printed
    with dagster_dev(env, home) as dev:
        night = cli("run", "--suite", SUITE, "--timeout-floor", str(TIMEOUT_FLOOR_S), env=env).stdout  # while the UI starts
        catalog = json.loads(cli("catalog", "--json", env=env).stdout)
        runs = re.search(r"dagster runs: (\S+) \(night\), (\S+) \(calibration\)", night)
        assert runs, night
        dev.wait_until_loaded()
        yield Ui(dev.url, home, catalog, night_table(night), runs.group(1), runs.group(2))


def ran(ui: Ui) -> set[str]:
    return {t for t, row in ui.rows.items() if row["outcome"] in ("passed", "failed", "timed_out")}


@dataclass(frozen=True)
class Browser:
    """What headless Chromium made of each page: the visible text of its DOM, or a screenshot."""

    texts: dict[str, str]
    screenshot: Path


def lineage_url(ui: Ui) -> str:
    return f"{ui.url}/assets/test_runs?view=lineage&lineageDepth=5"


def partition_url(ui: Ui) -> str:
    return f"{ui.url}/assets/test_runs?view=partitions&partition={quote(sorted(ran(ui))[0], safe='')}"


@pytest.fixture(scope="module")
def browser(ui: Ui, tmp_path_factory) -> Browser:
    """Every page in one browser session, one page at a time (see tests/support/browser.py)."""
    png = tmp_path_factory.mktemp("browser") / "asset-graph.png"
    pages = {"partitions": partition_url(ui), "lineage": lineage_url(ui), "run": f"{ui.url}/runs/{ui.night_run}"}
    with chromium.session(total_s=BROWSER_TOTAL_S) as session:
        texts = {name: chromium.visible_text(session.dump_dom(url)) for name, url in pages.items()}
        session.screenshot(lineage_url(ui), png, size=(1400, 900))
    return Browser(texts, png)


# -- GraphQL ---------------------------------------------------------------------------------------

def test_the_night_ran_its_suite_and_listed_the_disabled_test_as_skipped(ui):
    in_suite = {t["id"] for t in ui.catalog if t["suite"] == SUITE and "long" not in t["labels"]}
    assert set(ui.rows) == in_suite
    assert {t for t, r in ui.rows.items() if r["outcome"] == "skipped"} == \
        {t["id"] for t in ui.catalog if t["suite"] == SUITE and t["disabled"]}
    assert all(ui.rows[t]["outcome"] == "passed" for t in ran(ui)), ui.rows
    assert len(ran(ui)) >= 2


def test_the_asset_graph_runs_from_model_weights_through_test_runs_to_the_report(ui):
    nodes = graphql(ui.url, "{ assetNodes { assetKey { path } dependencyKeys { path } } }")["assetNodes"]
    deps = {"/".join(n["assetKey"]["path"]): {"/".join(d["path"]) for d in n["dependencyKeys"]} for n in nodes}
    for asset, upstream in UPSTREAM.items():
        assert upstream in deps[asset], f"{asset} should depend on {upstream}; it depends on {deps[asset]}"
    assert deps["model_weights"] == set()


def test_test_runs_has_a_partition_per_catalog_test_and_the_tests_that_ran_are_materialized(ui):
    node = graphql(ui.url, """{ assetNodeOrError(assetKey: {path: ["test_runs"]}) { ... on AssetNode {
        partitionKeys assetPartitionStatuses { ... on DefaultPartitionStatuses { materializedPartitions } } } } }""")
    node = node["assetNodeOrError"]
    assert sorted(node["partitionKeys"]) == sorted(t["id"] for t in ui.catalog)
    assert set(node["assetPartitionStatuses"]["materializedPartitions"]) == ran(ui)


def metadata(entries: list[dict]) -> dict:
    return {e["label"]: e.get("text", e.get("floatValue", e.get("intValue"))) for e in entries}


ENTRIES = """metadataEntries { label ... on TextMetadataEntry { text } ... on FloatMetadataEntry { floatValue }
             ... on IntMetadataEntry { intValue } }"""


def test_a_partitions_history_records_outcome_elapsed_timeout_and_node(ui):
    test_id = sorted(ran(ui))[0]
    row = ui.rows[test_id]
    data = graphql(ui.url, f"""{{ assetOrError(assetKey: {{path: ["test_runs"]}}) {{ ... on Asset {{
        assetMaterializations(partitions: [{json.dumps(test_id)}]) {{ partition runId {ENTRIES} }} }} }} }}""")
    (mat,) = data["assetOrError"]["assetMaterializations"]
    meta = metadata(mat["metadataEntries"])
    assert mat["partition"] == test_id and mat["runId"] == ui.night_run
    assert meta["outcome"] == row["outcome"]
    assert meta["elapsed_s"] == pytest.approx(float(row["elapsed_s"]), abs=0.051)
    assert meta["timeout_s"] == int(row["timeout_s"])
    assert meta["node"] == row["node"]
    assert meta["est_time_s"] == int(row["est_time"])


def test_the_disabled_tests_partition_is_observed_as_not_launched_with_its_reason(ui):
    (test_id,) = [t for t, r in ui.rows.items() if r["outcome"] == "skipped"]
    data = graphql(ui.url, f"""{{ assetOrError(assetKey: {{path: ["test_runs"]}}) {{ ... on Asset {{
        assetMaterializations(partitions: [{json.dumps(test_id)}]) {{ partition }}
        assetObservations(partitions: [{json.dumps(test_id)}]) {{ partition {ENTRIES} }} }} }} }}""")["assetOrError"]
    assert data["assetMaterializations"] == []
    (obs,) = data["assetObservations"]
    meta = metadata(obs["metadataEntries"])
    reason = next(t["disabled"] for t in ui.catalog if t["id"] == test_id)
    assert meta["outcome"] == "skipped"
    assert meta["reason"] == f"disabled: {reason}"


def test_the_ui_serves_the_reviewed_jobs_schedules_and_sensors(ui):
    wiring = json.loads((PROJECT / "tests" / "defs" / "wiring.json").read_text())  # the reviewed snapshot
    repo, = graphql(ui.url, """{ repositoriesOrError { ... on RepositoryConnection { nodes {
        jobs { name } schedules { name cronSchedule executionTimezone } sensors { name } } } } }""")[
        "repositoriesOrError"]["nodes"]
    assert set(wiring["jobs"]) <= {j["name"] for j in repo["jobs"]}  # plus Dagster's own __ASSET_JOB
    assert {"nightly", "weekly", "calibration"} <= set(wiring["jobs"])
    schedules = {s["name"]: (s["cronSchedule"], s["executionTimezone"]) for s in repo["schedules"]}
    assert schedules == {name: (cron, "UTC") for name, cron in wiring["schedules"].items()}
    assert {s["name"] for s in repo["sensors"]} == set(wiring["sensors"])


def test_both_runs_succeeded_and_the_checks_on_calibrated_estimates_ran(ui):
    runs = graphql(ui.url, "{ runsOrError { ... on Runs { results { runId jobName status } } } }")
    by_id = {r["runId"]: (r["jobName"], r["status"]) for r in runs["runsOrError"]["results"]}
    assert by_id == {ui.night_run: ("nightly", "SUCCESS"), ui.calibration_run: ("calibration", "SUCCESS")}
    checks = graphql(ui.url, """{ assetNodeOrError(assetKey: {path: ["calibrated_estimates"]}) { ... on AssetNode {
        assetChecksOrError { ... on AssetChecks { checks { name executionForLatestMaterialization {
        runId status } } } } } } }""")["assetNodeOrError"]["assetChecksOrError"]["checks"]
    done = {c["name"]: c["executionForLatestMaterialization"] for c in checks}
    assert set(done) == {"no_estimate_drift", "no_test_near_timeout"}
    for name, execution in done.items():
        assert execution and execution["runId"] == ui.calibration_run, name
        assert execution["status"] in ("SUCCEEDED", "FAILED"), (name, execution)


# -- the browser -----------------------------------------------------------------------------------

def test_the_partitions_page_shows_every_test_id_and_a_partitions_metadata_in_a_browser(ui, browser):
    test_id = sorted(ran(ui))[0]
    text = browser.texts["partitions"]
    for t in ui.catalog:
        assert t["id"] in text, f"{t['id']} missing from the rendered partitions page"
    assert f"Materialized ({len(ran(ui))})" in text
    row = ui.rows[test_id]
    shown = re.search(rf"outcome {row['outcome']} elapsed_s ([\d.]+) ", text)
    assert shown, text[-3000:]
    assert float(shown.group(1)) == pytest.approx(float(row["elapsed_s"]), abs=0.051)
    assert f"node {row['node']}" in text
    assert f"timeout_s {row['timeout_s']}" in text


def test_the_lineage_page_draws_every_asset_in_a_browser(browser):
    text = browser.texts["lineage"]
    # long names are shortened in the nodes (conve…_checkpoints), so match their tails
    for name in ("model_weights", "datasets", "_checkpoints", "test_runs", "_estimates", "night_report"):
        assert name in text, f"{name} missing from the rendered lineage graph"
    for group in ("inputs", "tests", "calibration"):
        assert group in text


def test_the_nights_run_page_shows_its_log_in_a_browser(browser):
    text = browser.texts["run"]
    assert "Run of nightly" in text and "Success" in text
    assert "test_runs" in text  # the run's one step
    assert re.search(r"\[1/\d+\] (model|dataset|conversion) \S+: (built|reused)", text), text[:3000]


def test_a_screenshot_of_the_lineage_graph_shows_materialized_nodes(browser):
    import matplotlib.image
    import numpy as np

    png = browser.screenshot
    assert png.exists()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000, "a blank page compresses to a few KB"
    pixels = (matplotlib.image.imread(png)[..., :3] * 255).round().astype(int)
    assert pixels.shape == (900, 1400, 3)
    colours, counts = np.unique(pixels.reshape(-1, 3), axis=0, return_counts=True)
    assert len(colours) > 100 and counts.max() / counts.sum() < 0.95
    graph = pixels[160:, 240:]  # right of the navigation, below the tabs
    r, g, b = graph[..., 0], graph[..., 1], graph[..., 2]
    green = ((g > r + 20) & (g > b + 5)).sum()  # materialized assets have green borders
    assert green > 1500, f"only {green} green pixels: the graph's materialized nodes are not drawn"
    if os.environ.get("NIGHTLY_KEEP_SCREENSHOT"):
        shutil.copy(png, os.environ["NIGHTLY_KEEP_SCREENSHOT"])
