"""The ``nightly`` command as a user runs it: ``python -m pipelines`` in a subprocess, state in a temp folder.

Expected values come from the example's files (globbed and read as text here), never from the
code under test, so a catalog that drops or invents a test fails.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipelines.cli import COMMANDS
from tests.support.env import child_env

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[2]
EXAMPLE = PROJECT / "examples" / "minirl"
REGISTER = re.compile(r"^register_(cuda|rocm|cpu)_ci\(", re.M)


def clean_environ() -> dict[str, str]:
    """This process's environment without settings another test may have left (DAGSTER_HOME ...)."""
    return child_env("NIGHTLY_", "DAGSTER_")


def nightly(*args: str, home: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m pipelines ARGS`` from the project root with ``NIGHTLY_HOME=home``.

    A command takes a few seconds idle (most of it imports) and can take a minute on a loaded
    2-CPU machine: the timeout only stops a hang, no verdict depends on how fast it ran.
    """
    env = {**clean_environ(), "NIGHTLY_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "pipelines", *args], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("nightly-home")


@pytest.fixture(scope="module")
def catalog(home: Path) -> list[dict]:
    out = nightly("catalog", "--json", home=home)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def example_files() -> dict[str, str]:
    """Every test file of the example that registers itself, by repo-relative path."""
    files = {}
    for path in sorted((EXAMPLE / "tests").rglob("test_*.py")):
        text = path.read_text()
        if REGISTER.search(text):
            files[path.relative_to(EXAMPLE).as_posix()] = text
    return files


def test_catalog_json_lists_every_registered_example_file_with_the_documented_fields(catalog):
    files = example_files()
    assert len(files) >= 8
    assert {t["path"] for t in catalog} == set(files)
    fields = {"id", "path", "backend", "suite", "gpus", "est_time", "labels", "nightly", "disabled", "requirements"}
    for t in catalog:
        assert set(t) == fields, t["id"]
        assert t["id"] == t["path"] or t["id"].startswith(t["path"] + "::"), t
        assert t["gpus"] == int(re.search(r"-(\d+)-gpu-", t["suite"]).group(1)), t
        assert isinstance(t["est_time"], int) and t["est_time"] > 0, t
        assert t["backend"] in ("cuda", "rocm", "cpu"), t
    assert len({t["id"] for t in catalog}) == len(catalog), "test ids must be unique partition keys"
    for path, text in files.items():
        assert sum(1 for t in catalog if t["path"] == path) == len(REGISTER.findall(text)), path
    assert {2, 4, 8} <= {t["gpus"] for t in catalog}


def test_catalog_json_marks_the_disabled_test_and_the_nightly_only_test(catalog):
    files = example_files()
    disabled = {t["path"] for t in catalog if t["disabled"]}
    nightly_only = {t["path"] for t in catalog if t["nightly"]}
    assert disabled == {p for p, text in files.items() if "disabled=" in text}
    assert nightly_only == {p for p, text in files.items() if "nightly=True" in text}
    assert len(disabled) == 1 and len(nightly_only) == 1
    (reason,) = [t["disabled"] for t in catalog if t["disabled"]]
    assert isinstance(reason, str) and reason.strip()


@pytest.fixture
def broken_repo(tmp_path: Path) -> Path:
    files = {
        "tests/e2e/test_good.py": """
            from fw.ci import register_cuda_ci

            register_cuda_ci(est_time=60, suite="stage-b-2-gpu-h200", labels=["short"])
            """,
        "tests/e2e/test_bad.py": '''
            """A registration whose est_time is not a number."""
            from fw.ci import register_cuda_ci

            register_cuda_ci(est_time="soon", suite="stage-b-2-gpu-h200")
            ''',
    }
    for rel, text in files.items():
        path = tmp_path / "repo" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return tmp_path / "repo"


def test_a_broken_registration_is_reported_as_path_line_field_message_and_strict_fails(broken_repo, home):
    out = nightly("catalog", "--repo", str(broken_repo), home=home)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    problems = [line for line in out.stderr.splitlines() if line.startswith("tests/e2e/test_bad.py:")]
    assert problems, out.stderr
    path, line, field, message = re.fullmatch(r"(\S+):(\d+): (\w+): (.+)", problems[0]).groups()
    assert (path, line, field) == ("tests/e2e/test_bad.py", "4", "est_time")
    assert "soon" in message
    assert "tests/e2e/test_good.py" in out.stdout, "a bad file must not hide the good ones"
    assert "tests/e2e/test_bad.py" not in out.stdout

    strict = nightly("catalog", "--repo", str(broken_repo), "--strict", home=home)
    assert strict.returncode != 0
    assert "tests/e2e/test_bad.py:4: est_time:" in strict.stderr
    assert "--strict" in strict.stderr


def overlaps_exceed_capacity(assignments: list[dict], gpus_per_node: int) -> list[str]:
    """Instants where one node's running tests hold more GPUs than it has (empty when none)."""
    bad = []
    for a in assignments:
        t = a["start_s"]
        held = sum(b["gpus"] for b in assignments
                   if b["node"] == a["node"] and b["start_s"] <= t < b["end_s"])
        if held > gpus_per_node:
            bad.append(f"node {a['node']} at {t}s holds {held} GPUs")
    return bad


def test_plan_json_places_every_enabled_test_within_the_pool_and_reports_the_bounds(catalog, home):
    out = nightly("plan", "--json", home=home)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["makespan_s"] >= plan["lower_bound_s"] > 0
    assert plan["ratio"] == pytest.approx(plan["makespan_s"] / plan["lower_bound_s"], abs=1e-5)
    assert plan["makespan_s"] == max(a["end_s"] for a in plan["assignments"])

    by_id = {t["id"]: t for t in catalog}
    planned = {a["test_id"] for a in plan["assignments"]}
    unplanned = {u["test_id"] for u in plan["unplanned"]}
    skipped = {s["test_id"] for s in plan["skipped"]}
    # the nightly cadence runs every enabled test except the `long` ones
    expected = {t["id"] for t in catalog if not t["disabled"] and "long" not in t["labels"]}
    not_here = {s["test_id"] for s in plan["skipped"] if s["reason"].startswith("not run here")}  # skip_hardware
    assert planned | unplanned | not_here == expected
    assert planned, "the default pools must run some of the example"
    assert skipped - not_here == {t["id"] for t in catalog if t["disabled"]}
    for a in plan["assignments"]:
        t = by_id[a["test_id"]]
        assert a["gpus"] == t["gpus"] and a["path"] == t["path"], a
        # planned on the expected duration: measured (history) or, without history, est_time / 1.25
        assert a["end_s"] - a["start_s"] == pytest.approx(a["expected_s"], rel=1e-6), a
        if a["expected_from"] == "fallback":
            assert a["expected_s"] == pytest.approx(t["est_time"] / 1.25), a
        assert a["timeout_s"] >= t["est_time"], a
    for pool in plan["pools"]:
        rows = [a for a in plan["assignments"] if a["pool"] == pool["pool"]]
        assert overlaps_exceed_capacity(rows, pool["gpus_per_node"]) == []


def test_run_list_only_prints_the_plan_and_starts_nothing(tmp_path, catalog):
    home = tmp_path / "state"
    out = nightly("run", "--list-only", home=home)
    assert out.returncode == 0, out.stderr
    assert re.search(r"plan: \d+ tests, predicted makespan [\d.]+s( \(median of simulated nights [\d.]+s, p90 [\d.]+s\))?, "
                     r"lower bound [\d.]+s, ratio [\d.]+", out.stdout)
    for t in catalog:
        if t["disabled"]:
            assert re.search(rf"skip\s+{re.escape(t['id'])}\s+disabled: ", out.stdout), out.stdout
        elif "long" not in t["labels"]:
            assert t["id"] in out.stdout
    assert "running" not in out.stdout
    assert not (home / "dagster").exists()
    # nothing but the catalog's digest cache (which `nightly catalog` and `plan` write too): no history,
    # no logs, no Dagster instance, no built inputs
    left = sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file()) if home.exists() else []
    assert all(p.startswith("cache/catalog") for p in left), left


