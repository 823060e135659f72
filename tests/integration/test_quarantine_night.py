"""A test quarantined as flaky, on a real night started the way a maintainer does (`nightly run`):
its failure does not fail the night, in the command's exit status and in the UI's check alike; with
the repo's `flaky: run_quarantined: false` it is not launched at all."""

from __future__ import annotations

import json
import subprocess
import sys

import dagster as dg
import pytest
import yaml

from pipelines.core.history import FileHistoryStore
from pipelines.instance import open_instance
from tests.conftest import PROJECT_ROOT
from tests.support.assets import example_assets
from tests.support.env import child_env

pytestmark = pytest.mark.slow  # real nights in a fresh Python with Dagster

FLAKY = "tests/e2e/lora/test_lora_math.py"


@pytest.fixture
def setup(tmp_path):
    assets = example_assets(tmp_path / "assets")
    repos = assets / "repos.yaml"
    home = tmp_path / "home"
    env = {**child_env("NIGHTLY_", "DAGSTER_", "MINIRL_"),
           "NIGHTLY_HOME": str(home), "NIGHTLY_ASSETS_DIR": str(assets)}

    def nightly(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipelines", *argv], cwd=PROJECT_ROOT, env=env,
                              capture_output=True, text=True, timeout=600)

    added = nightly("quarantine", "add", FLAKY, "--by", "ci-oncall", "--why", "flaky since #123")
    assert added.returncode == 0, added.stderr
    return nightly, home, repos


def _checks(home, test_id: str) -> list:
    with open_instance(home) as instance:
        [run] = [r for r in instance.get_runs() if r.job_name != "calibration"]  # the night
        return [e.dagster_event.event_specific_data
                for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
                if e.dagster_event.event_specific_data.partition == test_id]


def test_a_quarantined_failure_warns_in_the_ui_and_does_not_fail_the_night(setup):
    nightly, home, _ = setup
    night = nightly("run", "--labels", "lora", "--env", "MINIRL_FAIL=test_lora_math")
    assert night.returncode == 0, night.stdout[-2000:] + night.stderr[-2000:]
    assert f"note: {FLAKY} failed but is quarantined as flaky" in night.stdout
    [check] = _checks(home, FLAKY)
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert "quarantined as flaky" in check.description and check.metadata["kind"].value == "quarantined"


def test_with_run_quarantined_off_the_quarantined_test_is_not_launched_on_any_way_in(setup):
    nightly, home, repos = setup
    data = yaml.safe_load(repos.read_text())
    data["repos"]["minirl"]["flaky"] = {"run_quarantined": False}
    repos.write_text(yaml.safe_dump(data))
    listed = nightly("run", "--labels", "lora", "--list-only")
    assert listed.returncode == 0, listed.stderr
    [line] = [x for x in listed.stdout.splitlines() if FLAKY in x and "release" not in x.split(FLAKY)[0]]
    assert line.split()[0] == "-" and "run_quarantined is off" in line, listed.stdout
    planned = nightly("plan", "--labels", "lora")  # the plan a maintainer reads before the night
    assert planned.returncode == 0, planned.stderr
    assert "run_quarantined is off" in next(x for x in planned.stdout.splitlines() if FLAKY in x), planned.stdout
    night = nightly("run", "--labels", "lora")
    assert night.returncode == 0, night.stdout[-2000:] + night.stderr[-2000:]
    assert FLAKY not in {s.test_id for s in FileHistoryStore(home / "history.sqlite").read()}
    [record] = (home / "runs").glob("*.json")
    summary = json.loads(record.read_text())
    assert FLAKY in summary["skipped"] and "run_quarantined is off" in summary["skip_reasons"][FLAKY]
