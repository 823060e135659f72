"""``--repo PATH`` alone on a framework nobody configured: the template-format example, end to end.

``examples/templaterl`` is laid out like framework S (a Jinja2 workflow template lists the tests)
and is absent from ``assets/repos.yaml``. The product must detect the format, say what it assumed,
list one test per template entry, place them on the local pool, run a whole night through Dagster,
and plan the next night with the estimates that night measured. Expected values come from the
rendered workflow and the test files (see tests/examples/test_templaterl.py), never from the
catalog code.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.core.specs import RepoSpec, unconfigured_name
from tests.examples.test_templaterl import TEMPLATERL, Run, num_gpus_declared, workflow_runs
from tests.support.env import child_env

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[2]
REPO_ARG = TEMPLATERL.relative_to(PROJECT).as_posix()  # as a user types it from the project root
DEFAULTS = {f.name: f.default for f in dataclasses.fields(RepoSpec)}  # what an unconfigured repo gets
ENTRY_KEYS = ("test_file", "num_gpus", "test_args")
# a night of the seven tests takes ~30 s idle and a few minutes on a loaded 2-CPU machine; the
# limit only stops a hang, the verdicts never depend on how fast the commands ran
COMMAND_TIMEOUT_S = 900


def nightly(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = child_env("NIGHTLY_", "DAGSTER_")
    return subprocess.run([sys.executable, "-m", "pipelines", *args], cwd=PROJECT, env={**env, "NIGHTLY_HOME": str(home)},
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)


def expected_tests() -> dict[str, Run]:
    """Test id -> its workflow entry, ids as docs/catalog.md defines them (path, or path::variant)."""
    runs = workflow_runs()
    by_file: dict[str, list[Run]] = {}
    for run in runs:
        by_file.setdefault(run.test_file, []).append(run)
    out = {}
    for path, entries in by_file.items():
        for run in entries:
            extra = sorted((k, str(v)) for k, v in run.info.items() if k not in ENTRY_KEYS)
            variant = "+".join([f"{k}={v}" for k, v in extra] + shlex.split(run.info.get("test_args", "")))
            out[path if len(entries) == 1 else f"{path}::{variant or 'default'}"] = run
    assert len(out) == len(runs), "two template entries would get one id"
    return out


EXPECTED = expected_tests()


def gpus_of(run: Run) -> int:
    return run.info.get("num_gpus") or num_gpus_declared(TEMPLATERL / run.test_file) or DEFAULTS["default_num_gpus"]


def plan_rows(stdout: str) -> dict[str, list[str]]:
    """The plan a night prints before it runs: test id -> [order, id, gpus, pool/node, start, end, est, timeout]."""
    rows = {}
    for line in stdout.splitlines():
        cells = line.split()
        if len(cells) == 8 and cells[0].isdigit() and cells[1] in EXPECTED:
            rows[cells[1]] = cells
    return rows


def result_rows(stdout: str) -> dict[str, list[str]]:
    """The night's closing table: test id -> [id, outcome, elapsed_s, est_time, proposed, timeout_s, node]."""
    return {line.split()[0]: line.split() for line in stdout.splitlines()
            if line.split() and line.split()[0] in EXPECTED and not line.split()[0].isdigit()}


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("unseen-home")


@pytest.fixture(scope="module")
def catalog_json(home) -> subprocess.CompletedProcess:
    return nightly("catalog", "--repo", REPO_ARG, "--json", home=home)


@pytest.fixture(scope="module")
def catalog_table(home) -> subprocess.CompletedProcess:
    return nightly("catalog", "--repo", REPO_ARG, home=home)


@pytest.fixture(scope="module")
def plan_json(home) -> subprocess.CompletedProcess:
    return nightly("plan", "--repo", REPO_ARG, "--json", home=home)


@pytest.fixture(scope="module")
def nights(home, catalog_json, catalog_table, plan_json) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """Two whole nights in a row on the same state folder, after the listings that must see no history."""
    first = nightly("run", "--repo", REPO_ARG, home=home)
    second = nightly("run", "--repo", REPO_ARG, home=home)
    return first, second


def test_the_example_is_a_repository_nobody_configured():
    repos = yaml.safe_load((PROJECT / "assets" / "repos.yaml").read_text())["repos"]
    assert all((PROJECT / spec["path"]).resolve() != TEMPLATERL for spec in repos.values())
    assert "templaterl" not in repos


def test_catalog_json_lists_one_test_per_template_entry_with_variant_ids_for_the_matrix(catalog_json):
    assert catalog_json.returncode == 0, catalog_json.stderr
    tests = json.loads(catalog_json.stdout)
    assert [t["id"] for t in tests] == sorted(t["id"] for t in tests)
    assert {t["id"] for t in tests} == set(EXPECTED)
    assert len(tests) == len(EXPECTED) == 7
    for t in tests:
        run = EXPECTED[t["id"]]
        assert (t["path"], t["suite"], t["labels"], t["backend"]) == (run.test_file, run.job, [run.label], "cuda"), t
        assert t["gpus"] == gpus_of(run), t
        assert t["est_time"] == DEFAULTS["default_est_time"], t
        assert (t["nightly"], t["disabled"], t["requirements"]) == (False, None, []), t
    matrix = [t["id"] for t in tests if "::" in t["id"]]
    assert len(matrix) == 4 and len({i.split("::")[1] for i in matrix}) == 4
    assert {t["gpus"] for t in tests} == {2, 4, 8}
    assert next(t for t in tests if t["path"] == "tests/test_dpo_short.py")["gpus"] == 8  # no NUM_GPUS