def test_run_with_an_unknown_suite_fails_with_a_message_naming_the_known_suites(tmp_path, catalog):
    home = tmp_path / "state"
    out = nightly("run", "--suite", "no-such-suite", home=home)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr[-1500:]
    assert "no-such-suite" in out.stderr
    for suite in {t["suite"] for t in catalog}:
        assert suite in out.stderr
    assert not (home / "dagster").exists(), "nothing may start for a selection that cannot run"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_prints_its_help(command, home):
    out = nightly(command, "--help", home=home)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: nightly {command}")
    assert "--help" in out.stdout and "options:" in out.stdout


def test_the_top_level_help_lists_every_subcommand_and_no_command_is_an_error(home):
    out = nightly("--help", home=home)
    assert out.returncode == 0
    for command in COMMANDS:
        assert command in out.stdout
    bare = nightly(home=home)
    assert bare.returncode == 2
    assert "required: COMMAND" in bare.stderr


def test_ui_print_command_points_dagster_dev_at_the_state_folders_instance(tmp_path):
    home = tmp_path / "state"
    out = nightly("ui", "--print-command", "--port", "3999", home=home)
    assert out.returncode == 0, out.stderr
    words = shlex.split(out.stdout.strip())
    assert words[:2] == [f"DAGSTER_HOME={home / 'dagster'}", f"NIGHTLY_HOME={home}"]
    assert Path(words[2]).name == "dagster" and words[3:5] == ["dev", "-w"]
    assert Path(words[5]) == PROJECT / "workspace.yaml"
    assert words[-2:] == ["-p", "3999"]
    config = (home / "dagster" / "dagster.yaml").read_text()
    assert re.search(r"telemetry:\s*\n\s+enabled: false", config), config
    assert re.search(r"nux:\s*\n\s+enabled: false", config), config
    assert str(home / "dagster" / "storage") in config
