"""``dagster asset materialize`` as README.md and docs/ui.md give it: the documented command line,
run by bash from the project root, lands its run in the nightly's instance (where the UI and the
calibration sensor see it); without DAGSTER_HOME the run says loudly that nothing will follow it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from tests.e2e.test_cli import PROJECT, clean_environ
from tests.support.assets import example_assets

pytestmark = pytest.mark.slow  # about 20 s: one real test of examples/minirl in a real instance

KEY = "tests/e2e/megatron/test_dp8_chat.py"  # the example's shortest enabled test
DISABLED = "tests/e2e/megatron/test_multinode_sft.py"  # never launched: the run ends at once, launching nothing
BIN = Path(sys.executable).parent


def documented_command() -> str:
    """The `DAGSTER_HOME=... dagster asset materialize` line of docs/ui.md's code block."""
    text = (PROJECT / "docs" / "ui.md").read_text().replace("\\\n", " ")
    [line] = [ln for ln in text.splitlines() if ln.startswith("DAGSTER_HOME=") and "asset materialize" in ln]
    return " ".join(line.split("#")[0].split())


def run_documented(command: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command.replace(".venv/bin/", f"{BIN}/")], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture
def state(tmp_path) -> dict[str, str]:
    return {**clean_environ(), "PATH": f"{BIN}:/usr/bin:/bin", "NIGHTLY_HOME": str(tmp_path / "home"),
            "NIGHTLY_ASSETS_DIR": str(example_assets(tmp_path / "assets"))}


def test_readme_gives_the_same_command_as_the_ui_page():
    command = documented_command()
    assert command.startswith("DAGSTER_HOME=${NIGHTLY_HOME:-$PWD/.nightly}/dagster ")
    assert " -m pipelines.definitions " in command
    readme = " ".join((PROJECT / "README.md").read_text().split())
    assert command.replace("FIRST...LAST", "A...B") in readme


def test_the_documented_command_runs_one_partition_in_the_nightlys_instance(state):
    home = Path(state["NIGHTLY_HOME"])
    prepared = subprocess.run([sys.executable, "-m", "pipelines", "ui", "--print-command"], cwd=PROJECT,
                              env=state, capture_output=True, text=True, timeout=300, check=False)
    assert prepared.returncode == 0, prepared.stderr
    assert prepared.stdout.startswith(f"DAGSTER_HOME={home / 'dagster'} ")
    command = documented_command().replace("FIRST...LAST", f"{KEY}...{KEY}")
    done = run_documented(command, state)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"nightly: [1/1] {KEY}  PASSED" in done.stdout
    assert "throwaway" not in done.stdout
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:  # the instance `make ui` opens
        [run] = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.SUCCESS and run.job_name == "__ASSET_JOB"
        [record] = instance.fetch_materializations(dg.AssetKey("test_runs"), limit=10).records
        assert record.run_id == run.run_id and record.asset_materialization.partition == KEY
        assert record.asset_materialization.metadata["outcome"].value == "passed"


def test_without_dagster_home_the_run_warns_that_nothing_will_follow_it(state):
    command = re.sub(r"^DAGSTER_HOME=\S+ ", "", documented_command()).replace(
        "FIRST...LAST", f"{DISABLED}...{DISABLED}")
    done = run_documented(command, state)
    # a pick of a disabled test only launches nothing and is no failure; the warning comes first
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (f"nightly: nothing to launch: every selected test is disabled or on hardware no pool runs: {DISABLED}"
            in done.stdout)
    assert ("nightly: this run is on a throwaway Dagster instance (DAGSTER_HOME is not set): the UI will not "
            "list it and no calibration run or report follows it") in done.stdout
    assert f"DAGSTER_HOME={Path(state['NIGHTLY_HOME']).resolve() / 'dagster'}" in done.stdout


def test_a_failed_test_exits_0_as_the_ui_page_warns_ci_scripts(state):
    """The command exits with the run's status: a night whose test failed is a SUCCESS run and exits 0,
    its red check the only sign. docs/ui.md's row for this way in says so and sends CI to `nightly run`."""
    home = Path(state["NIGHTLY_HOME"])
    prepared = subprocess.run([sys.executable, "-m", "pipelines", "ui", "--print-command"], cwd=PROJECT,
                              env=state, capture_output=True, text=True, timeout=300, check=False)
    assert prepared.returncode == 0, prepared.stderr
    stem = Path(KEY).stem
    done = run_documented(documented_command().replace("FIRST...LAST", f"{KEY}...{KEY}"),
                          {**state, "MINIRL_FAIL": stem})  # the example's failure injection
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"nightly: [1/1] {KEY}  FAILED" in done.stdout, done.stdout[-3000:]
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        [run] = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.SUCCESS
    [row] = [ln for ln in (PROJECT / "docs" / "ui.md").read_text().splitlines()
             if ln.startswith("| command line, Dagster's own |")]
    assert "exits 0" in row and "`nightly run` (exit 1" in row, row