def test_catalog_says_what_it_assumed_and_that_the_estimates_are_uncalibrated(catalog_json, catalog_table):
    assumed = [line for line in catalog_json.stderr.splitlines() if line.startswith("assumed: ")]
    assert any("not configured in assets/repos.yaml" in line for line in assumed), catalog_json.stderr
    assert any("format: template (.github/workflows/pr-test.yml.j2" in line for line in assumed), catalog_json.stderr
    assert any(f"est_time default {DEFAULTS['default_est_time']} s" in line for line in assumed)
    assert "uncalibrated" in catalog_json.stderr  # JSON has a fixed field set; stderr must say it
    table = catalog_table
    assert table.returncode == 0, table.stderr
    rows = [line for line in table.stdout.splitlines() if line.split() and line.split()[0] in EXPECTED]
    assert len(rows) == len(EXPECTED)
    assert all(f"{DEFAULTS['default_est_time']} uncalibrated" in row for row in rows), table.stdout


def test_plan_places_every_template_test_on_the_local_pool(plan_json):
    out = plan_json
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["unplanned"] == [], "template tests name no hardware: they run on the pool whose nodes hold them"
    assert plan["problems"] == []
    placed = {a["test_id"]: a for a in plan["assignments"]}
    assert set(placed) == set(EXPECTED)
    for tid, a in placed.items():
        assert (a["pool"], a["node"], a["gpus"]) == ("h200", 0, gpus_of(EXPECTED[tid])), a
    assert plan["makespan_s"] >= plan["lower_bound_s"] > 0


def test_a_whole_night_runs_every_entry_through_dagster_and_passes(nights, home):
    first, _ = nights
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert f"repo {unconfigured_name(TEMPLATERL)} ({TEMPLATERL})" in first.stdout
    planned = plan_rows(first.stdout)
    assert set(planned) == set(EXPECTED)
    assert all(row[6] == f"{DEFAULTS['default_est_time']}*" for row in planned.values()), "uncalibrated: starred"
    results = result_rows(first.stdout)
    assert set(results) == set(EXPECTED)
    assert {tid: row[1] for tid, row in results.items()} == dict.fromkeys(EXPECTED, "passed")
    assert "dagster runs:" in first.stdout


def test_the_night_gives_each_test_its_template_env_args_and_gpus(nights, home):
    logs = {}
    for log in (home / "logs").glob("*/*.attempt1.log"):
        header = log.read_text().splitlines()[0]  # "# nightly: <id> attempt 1 on <node> gpus=<slots> ..."
        logs[header.split()[2]] = log.read_text()
    assert set(EXPECTED) <= set(logs)
    for tid, run in EXPECTED.items():
        assert f"world size {gpus_of(run)}" in logs[tid], tid  # the test itself checks CUDA_VISIBLE_DEVICES
        if "use_fp8_rollout" in run.info:
            weights = "fp8" if run.info["use_fp8_rollout"] == "1" else "bf16"
            assert f"rollout weights: {weights}," in logs[tid], tid
        if "test_args" in run.info:
            optimizer = shlex.split(run.info["test_args"])[1]
            assert f"({optimizer}, lr " in logs[tid], tid
    assert "held-out preference accuracy" not in logs["tests/test_dpo_short.py"]  # enable_eval: '0'
    assert "held-out loss" in logs["tests/test_sft_dense.py"]  # enable_eval: '1'


def test_the_second_night_plans_with_the_first_nights_estimates(nights, home):
    first, second = nights
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    proposed = {tid: row[4] for tid, row in result_rows(first.stdout).items()}
    planned = plan_rows(second.stdout)
    assert {tid: row[6] for tid, row in planned.items()} == proposed, "history est_time, not starred"
    assert all(int(est) < DEFAULTS["default_est_time"] for est in proposed.values())
    assert {tid: row[1] for tid, row in result_rows(second.stdout).items()} == dict.fromkeys(EXPECTED, "passed")


def latest_proposals(home: Path) -> dict[str, int]:
    """est_time per test as the calibration after the LAST night wrote it (the estimates file).

    Each night's durations differ (a loaded machine moves a test into the next bucket), so what
    the next night uses is read from what the last calibration recorded, never from an earlier night.
    """
    (path,) = (home / "estimates").glob("*.json")
    return {tid: e["est_time"] for tid, e in json.loads(path.read_text()).items()}


def test_catalog_and_plan_after_the_nights_show_the_estimates_the_next_night_uses(nights, home):
    _, second = nights
    proposed = latest_proposals(home)
    assert set(proposed) == set(EXPECTED)
    # the second night's table shows the same proposals: the file is that night's calibration
    assert {tid: int(row[4]) for tid, row in result_rows(second.stdout).items()} == proposed
    listing = nightly("catalog", "--repo", REPO_ARG, "--json", home=home)
    assert listing.returncode == 0, listing.stderr
    assert {t["id"]: t["est_time"] for t in json.loads(listing.stdout)} == proposed
    assert "uncalibrated" not in listing.stderr
    plan = nightly("plan", "--repo", REPO_ARG, "--json", home=home)
    assert plan.returncode == 0, plan.stderr
    assignments = json.loads(plan.stdout)["assignments"]  # slots are predicted durations; est_time is the budget
    assert {a["test_id"]: a["est_time"] for a in assignments} == proposed
    assert {a["est_source"] for a in assignments} == {"history"}
