"""``nightly plan``: readable and JSON output, pools, selection by changed paths, shards, Gantt."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from pipelines.cli import plan as plan_cli
from pipelines.core.model import Catalog
from pipelines.core.specs import unconfigured_name
from tests.conftest import make_test

TESTS = (
    make_test(id="tests/test_a.py", path="tests/test_a.py", est_time=600, gpus=4, suite="stage-c-4-gpu-h200"),
    make_test(id="tests/test_b.py", path="tests/test_b.py", est_time=300, gpus=4, suite="stage-c-4-gpu-h200"),
    make_test(id="tests/test_c.py", path="tests/test_c.py", est_time=900, gpus=8, suite="stage-c-8-gpu-h200"),
    make_test(id="tests/test_h100.py", path="tests/test_h100.py", est_time=100, gpus=8,
              suite="stage-c-8-gpu-h100", hardware="h100"),
    make_test(id="tests/test_off.py", path="tests/test_off.py", disabled="broken on H200"),
    make_test(id="tests/test_long.py", path="tests/test_long.py", labels=("long",)),
)


@pytest.fixture
def fake_catalog(monkeypatch):
    seen = {}

    def load(path, spec, specs, cache_dir=None):
        seen["path"] = path
        return Catalog(repo=str(path), tests=TESTS)

    monkeypatch.setattr(plan_cli, "load_catalog", load)
    return seen


def nightly_plan(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="nightly")
    plan_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["plan", *argv])
    return args.func(args)


def test_json_has_the_figures_and_every_assignment(fake_catalog, tmp_path, capsys):
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=1x8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # no history yet: each test is expected to take est_time / 1.25 (est_time is padded by 1.25)
    assert (out["makespan_s"], out["lower_bound_s"], out["ratio"]) == (1200.0, 1080.0, 1.111111)
    assert out["predicted_median_s"] >= out["lower_bound_s"] and out["predicted_p90_s"] >= out["predicted_median_s"]
    rows = {a["test_id"]: a for a in out["assignments"]}
    assert sorted(rows) == ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py"]
    assert set(rows["tests/test_a.py"]) >= {"test_id", "pool", "node", "start_s", "end_s", "gpus", "timeout_s"}
    assert rows["tests/test_a.py"]["end_s"] - rows["tests/test_a.py"]["start_s"] == 600 / 1.25
    assert rows["tests/test_a.py"]["est_time"] == 600 and rows["tests/test_a.py"]["est_source"] == "registered"
    assert out["unplanned"] == [{"test_id": "tests/test_h100.py", "hardware": "h100", "reason": (
        "no pool runs hardware 'h100'; add it to a pool's `hardware:` list in assets/cluster.yaml")}]
    assert out["skipped"] == [{"test_id": "tests/test_off.py", "reason": "broken on H200"}]
    assert fake_catalog["path"] == tmp_path.resolve()


def test_text_shows_pools_node_timelines_unplanned_and_skipped(fake_catalog, tmp_path, capsys):
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=2x8", "--pool", "h100=1x8"]) == 0
    out = capsys.readouterr().out
    assert "predicted makespan 720s" in out and "lower bound 720s, ratio 1.000" in out  # 900 s / 1.25
    assert "h200/node 0:" in out and "h200/node 1:" in out and "h100/node 0:" in out
    assert "unplanned" not in out
    assert "tests/test_off.py: broken on H200" in out


def test_changed_paths_narrow_the_plan(fake_catalog, tmp_path, capsys):
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=1x8", "--json", "--changed", "tests/test_b.py"]) == 0
    assert [a["test_id"] for a in json.loads(capsys.readouterr().out)["assignments"]] == ["tests/test_b.py"]
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=1x8", "--json", "--changed", "docs/x.md"]) == 0
    assert json.loads(capsys.readouterr().out)["assignments"] == []


def test_a_git_range_selects_the_files_it_changed(fake_catalog, tmp_path, capsys):
    def git(*argv):
        subprocess.run(["git", "-C", str(tmp_path), *argv], check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.email=a@b", "-c", "user.name=n", "commit", "-q", "--allow-empty", "-m", "base")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text(textwrap.dedent("""\
        register_cuda_ci(est_time=600, suite="stage-c-4-gpu-h200", labels=["megatron"])
    """))
    git("add", "tests/test_a.py")
    git("-c", "user.email=a@b", "-c", "user.name=n", "commit", "-q", "-m", "change a")
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=1x8", "--json", "--git-range", "HEAD~1..HEAD"]) == 0
    assert [a["test_id"] for a in json.loads(capsys.readouterr().out)["assignments"]] == ["tests/test_a.py"]


def test_a_bad_git_range_is_a_clear_error(fake_catalog, tmp_path, capsys):
    assert nightly_plan(["--repo", str(tmp_path), "--git-range=--output=x"]) == 2
    assert "--git-range '--output=x': expected A..B" in capsys.readouterr().err


def test_static_shards_print_beside_the_plan(fake_catalog, tmp_path, capsys):
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=2x8", "--shards", "stage-c-4-gpu-h200=2"]) == 0
    out = capsys.readouterr().out
    # on the plan's durations (no history: est_time / 1.25), as the plan's own makespan is
    assert ("static shards (the framework's split, on the est_time in the test files): 16 GPUs held, makespan 720s "
            "on this plan's durations, 900s of est_time (the shard sums below)") in out
    assert "stage-c-4-gpu-h200 shard 1/2 (--auto-partition-id 0):    600s  tests/test_a.py" in out


def test_the_plan_and_the_static_shards_compare_on_the_same_durations(monkeypatch, tmp_path, capsys):
    """One 2000 s test binds both the plan and the shards: 0 %, not the -20 % of est_time's 1.25 padding."""
    tests = (make_test(id="tests/test_long.py", path="tests/test_long.py", est_time=2000),
             make_test(id="tests/test_short.py", path="tests/test_short.py", est_time=400))
    monkeypatch.setattr(plan_cli, "load_catalog", lambda path, spec, specs, cache_dir=None: Catalog(repo=str(path), tests=tests))
    argv = ["--repo", str(tmp_path), "--pool", "h200=2x8", "--shards", "stage-c-4-gpu-h200=2"]
    assert nightly_plan(argv) == 0
    out = capsys.readouterr().out
    assert "makespan 1600s on this plan's durations, 2000s of est_time" in out
    assert ("this plan: 1600s on 16 GPUs (+0.0% vs static shards; both on each test's expected duration (median "
            "from history, else est_time / 1.25))") in out
    assert nightly_plan([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["makespan_s"] == out["static_shards"]["makespan_s"] == 1600.0
    assert out["static_shards"]["basis"] == "expected_s" and out["static_shards"]["est_makespan_s"] == 2000.0


def test_bad_flags_are_errors_that_say_how_to_fix_them(fake_catalog, tmp_path, capsys):
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=four"]) == 2
    assert "--pool 'h200=four': expected NAME=NODESxGPUS" in capsys.readouterr().err
    assert nightly_plan(["--repo", str(tmp_path), "--shards", "stage-c-4-gpu-h200=0"]) == 2
    assert "--shards 'stage-c-4-gpu-h200=0': expected SUITE=N" in capsys.readouterr().err
    assert nightly_plan(["--repo", str(tmp_path), "--suite", "stage-zz"]) == 2
    assert "unknown suite(s) stage-zz" in capsys.readouterr().err


def test_a_test_too_large_for_its_pool_is_unplanned_with_why_and_the_rest_is_planned(fake_catalog, tmp_path, capsys):
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=2x4"]) == 0
    out = capsys.readouterr().out
    assert "tests/test_a.py" in out.split("unplanned:")[0]
    assert ("unplanned: 1 test(s) need more GPUs on one node than their pool's nodes have:\n"
            "    tests/test_c.py: needs 8 GPUs on one node but pool h200 has 4 per node; lower the suite's GPU count, "
            "disable the test, or add a pool with larger nodes in assets/cluster.yaml") in out
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=2x4", "--json"]) == 0
    unplanned = {u["test_id"]: u["reason"] for u in json.loads(capsys.readouterr().out)["unplanned"]}
    assert unplanned["tests/test_c.py"].startswith("no pool has nodes of 8 GPUs: the test needs 8 GPUs on one node")
    assert unplanned["tests/test_h100.py"].startswith("no pool runs hardware 'h100'")


def test_gantt_writes_a_png(fake_catalog, tmp_path, capsys):
    png = tmp_path / "out" / "plan.png"
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=2x8", "--gantt", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gantt_prints_the_path_it_wrote(fake_catalog, tmp_path, capsys):
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=2x8", "--gantt", str(tmp_path / "night")]) == 0
    assert f"gantt chart: {tmp_path / 'night.png'}\n" in capsys.readouterr().out
    assert (tmp_path / "night.png").read_bytes()[:4] == b"\x89PNG" and not (tmp_path / "night").exists()


def test_gantt_refuses_a_folder_and_creates_only_the_files_own_folder(fake_catalog, tmp_path, capsys):
    assert nightly_plan(["--repo", str(tmp_path), "--gantt", str(tmp_path)]) == 2
    assert f"--gantt: {tmp_path} is a folder; give a file name in it, e.g. --gantt {tmp_path / 'plan.png'}" in (
        capsys.readouterr().err)
    deep = tmp_path / "typo" / "deeper" / "plan.png"
    assert nightly_plan(["--repo", str(tmp_path), "--gantt", str(deep)]) == 2
    assert f"--gantt: {deep}: folder {deep.parent} cannot be created" in capsys.readouterr().err
    assert not (tmp_path / "typo").exists()


def test_gantt_that_cannot_be_written_is_the_flags_error_not_a_traceback(fake_catalog, tmp_path, capsys):
    """/proc takes no new folder whoever runs it (root included): one line, exit 2, no plan printed."""
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=2x8", "--gantt", "/proc/nope/x.svg"]) == 2
    out, err = capsys.readouterr()
    # root passes the access probe and fails at mkdir; anyone else is refused by the probe
    assert err.startswith("nightly plan: error: --gantt: cannot write /proc/nope/x.svg (") and err.count("\n") == 1
    assert err.rstrip().endswith("; give a writable path")
    assert "Traceback" not in err and "makespan" not in out


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes any folder")
def test_gantt_in_a_read_only_folder_is_refused_before_planning(fake_catalog, tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    assert nightly_plan(["--repo", str(tmp_path), "--gantt", str(ro / "x.svg")]) == 2
    assert f"--gantt: cannot write {ro / 'x.svg'} ({ro} is not writable)" in capsys.readouterr().err


def test_gantt_folder_not_writable_is_refused_before_planning(fake_catalog, tmp_path, capsys, monkeypatch):
    """The probe as ``report --out`` does it (os.access), checked before the catalog is read."""
    from pipelines.cli import plan_gantt

    ro = tmp_path / "ro"
    monkeypatch.setattr(plan_gantt.os, "access", lambda p, mode: Path(p) != tmp_path)
    monkeypatch.setattr(plan_cli, "load_catalog", lambda *a, **k: pytest.fail("planned before checking --gantt"))
    assert nightly_plan(["--repo", str(tmp_path), "--gantt", str(ro / "x.svg")]) == 2
    assert f"--gantt: cannot write {ro / 'x.svg'} ({tmp_path} is not writable)" in capsys.readouterr().err
    assert not ro.exists()


def test_the_example_repository_plans_on_the_default_pools(project_root: Path, capsys):
    assert nightly_plan(["--repo", str(project_root / "examples" / "minirl"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["assignments"] and out["makespan_s"] >= out["lower_bound_s"] > 0


def test_text_gives_the_simulated_night_and_says_where_each_duration_comes_from(fake_catalog, tmp_path,
                                                                                  monkeypatch, capsys):
    from pipelines.core.history.store import FileHistoryStore
    from pipelines.core.model import Sample

    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    (tmp_path / "repo").mkdir()
    assert nightly_plan(["--repo", str(tmp_path / "repo"), "--pool", "h200=1x8"]) == 0
    first = capsys.readouterr().out
    assert "median of simulated nights" in first and ", p90 " in first
    assert "every duration is est_time / 1.25" in first
    assert "(no history" not in first  # the header says it once on a first night, no row marks

    (tmp_path / "home").mkdir()
    FileHistoryStore(tmp_path / "home" / "history.sqlite").append(
        Sample(tid, "h200", "0" * 64, "passed", secs, f"2026-11-0{day}T01:00:00Z")
        for tid, secs in (("tests/test_a.py", 200.0), ("tests/test_c.py", 500.0)) for day in (1, 2, 3))
    assert nightly_plan(["--repo", str(tmp_path / "repo"), "--pool", "h200=1x8"]) == 0
    out = capsys.readouterr().out
    assert "durations from history for 2 tests, est_time / 1.25 for 1" in out
    rows = {line.split()[-1] if "(" not in line else line.split()[5]: line
            for line in out.splitlines() if line.strip().startswith(tuple("0123456789"))}
    assert "(no history: est_time / 1.25)" in rows["tests/test_b.py"]
    assert "(no history" not in rows["tests/test_a.py"] and "(no history" not in rows["tests/test_c.py"]
    assert "predicted makespan 740s" in out  # 500 s (test_c) + 240 s (test_b: 300 / 1.25) beside 200 s (test_a)


def test_a_wrong_shaped_estimates_entry_is_left_out_with_where_it_is(fake_catalog, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    (tmp_path / "repo").mkdir()
    estimates = tmp_path / "home" / "estimates" / f"{unconfigured_name(tmp_path / 'repo')}.json"
    estimates.parent.mkdir(parents=True)
    text = json.dumps({"tests/test_a.py": [600], "tests/test_b.py": {"est_time": 1000, "sha256": "0" * 64},
                       "tests/test_c.py": {"est_time": "soon", "sha256": "0" * 64}}, indent=1)
    estimates.write_text(text)
    assert nightly_plan(["--repo", str(tmp_path / "repo"), "--pool", "h200=1x8", "--json"]) == 0
    captured = capsys.readouterr()
    rows = {a["test_id"]: a for a in json.loads(captured.out)["assignments"]}
    assert (rows["tests/test_b.py"]["est_time"], rows["tests/test_b.py"]["est_source"]) == (1000, "history")
    assert (rows["tests/test_a.py"]["est_time"], rows["tests/test_c.py"]["est_time"]) == (600, 900)
    assert (f"warning: {estimates}:2: estimates['tests/test_a.py']: expected an object with est_time and sha256, "
            "got list; the test plans with its registered est_time") in captured.err
    assert (f"warning: {estimates}:10: estimates['tests/test_c.py'].est_time: expected whole seconds from 0 to 86400, "
            "got 'soon'; the test plans with its registered est_time") in captured.err
    assert estimates.read_text() == text  # nothing is lost: the file stays as it was


def test_a_selection_that_matches_nothing_says_what_exists_and_exits_3(fake_catalog, tmp_path, capsys):
    assert nightly_plan(["--repo", str(tmp_path), "--labels", "nosuch"]) == plan_cli.EXIT_NOTHING_SELECTED == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert ("nightly plan: nothing selected: --labels nosuch selects none of the 6 test(s) the other flags leave; "
            "labels there: long, megatron (pick one of them, or drop --labels)") in captured.err


def test_changed_paths_may_be_absolute_inside_the_repo(fake_catalog, tmp_path, capsys):
    absolute = str(tmp_path / "tests" / "test_b.py")
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=1x8", "--json", "--changed", absolute]) == 0
    assert [a["test_id"] for a in json.loads(capsys.readouterr().out)["assignments"]] == ["tests/test_b.py"]
    link = tmp_path.parent / f"{tmp_path.name}-link"  # a checkout reached through a symlink
    link.symlink_to(tmp_path)
    through = str(link / "tests" / "test_b.py")
    assert nightly_plan(["--repo", str(link), "--pool", "h200=1x8", "--json", "--changed", through]) == 0
    assert [a["test_id"] for a in json.loads(capsys.readouterr().out)["assignments"]] == ["tests/test_b.py"]
    assert nightly_plan(["--repo", str(tmp_path), "--changed", "/elsewhere/tests/test_b.py"]) == 2
    assert (f"--changed: /elsewhere/tests/test_b.py: outside the repo {tmp_path.resolve()}; give paths inside it"
            in capsys.readouterr().err)


def test_pool_and_shard_counts_past_any_real_fleet_are_refused(fake_catalog, tmp_path, capsys):
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=99999999999x8"]) == 2
    assert ("--pool 'h200=99999999999x8': at most 4096 nodes of at most 64 GPUs per pool; give a real fleet's "
            "shape, e.g. h200=4x8") in capsys.readouterr().err
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=4096x8", "--json"]) == 0  # the limit itself plans
    capsys.readouterr()
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=1x8", "--shards", "stage-c-4-gpu-h200=99999999"]) == 2
    assert ("--shards stage-c-4-gpu-h200=99999999: more shards than the suite has enabled tests (3); the rest "
            "would hold runners with nothing to run; give N from 1 to 3") in capsys.readouterr().err
    # the framework's fixed shard count stays valid when tonight's selection is narrower
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=1x8", "--shards", "stage-c-4-gpu-h200=2",
                         "--changed", "tests/test_b.py"]) == 0


def test_a_new_pool_no_test_can_use_is_a_typo_not_a_plan(fake_catalog, tmp_path, capsys):
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h20=2x8"]) == 2
    assert ("--pool: no registered test runs on the new pool(s) h20 (a new pool runs the hardware of its name); "
            "reshape one of deployment local's pools (h200) or name the hardware the tests need (h100, h200)"
            ) in capsys.readouterr().err


def test_any_backend_the_catalog_reads_can_be_planned(monkeypatch, tmp_path, capsys):
    amd = make_test(id="test/registered/test_amd.py", path="test/registered/test_amd.py", backend="amd",
                    suite="nightly-amd-1-gpu", gpus=1, hardware="mi355")
    monkeypatch.setattr(plan_cli, "load_catalog", lambda path, spec, specs, cache_dir=None: Catalog(repo=str(path), tests=(*TESTS, amd)))
    assert nightly_plan(["--repo", str(tmp_path), "--backend", "amd", "--pool", "mi355=1x8", "--json"]) == 0
    assert [a["test_id"] for a in json.loads(capsys.readouterr().out)["assignments"]] == [amd.id]
    assert nightly_plan(["--repo", str(tmp_path), "--backend", "npu"]) == 3
    assert "--backend npu selects none of the 7 test(s) the other flags leave; backends there: amd, cuda" in (
        capsys.readouterr().err)


def test_plan_skips_the_hardware_the_deployment_skips_as_run_does(tmp_path, monkeypatch, capsys):
    from pipelines.core.runset import RunSelection
    from pipelines.night import Night, NightSettings

    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path))
    rocm = "tests/e2e/ckpt/test_ckpt_resume.py::rocm-stage-c-4-gpu-mi300"  # mi300: in the local deployment's skip_hardware
    assert nightly_plan(["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    run_reasons = {t.id: why for t, why in Night(NightSettings(home=tmp_path)).runset(
        None, RunSelection(cadence="nightly")).skipped}
    assert [u["test_id"] for u in out["unplanned"]] == []
    assert {s["test_id"]: s["reason"] for s in out["skipped"]}[rocm] == run_reasons[rocm]
    assert nightly_plan([]) == 0
    text = capsys.readouterr().out
    assert "skipped by the deployment: 1 test(s) on hardware it never runs (skip_hardware" in text
    assert "add a pool" not in text


def test_changed_paths_that_climb_out_of_the_repo_are_refused_like_absolute_ones(fake_catalog, tmp_path, capsys):
    for climbing in ("../../etc/passwd", "tests/../../x"):
        assert nightly_plan(["--repo", str(tmp_path), "--changed", climbing]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert (f"--changed: {climbing}: outside the repo {tmp_path.resolve()}; give paths inside it"
                in captured.err)
    # a `..` that stays inside names the test it leads to, not "library code" that selects everything
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=1x8", "--json",
                         "--changed", "tests/sub/../test_b.py"]) == 0
    assert [a["test_id"] for a in json.loads(capsys.readouterr().out)["assignments"]] == ["tests/test_b.py"]


def test_plan_reads_the_catalog_with_models_yaml_as_the_run_does(project_root: Path, tmp_path, monkeypatch, capsys):
    """A requirement declared in models.yaml is no problem to plan, and one that is not is named where it is written."""
    import shutil

    assets = tmp_path / "assets"
    shutil.copytree(project_root / "assets", assets)
    repos = (assets / "repos.yaml").read_text().replace("path: examples/minirl", f"path: {project_root}/examples/minirl")
    repos = repos.replace("hub: examples/minirl/hub", f"hub: {project_root}/examples/minirl/hub")
    glob = '    requirements: {"tests/e2e/megatron/test_dp8_chat.py": [extra-judge]}\n'
    repos = repos.replace("    implicit_cpu_dirs: []\n", "    implicit_cpu_dirs: []\n" + glob, 1)
    (assets / "repos.yaml").write_text(repos)
    with (assets / "models.yaml").open("a") as fh:
        fh.write("  extra-judge: {source: org/extra-judge, path: /root/models/extra-judge}\n")
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    assert nightly_plan(["--repo", "minirl"]) == 0
    assert "extra-judge" not in capsys.readouterr().out
    (assets / "repos.yaml").write_text(repos.replace("[extra-judge]", "[extra-judgx]"))
    assert nightly_plan(["--repo", "minirl"]) == 0
    line = repos.splitlines().index(glob.rstrip("\n")) + 1
    assert (f"{assets}/repos.yaml:{line}: repos.minirl.requirements: tests/e2e/megatron/test_dp8_chat.py: unknown "
            "requirement 'extra-judgx'") in capsys.readouterr().out


def test_the_header_says_how_far_the_recent_nights_predictions_were_off(fake_catalog, tmp_path, monkeypatch, capsys):
    home, repo = tmp_path / "home", tmp_path / "fw"
    repo.mkdir()
    (home / "nights").mkdir(parents=True)
    monkeypatch.setenv("NIGHTLY_HOME", str(home))
    assert nightly_plan(["--repo", str(repo), "--pool", "h200=1x8"]) == 0
    assert "prediction error" not in capsys.readouterr().out  # no night recorded yet: nothing to say
    nights = [(1, unconfigured_name(repo), "local", 120.0, 130.0), (2, unconfigured_name(repo), "local", 90.0, 95.0),
              (3, unconfigured_name(repo), "k8s", 300.0, 400.0),  # another deployment's pools: left out
              (4, "other-framework", "local", 500.0, 600.0)]  # another repo's night: left out
    for day, name, deployment, median, p90 in nights:
        night = f"2026-11-0{day}T150000Z"
        (home / "nights" / f"{night}.json").write_text(json.dumps({
            "night": night, "run_id": f"r{day}", "repo": name, "deployment": deployment, "attempts": [],
            "status": "finished", "prediction": {"night": night, "predicted_median_s": median,
                                                 "predicted_p90_s": p90, "actual_s": 100.0, "tests": []}}))
    assert nightly_plan(["--repo", str(repo), "--pool", "h200=1x8"]) == 0
    header = capsys.readouterr().out.split("\n\n")[0].splitlines()
    # +20 % and -10 %: off by 15 % on average, 5 % long; the second night (100 s) ran past its p90 (95 s)
    assert header[-1] == ("  prediction error over the last 2 night(s): makespan off by 15% on average (long by 5%), "
                          "within the p90 on 1/2")


def test_a_test_expected_past_its_timeout_is_flagged_and_counted_only_up_to_it(fake_catalog, tmp_path, monkeypatch,
                                                                                capsys):
    """History says test_a takes 2000 s; its timeout is 750 s (600 x 1.25 over a 60 s floor): the runner kills it
    there every night. The plan says so and schedules it for 750 s, as the simulated nights already cut it."""
    from pipelines.core.history.store import FileHistoryStore
    from pipelines.core.model import Sample

    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    (tmp_path / "repo").mkdir()
    (tmp_path / "home").mkdir()
    FileHistoryStore(tmp_path / "home" / "history.sqlite").append(
        Sample("tests/test_a.py", "h200", "0" * 64, "passed", 2000.0, f"2026-11-0{day}T01:00:00Z") for day in (1, 2, 3))
    argv = ["--repo", str(tmp_path / "repo"), "--pool", "h200=1x8", "--timeout-floor", "60"]
    assert nightly_plan(argv) == 0
    out = capsys.readouterr().out
    # 600 -> 2500 s is more than the x4 the step guard lets through: calibrate holds it, so the advice is accept:
    assert ("warning: tests/test_a.py: expected 2000 s > timeout 750 s: will time out; `nightly calibrate` holds its "
            "proposal of 2500 s for acceptance (a step past max_step_factor); add tests/test_a.py to `accept:` in "
            f"`calibration:` of a new entry for this checkout (`path: {tmp_path / 'repo'}`) in assets/repos.yaml (this "
            "checkout has none; with one it goes by the entry's name") in out
    assert "tests/test_b.py: expected" not in out
    assert nightly_plan([*argv, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    # test_c (8 GPUs, 900 / 1.25 = 720 s) then test_a cut at 750 s beside test_b (240 s); not 720 + 2000
    assert plan["makespan_s"] == 1470.0
    # a CI job reading the JSON gets the same warning, and the test as fields
    ((late,), warnings) = plan["will_time_out"], plan["warnings"]
    assert (late["test_id"], late["expected_s"], late["timeout_s"]) == ("tests/test_a.py", 2000.0, 750)
    assert late["advice"].startswith("`nightly calibrate` holds its proposal of 2500 s for acceptance")
    assert [w for w in warnings if "will time out" in w] == [
        f"warning: tests/test_a.py: expected 2000 s > timeout 750 s: will time out; {late['advice']}"]


SGL_REGISTER = ("def register_cuda_ci(est_time, suite=None, nightly=False, disabled=None, *, stage=None, "
                "runner_config=None):\n    pass\n")


def test_a_changed_library_module_named_test_utils_outside_the_runner_roots_selects_everything(tmp_path, monkeypatch,
                                                                                               capsys):
    """SGLang's python/sglang/test/test_utils.py is imported by every test: library code, not an unlisted test."""
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    repo = tmp_path / "sg"
    files = {"python/sgl/test/ci/ci_register.py": SGL_REGISTER,
             "python/sgl/test/test_utils.py": "def popen_launch_server():\n    pass\n",
             "test/registered/test_llama.py": ("from sgl.test.test_utils import popen_launch_server\n"
                                               "from sgl.test.ci.ci_register import register_cuda_ci\n"
                                               'register_cuda_ci(300, "nightly-1-gpu", nightly=True)\n'),
             "test/registered/test_unlisted.py": "x = 1\n"}
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    assert nightly_plan(["--repo", str(repo), "--pool", "h200=1x8", "--json",
                         "--changed", "python/sgl/test/test_utils.py"]) == 0
    assert [a["test_id"] for a in json.loads(capsys.readouterr().out)["assignments"]] == ["test/registered/test_llama.py"]
    assert nightly_plan(["--repo", str(repo), "--pool", "h200=1x8", "--changed", "python/sgl/test/test_utils.py"]) == 0
    assert "no registration or template job lists" not in capsys.readouterr().out
    # a file the SGLang runner collects (any *.py under test/registered) that registers nothing still selects nothing
    assert nightly_plan(["--repo", str(repo), "--pool", "h200=1x8", "--changed", "test/registered/test_unlisted.py"]) == 0
    assert ("test/registered/test_unlisted.py: no registration or template job lists this test file; it selects nothing"
            in capsys.readouterr().out)


def _noisy_repo(tmp_path, monkeypatch):
    """A framework of two 2-GPU H200 tests with steady history and a 2-GPU H100 test (no pool runs it on
    the local deployment: unplanned) whose history is noisy: (home, the tests by id)."""
    from pipelines.core.history.store import FileHistoryStore
    from pipelines.core.model import Sample
    from pipelines.night import Night, NightSettings
    from tests.support.assets import QUICK_TEST, registry_repo

    h100 = QUICK_TEST.format(est=60).replace("stage-b-2-gpu-h200", "stage-c-2-gpu-h100")
    _, assets = registry_repo(tmp_path, {"test_a.py": QUICK_TEST.format(est=40), "test_b.py": QUICK_TEST.format(est=20),
                                         "test_h100.py": h100})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    home = tmp_path / "home"
    monkeypatch.setenv("NIGHTLY_HOME", str(home))
    tests = {t.id: t for t in Night(NightSettings(home=home, repo="fw")).registered.tests}
    runs = {"tests/e2e/test_a.py": (30.0, 31.0, 29.0, 30.5), "tests/e2e/test_b.py": (15.0, 14.0, 15.5, 16.0),
            "tests/e2e/test_h100.py": (5.0, 60.0, 12.0, 45.0)}  # ten-fold spread: the unplanned test
    home.mkdir(exist_ok=True)
    FileHistoryStore(home / "history.sqlite").append(
        Sample(tid, tests[tid].hardware, tests[tid].sha256, "passed", secs, f"2026-11-0{day}T01:00:00Z")
        for tid, elapsed in runs.items() for day, secs in enumerate(elapsed, 1))
    return home, tests


def test_plan_and_run_list_only_predict_the_same_night_beside_an_unplanned_noisy_test(tmp_path, monkeypatch, capsys):
    """The unplanned H100 test's noisy history once widened the spread `nightly plan` pooled over its tests
    (it fitted every runnable test, the night only those it plans): two p90s for one night."""
    from pipelines.cli import main
    from pipelines.core.runset import RunSelection
    from pipelines.night import Night, NightSettings

    home, _ = _noisy_repo(tmp_path, monkeypatch)
    assert nightly_plan(["--repo", "fw", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert [u["test_id"] for u in planned["unplanned"]] == ["tests/e2e/test_h100.py"]
    assert main(["run", "--home", str(home), "--repo", "fw", "--list-only", "--accept-problems"]) == 0
    listed = capsys.readouterr().out
    assert (f"(median of simulated nights {planned['predicted_median_s']:.1f}s, "
            f"p90 {planned['predicted_p90_s']:.1f}s)") in listed
    # and per test, what the night itself plans with (Night.plan of the tests it runs)
    night = Night(NightSettings(home=home, repo="fw"))
    tonight = night.plan(night.runset(None, RunSelection(cadence="nightly")).run)
    assert {a["test_id"]: (a["expected_s"], a["expected_p90_s"]) for a in planned["assignments"]} == {
        tid: (median, p90) for tid, median, p90, _source in tonight.expected}
    assert (planned["predicted_median_s"], planned["predicted_p90_s"]) == (tonight.predicted_median_s,
                                                                           tonight.predicted_p90_s)


def test_static_shards_are_the_frameworks_split_on_the_est_time_in_its_files_numbered_as_its_runner(
        monkeypatch, tmp_path, capsys):
    """Calibration stored est_time 10 for every test of the suite (estimates/<repo>.json); the framework's runner
    still reads 30/25/15/10 from the files, so its LPT split is {a, d} and {b, c}, 40 s each, not the split of the
    calibrated 10 s. Shard k is the runner's --auto-partition-id k (0-based), in the text and the JSON alike."""
    suite = "stage-c-4-gpu-h200"
    tests = tuple(make_test(id=f"tests/test_{name}.py", path=f"tests/test_{name}.py", est_time=est, gpus=4, suite=suite)
                  for name, est in (("a", 30), ("b", 25), ("c", 15), ("d", 10)))
    monkeypatch.setattr(plan_cli, "load_catalog", lambda path, spec, specs, cache_dir=None: Catalog(repo=str(path), tests=tests))
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    (tmp_path / "repo").mkdir()
    estimates = tmp_path / "home" / "estimates" / f"{unconfigured_name(tmp_path / 'repo')}.json"
    estimates.parent.mkdir(parents=True)
    estimates.write_text(json.dumps({t.id: {"est_time": 10, "sha256": t.sha256} for t in tests}))
    argv = ["--repo", str(tmp_path / "repo"), "--pool", "h200=1x8", "--shards", f"{suite}=2"]
    assert nightly_plan([*argv, "--json"]) == 0
    static = json.loads(capsys.readouterr().out)["static_shards"]
    assert [(s["shard"], s["tests"], s["est_s"]) for s in static["shards"]] == [
        (0, ["tests/test_a.py", "tests/test_d.py"], 40), (1, ["tests/test_b.py", "tests/test_c.py"], 40)]
    assert static["est_makespan_s"] == 40.0
    # the calibrated values are shown apart, labelled: the split once the calibration's patch is in the files
    assert [(s["shard"], s["tests"], s["est_s"]) for s in static["calibrated_shards"]] == [
        (0, ["tests/test_a.py", "tests/test_c.py"], 20), (1, ["tests/test_b.py", "tests/test_d.py"], 20)]
    assert nightly_plan(argv) == 0
    out = capsys.readouterr().out
    framework, calibrated = out.split("static shards (the framework's split")[1].split("calibrated est_time instead")
    assert f"{suite} shard 1/2 (--auto-partition-id 0):     40s  tests/test_a.py, tests/test_d.py" in framework
    assert f"{suite} shard 2/2 (--auto-partition-id 1):     40s  tests/test_b.py, tests/test_c.py" in framework
    assert f"{suite} shard 1/2 (--auto-partition-id 0):     20s  tests/test_a.py, tests/test_c.py" in calibrated


def test_a_test_that_only_timed_out_is_planned_until_its_timeout_and_one_that_only_failed_says_so(
        fake_catalog, tmp_path, monkeypatch, capsys):
    """test_a timed out in each of its 5 runs (750 s, its timeout): it runs at least that long tonight, not
    est_time / 1.25 = 480 s "with no history"; test_b only failed (a failure ends early: est_time / 1.25 stays,
    said as no passing run); test_c passed: from its history as before."""
    from pipelines.core.history.store import FileHistoryStore
    from pipelines.core.model import Sample

    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    (tmp_path / "repo").mkdir()
    (tmp_path / "home").mkdir()
    runs = [("tests/test_a.py", "timed_out", 750.0, True)] * 5 + [("tests/test_b.py", "failed", 20.0, False)] * 3 + [
        ("tests/test_c.py", "passed", 500.0, False)] * 3
    FileHistoryStore(tmp_path / "home" / "history.sqlite").append(
        Sample(tid, "h200", "0" * 64, outcome, secs, f"2026-11-{day:02d}T01:00:00Z", capped=capped)
        for day, (tid, outcome, secs, capped) in enumerate(runs, 1))
    argv = ["--repo", str(tmp_path / "repo"), "--pool", "h200=1x8", "--timeout-floor", "60"]
    assert nightly_plan([*argv, "--json"]) == 0
    rows = {a["test_id"]: a for a in json.loads(capsys.readouterr().out)["assignments"]}
    assert (rows["tests/test_a.py"]["expected_s"], rows["tests/test_a.py"]["expected_from"],
            rows["tests/test_a.py"]["expected_basis"]) == (750.0, "timeouts",
                                                           "timed out in its last 5 runs: at least 750 s")
    assert rows["tests/test_a.py"]["end_s"] - rows["tests/test_a.py"]["start_s"] == 750.0
    assert (rows["tests/test_b.py"]["expected_s"], rows["tests/test_b.py"]["expected_from"],
            rows["tests/test_b.py"]["expected_basis"]) == (240.0, "fallback",
                                                           "no passing run (3 failed): est_time / 1.25")
    assert (rows["tests/test_c.py"]["expected_s"], rows["tests/test_c.py"]["expected_from"],
            rows["tests/test_c.py"]["expected_basis"]) == (pytest.approx(500.0), "history", "")
    assert nightly_plan(argv) == 0
    out = capsys.readouterr().out
    marks = {line.split()[5]: line for line in out.splitlines() if line.strip().startswith(tuple("0123456789"))}
    assert marks["tests/test_a.py"].endswith("tests/test_a.py (timed out in its last 5 runs: at least 750 s)")
    assert marks["tests/test_b.py"].endswith("tests/test_b.py (no passing run (3 failed): est_time / 1.25)")
    assert marks["tests/test_c.py"].endswith("tests/test_c.py")
    assert "no history" not in out
    assert ("durations from history for 1 tests, at least their timeout for 1 that timed out without a passing "
            "run, est_time / 1.25 for 1 without a passing run of their current file (marked below)") in out


@pytest.mark.slow  # two real (tiny) nights: several seconds
def test_a_night_planned_on_est_time_alone_is_recorded_so_and_left_out_of_the_plans_prediction_error(
        tmp_path, monkeypatch, capsys):
    from pipelines.cli import main
    from tests.support.assets import QUICK_TEST, registry_repo

    passing = QUICK_TEST.replace("if __name__", "def execute():\n    print('ok')\n\n\nif __name__").replace(
        "    pass\n", "    execute()\n")  # a test that runs and passes at once
    _, assets = registry_repo(tmp_path, {"test_a.py": passing.format(est=40), "test_b.py": passing.format(est=20)})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    home = tmp_path / "home"
    monkeypatch.setenv("NIGHTLY_HOME", str(home))
    assert main(["run", "--home", str(home), "--repo", "fw"]) == 0
    capsys.readouterr()
    [record] = [json.loads(p.read_text()) for p in (home / "runs").glob("*.json")]
    # no test had history: every planned GPU-second was est_time / 1.25, and each test says so
    assert record["prediction"]["fallback_share"] == 1.0
    assert {t["source"] for t in record["prediction"]["tests"]} == {"fallback"}
    assert nightly_plan(["--repo", "fw"]) == 0
    header = capsys.readouterr().out.split("\n\n")[0]
    assert ("prediction error: no night planned from history yet; 1 night(s) left out: planned mostly on "
            "est_time / 1.25") in header
    assert main(["run", "--home", str(home), "--repo", "fw"]) == 0  # planned on the first night's runs
    capsys.readouterr()
    assert nightly_plan(["--repo", "fw"]) == 0
    header = capsys.readouterr().out.split("\n\n")[0]
    assert "prediction error over the last 1 night(s): makespan off by" in header
    assert "; 1 night(s) left out: planned mostly on est_time / 1.25" in header


def test_gantt_draws_a_cpu_test_on_its_own_row_even_when_it_ends_the_night(monkeypatch, tmp_path, capsys):
    """A 0-GPU test holds no GPU row: it had no bar at all, though here it sets the makespan (4000 s)."""
    cpu = make_test(id="tests/test_cpu.py", path="tests/test_cpu.py", est_time=5000, gpus=0, backend="cpu",
                    suite="stage-a-cpu", hardware="cpu")
    monkeypatch.setattr(plan_cli, "load_catalog", lambda path, spec, specs, cache_dir=None: Catalog(repo=str(path),
                                                                                   tests=(*TESTS[:3], cpu)))
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    svg = tmp_path / "plan.svg"
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=1x8", "--json", "--gantt", str(svg)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["makespan_s"] == 4000.0 and plan["assignments"][0]["test_id"] == "tests/test_cpu.py"
    text = svg.read_text()
    assert "h200/0:cpu" in text  # the CPU row, labelled, below the node's 8 GPU rows
    assert ">tests/test_cpu.py<" in text  # and its bar, labelled with the test
    assert text.count("h200/0:") == 9


SG_REGISTER = "".join(f"def register_{b}_ci(est_time: float, suite=None, nightly=False, disabled=None, *, stage=None, "
                      "runner_config=None):\n    return None\n\n" for b in ("cpu", "cuda", "amd"))


def test_static_shards_split_on_the_est_time_the_file_writes_not_on_it_rounded_up(tmp_path, monkeypatch, capsys):
    """SGLang's auto_partition sorts and sums the file's 45.9 and 45.2: rounded up, both are 46, the tie goes by
    path and test_a lands first, alone. Split as the runner splits: shard 0 = [test_b], shard 1 = [test_a, test_c]."""
    from pipelines.cli import main

    repo = tmp_path / "sg"
    files = {"python/sgl/test/ci/ci_register.py": SG_REGISTER,
             "test/registered/test_a.py": "register_cuda_ci(45.2, stage=\"stage-b\", runner_config=\"1-gpu-large\")\n",
             "test/registered/test_b.py": "register_cuda_ci(45.9, stage=\"stage-b\", runner_config=\"1-gpu-large\")\n",
             "test/registered/test_c.py": "register_cuda_ci(40, stage=\"stage-b\", runner_config=\"1-gpu-large\")\n"}
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    argv = ["plan", "--repo", str(repo), "--cadence", "pr", "--shards", "stage-b-test-1-gpu-large=2"]
    assert main([*argv, "--json"]) == 0
    static = json.loads(capsys.readouterr().out)["static_shards"]
    assert [(s["shard"], s["tests"], s["est_s"]) for s in static["shards"]] == [
        (0, ["test/registered/test_b.py"], 45.9), (1, ["test/registered/test_a.py", "test/registered/test_c.py"], 85.2)]
    assert static["est_makespan_s"] == 85.2
    assert main(argv) == 0
    assert "(--auto-partition-id 1):   85.2s  test/registered/test_a.py, test/registered/test_c.py" in capsys.readouterr().out


def test_sglang_amd_suites_naming_the_backend_or_size_before_the_chip_run_on_the_chip(tmp_path, monkeypatch, capsys):
    """`stage-c-test-large-8-gpu-amd-mi35x` and `stage-b-test-1-gpu-small-amd-mi35x` are mi35x suites, as
    `stage-b-test-large-8-gpu-mi35x-disaggregation-amd` is: the words before the chip (backend, runner size) name
    no hardware, so a mi35x pool plans all three; a suite naming no chip (`...-1-gpu-small-amd`) keeps its alias."""
    from pipelines.cli import main

    repo = tmp_path / "sg"
    suites = ["stage-c-test-large-8-gpu-amd-mi35x", "stage-b-test-1-gpu-small-amd-mi35x",
              "stage-b-test-large-8-gpu-mi35x-disaggregation-amd", "stage-b-test-1-gpu-small-amd"]
    files = {"python/sgl/test/ci/ci_register.py": SG_REGISTER,
             **{f"test/registered/test_{i}.py": f'register_amd_ci(100, "{s}")\n' for i, s in enumerate(suites)}}
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    assert main(["plan", "--repo", str(repo), "--cadence", "pr", "--pool", "mi35x=1x8", "--backend", "amd",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(a["test_id"] for a in out["assignments"]) == [f"test/registered/test_{i}.py" for i in range(3)]
    assert [(u["test_id"], u["hardware"]) for u in out["unplanned"]] == [
        ("test/registered/test_3.py", "1-gpu-small-amd")]


def test_sglang_suites_naming_a_model_after_the_gpu_count_keep_their_whole_hardware(tmp_path, monkeypatch, capsys):
    """SGLang's `nightly-amd-accuracy-8-gpu-deepseek-v31` names a model, not a chip `v31`: only the backend and
    runner-size words (amd, large, small) are skipped before a chip, so these keep the hardware they always had
    (`8-gpu-deepseek-v31`), which pools and history name; `...-8-gpu-amd-mi35x` still runs on mi35x."""
    from pipelines.cli import main

    repo = tmp_path / "sg"
    suites = ["nightly-amd-accuracy-8-gpu-deepseek-v31", "nightly-amd-accuracy-8-gpu-deepseek-v4-flash",
              "nightly-8-gpu-kimi-k25-rocm720", "nightly-amd-8-gpu-amd-mi35x"]
    files = {"python/sgl/test/ci/ci_register.py": SG_REGISTER,
             **{f"test/registered/test_{i}.py": f'register_amd_ci(100, "{s}", nightly=True)\n'
                for i, s in enumerate(suites)}}
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    assert main(["plan", "--repo", str(repo), "--cadence", "nightly", "--pool", "mi35x=1x8",
                 "--pool", "8-gpu-deepseek-v31=1x8", "--backend", "amd", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(a["test_id"] for a in out["assignments"]) == ["test/registered/test_0.py", "test/registered/test_3.py"]
    assert [(u["test_id"], u["hardware"]) for u in out["unplanned"]] == [
        ("test/registered/test_1.py", "8-gpu-deepseek-v4-flash"), ("test/registered/test_2.py", "8-gpu-kimi-k25-rocm720")]


@pytest.mark.slow  # one real (tiny) night
def test_an_l40s_nights_durations_do_not_plan_an_h200_night_of_tests_that_name_no_gpu_type(
        tmp_path, monkeypatch, capsys):
    """SGLang's untyped runner configs ran on an L40S deployment; `plan --deployment local` (H200) then
    said every test's duration came from its history: samples were recorded with hardware ""."""
    import shutil

    from pipelines.cli import main
    from pipelines.core.history.store import FileHistoryStore
    from tests.support.assets import example_assets

    repo = tmp_path / "sglangish"
    shutil.copytree(Path(__file__).parents[2] / "examples" / "sglangish", repo)
    assets = example_assets(tmp_path / "assets")
    cluster = assets / "cluster.yaml"
    cluster.write_text(cluster.read_text().replace("  production:\n", (
        "  l40s:\n    launcher: local\n    storage: local\n    pools:\n      l40s: {nodes: 1, gpus_per_node: 8}\n"
        "  production:\n"), 1))
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    home = tmp_path / "home"
    monkeypatch.setenv("NIGHTLY_HOME", str(home))
    assert main(["run", "--home", str(home), "--repo", str(repo), "--deployment", "l40s"]) == 0
    capsys.readouterr()
    ran = FileHistoryStore(home / "history.sqlite").read()
    assert ran and {s.hardware for s in ran} == {"l40s"}
    assert nightly_plan(["--repo", str(repo), "--deployment", "local", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)["assignments"]
    assert planned and {a["expected_from"] for a in planned} == {"fallback"}
    assert nightly_plan(["--repo", str(repo), "--deployment", "l40s", "--json"]) == 0
    assert {a["expected_from"] for a in json.loads(capsys.readouterr().out)["assignments"]} == {"history"}


def test_a_test_of_no_gpu_type_goes_to_the_first_pool_whose_nodes_hold_it(monkeypatch, tmp_path, capsys):
    """With l40s (2 x 4 GPUs) listed before h200 (1 x 8), the 8-GPU template tests were left unplanned on
    l40s with advice to add a pool with larger nodes: the deployment had one."""
    from tests.support.assets import example_assets

    assets = example_assets(tmp_path / "assets")
    cluster = assets / "cluster.yaml"
    text = cluster.read_text()
    assert "      h200: {nodes: 1, gpus_per_node: 8}\n" in text
    cluster.write_text(text.replace("      h200: {nodes: 1, gpus_per_node: 8}\n",
                                    "      l40s: {nodes: 2, gpus_per_node: 4}\n      h200: {nodes: 1, gpus_per_node: 8}\n",
                                    1))
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    tests = (make_test(id="tests/test_dpo.py", path="tests/test_dpo.py", suite="e2e-test-fsdp", hardware="", gpus=8),
             make_test(id="tests/test_sft.py", path="tests/test_sft.py", suite="e2e-test-fsdp", hardware="", gpus=4),
             make_test(id="tests/test_huge.py", path="tests/test_huge.py", suite="e2e-test-fsdp", hardware="", gpus=16))
    monkeypatch.setattr(plan_cli, "load_catalog", lambda path, spec, specs, cache_dir=None: Catalog(repo=str(path), tests=tests))
    assert nightly_plan(["--repo", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {a["test_id"]: a["pool"] for a in out["assignments"]} == {"tests/test_dpo.py": "h200",
                                                                     "tests/test_sft.py": "l40s"}
    assert out["unplanned"] == [{"test_id": "tests/test_huge.py", "hardware": "", "reason": (
        "no pool has nodes of 16 GPUs: the test needs 16 GPUs on one node but the largest nodes of this "
        "deployment's pools have 8 (pool h200); lower the test's GPU count, disable it, or give a pool nodes of 16 "
        "GPUs or more in assets/cluster.yaml")}]


def test_no_improve_is_the_wide_first_base_order_and_its_help_says_so(monkeypatch, tmp_path, capsys):
    """The help said "plain longest-first list schedule only"; with the duration model every plan has, the
    base order is wide-first (median x sqrt(GPUs)): an 8-GPU test of 720 s goes before a 4-GPU one of 800 s."""
    import contextlib
    import io

    tests = (make_test(id="tests/test_wide.py", path="tests/test_wide.py", est_time=900, gpus=8),
             make_test(id="tests/test_long.py", path="tests/test_long.py", est_time=1000, gpus=4))
    monkeypatch.setattr(plan_cli, "load_catalog", lambda path, spec, specs, cache_dir=None: Catalog(repo=str(path), tests=tests))
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=1x8", "--no-improve", "--json"]) == 0
    order = [a["test_id"] for a in sorted(json.loads(capsys.readouterr().out)["assignments"], key=lambda a: a["priority"])]
    assert order == ["tests/test_wide.py", "tests/test_long.py"]  # longest-first would start test_long first
    text = io.StringIO()
    with contextlib.redirect_stdout(text), pytest.raises(SystemExit):
        nightly_plan(["--help"])
    helped = " ".join(text.getvalue().split())
    assert "longest-first list schedule only" not in helped
    assert "wide-first (longest-first on each test's median x sqrt(GPUs)" in helped


def test_a_changed_test_the_cadence_leaves_out_is_named_with_why_not_called_no_test(fake_catalog, tmp_path, capsys):
    """`plan --changed tests/e2e/fsdp/test_fsdp_long_math.py` said "they select no test": the file selected
    itself and the nightly cadence dropped it for its `long` label."""
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=1x8", "--changed", "tests/test_long.py"]) == 0
    out = capsys.readouterr().out
    assert "they select no test" not in out
    assert ("  selected by 1 changed path(s); the other flags leave out 1 test(s) they select (nothing left to plan):\n"
            "    tests/test_long.py: --cadence nightly leaves it out: its label long (framework M's runner skips long "
            "and ft-long tests on nightly); --cadence ") in out
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=1x8", "--json", "--labels", "megatron",
                         "--changed", "tests/test_long.py", "tests/test_a.py"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [a["test_id"] for a in out["assignments"]] == ["tests/test_a.py"]
    assert out["left_out"] == [{"test_id": "tests/test_long.py", "reason": (
        "--labels megatron leaves it out (its labels: long)")}]


def test_the_cadence_reason_names_nightly_only_and_the_sglang_rule(monkeypatch, tmp_path, capsys):
    from pipelines.cli.plan_view import cadence_reason

    only = make_test(id="tests/test_n.py", path="tests/test_n.py", nightly=True)
    other = make_test(id="tests/test_o.py", path="tests/test_o.py")
    monkeypatch.setattr(plan_cli, "load_catalog", lambda path, spec, specs, cache_dir=None: Catalog(repo=str(path),
                                                                                    tests=(only, other)))
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=1x8", "--cadence", "pr", "--json",
                         "--changed", "tests/test_n.py"]) == 0
    assert json.loads(capsys.readouterr().out)["left_out"] == [{"test_id": "tests/test_n.py", "reason": (
        "--cadence pr leaves it out: it is nightly=True, which pr skips; --cadence nightly or weekly or release "
        "runs it")}]
    sg = make_test(nightly_rule="exclusive", nightly=False)
    assert cadence_reason(sg, "nightly").startswith(
        "--cadence nightly leaves it out: in this framework nightly runs exactly the nightly=True tests")


def test_calibrated_est_time_that_only_reorders_a_shard_is_no_other_split(monkeypatch, tmp_path, capsys):
    """One shard of two tests, calibration swaps which is longer: the same shard, yet the plan printed
    "on nightly-e2e's calibrated est_time instead" with the same tests in the other order."""
    suite = "stage-c-4-gpu-h200"
    tests = tuple(make_test(id=f"tests/test_{name}.py", path=f"tests/test_{name}.py", est_time=est, gpus=4, suite=suite)
                  for name, est in (("a", 30), ("b", 20)))
    monkeypatch.setattr(plan_cli, "load_catalog", lambda path, spec, specs, cache_dir=None: Catalog(repo=str(path), tests=tests))
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    (tmp_path / "repo").mkdir()
    estimates = tmp_path / "home" / "estimates" / f"{unconfigured_name(tmp_path / 'repo')}.json"
    estimates.parent.mkdir(parents=True)
    estimates.write_text(json.dumps({"tests/test_a.py": {"est_time": 10, "sha256": tests[0].sha256}}))
    argv = ["--repo", str(tmp_path / "repo"), "--pool", "h200=1x8", "--shards", f"{suite}=1"]
    assert nightly_plan([*argv, "--json"]) == 0
    static = json.loads(capsys.readouterr().out)["static_shards"]
    assert static["shards"][0]["tests"] == ["tests/test_a.py", "tests/test_b.py"]
    assert "calibrated_shards" not in static
    assert nightly_plan(argv) == 0
    assert "calibrated est_time instead" not in capsys.readouterr().out


def test_shards_for_a_suite_the_deployment_skips_are_named_not_dropped(monkeypatch, tmp_path, capsys):
    """`--shards stage-c-4-gpu-mi300=1` on the local deployment (skip_hardware: mi300) printed nothing for it."""
    tests = (make_test(id="tests/test_a.py", path="tests/test_a.py", suite="stage-c-4-gpu-h200"),
             make_test(id="tests/test_rocm.py", path="tests/test_rocm.py", backend="rocm", suite="stage-c-4-gpu-mi300",
                       hardware="mi300"))
    monkeypatch.setattr(plan_cli, "load_catalog", lambda path, spec, specs, cache_dir=None: Catalog(repo=str(path), tests=tests))
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    argv = ["--repo", str(tmp_path), "--shards", "stage-c-4-gpu-mi300=1"]
    assert nightly_plan(argv) == 0
    assert ("    --shards stage-c-4-gpu-mi300: no test of it is planned here (1 on hardware mi300 that deployment local "
            "skips (skip_hardware)), so it has no static shards to show") in capsys.readouterr().out
    assert nightly_plan([*argv, "--json"]) == 0
    static = json.loads(capsys.readouterr().out)["static_shards"]
    assert [s["suite"] for s in static["shards"]] == ["stage-c-4-gpu-h200"]
    assert [n["suite"] for n in static["not_shown"]] == ["stage-c-4-gpu-mi300"]


def test_the_same_pool_given_twice_is_refused_not_the_last_kept(fake_catalog, tmp_path, capsys):
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=4x8", "--pool", "h200=1x8"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("nightly plan: error: --pool: pool h200 given more than once (h200=4x8, h200=1x8); "
                            "give each pool once\n")


def test_an_empty_gantt_asks_for_a_file_as_a_folder_is_refused_too(fake_catalog, tmp_path, capsys):
    """`--gantt ""` said "give a folder or file", and the folder it suggested is refused."""
    with pytest.raises(SystemExit) as exc:
        nightly_plan(["--repo", str(tmp_path), "--gantt", ""])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "folder" not in err.split("--gantt:")[-1]
    assert ("argument --gantt: empty path; give a file name (.png, .svg, .pdf), e.g. --gantt plan.png, or leave the "
            "flag out") in err
    assert nightly_plan(["--repo", str(tmp_path), "--gantt", str(tmp_path)]) == 2
    assert "is a folder; give a file name in it" in capsys.readouterr().err


def test_a_git_range_of_one_revision_is_refused_not_read_as_the_working_tree(fake_catalog, tmp_path, capsys):
    """`--git-range HEAD` ran `git diff HEAD`: the working tree against HEAD, not a range of commits."""
    subprocess.run(["git", "-C", str(tmp_path), "init", "-q"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=a@b", "-c", "user.name=n", "commit", "-q",
                    "--allow-empty", "-m", "base"], check=True)
    assert nightly_plan(["--repo", str(tmp_path), "--pool", "h200=1x8", "--git-range", "HEAD"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert ("nightly plan: error: --git-range 'HEAD': expected a range A..B (two revisions, e.g. origin/main..HEAD); "
            "one revision would compare the working tree with it, not two commits: for uncommitted changes give "
            "--changed FILE...") in captured.err


def test_plan_home_reads_the_state_folder_a_night_run_with_the_same_home_reads(tmp_path, monkeypatch, capsys):
    """`nightly run --labels lora --home /tmp/n1` (docs/run.md) makes a state folder `nightly plan` could not be
    pointed at: it took no --home. It plans from that folder's history (and estimates, quarantines, cache)."""
    from pipelines.cli import main
    from pipelines.core.history.store import FileHistoryStore
    from pipelines.core.model import Sample
    from pipelines.night import Night, NightSettings
    from tests.support.assets import QUICK_TEST, registry_repo

    _, assets = registry_repo(tmp_path, {"test_a.py": QUICK_TEST.format(est=40)})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "default"))
    home = tmp_path / "n1"
    [test] = Night(NightSettings(home=home, repo="fw")).registered.tests
    home.mkdir(exist_ok=True)
    FileHistoryStore(home / "history.sqlite").append(
        Sample(test.id, test.hardware, test.sha256, "passed", secs, f"2026-11-0{day}T01:00:00Z")
        for day, secs in enumerate((10.0, 11.0, 10.5), 1))
    assert main(["plan", "--repo", "fw", "--json", "--home", str(home)]) == 0
    [planned] = json.loads(capsys.readouterr().out)["assignments"]
    assert planned["expected_from"] == "history" and 10 <= planned["expected_s"] <= 11, planned
    assert (home / "cache").is_dir() and not (tmp_path / "default" / "cache").exists()
    assert main(["plan", "--repo", "fw", "--json"]) == 0  # the default state has no history: est_time / 1.25
    [default] = json.loads(capsys.readouterr().out)["assignments"]
    assert default["expected_from"] == "fallback" and default["expected_s"] == 32, default


def test_a_test_that_only_timed_out_is_advised_what_raises_its_est_time_not_a_calibrate_that_keeps_it(
        tmp_path, monkeypatch, capsys):
    """est_time 15 s, killed after 1800 s and once failed: the plan expects 1800 s past its 60 s timeout.
    bucket125 without raise_on_timeout keeps 15 s, so "run `nightly calibrate`" was advice that changed
    nothing; the warning says what does, and keeps `nightly calibrate` once the repo's policy raises."""
    from pipelines.cli import main
    from pipelines.core.history.store import FileHistoryStore
    from pipelines.core.model import Sample
    from pipelines.night import Night, NightSettings
    from tests.support.assets import QUICK_TEST, registry_repo

    _, assets = registry_repo(tmp_path, {"test_a.py": QUICK_TEST.format(est=15)})
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))
    home = tmp_path / "home"
    monkeypatch.setenv("NIGHTLY_HOME", str(home))
    [t] = Night(NightSettings(home=home, repo="fw")).registered.tests
    home.mkdir(exist_ok=True)
    FileHistoryStore(home / "history.sqlite").append([
        Sample(t.id, t.hardware, t.sha256, "timed_out", 1800.0, "2026-11-01T01:00:00Z", capped=True),
        Sample(t.id, t.hardware, t.sha256, "failed", 20.0, "2026-11-02T01:00:00Z")])
    argv = ["--repo", "fw", "--timeout-floor", "60"]
    keeps = (f"warning: {t.id}: expected 1800 s > timeout 60 s: will time out; `nightly calibrate` keeps est_time 15: "
             "the repo's calibration policy (bucket125) does not raise est_time after a timeout; set "
             "`raise_on_timeout: true` in `calibration:` of repo fw in assets/repos.yaml, or raise est_time in "
             f"{t.path} by hand (e.g. to 2300 s)")
    assert nightly_plan(argv) == 0
    assert keeps in capsys.readouterr().out
    assert main(["run", "--list-only", *argv]) == 0
    assert keeps in capsys.readouterr().out
    assert main(["calibrate", "--repo", "fw"]) == 0  # what the advice says calibrate does
    assert "keeps est_time" in capsys.readouterr().out
    with open(assets / "repos.yaml", "a") as fh:
        fh.write("    calibration: {raise_on_timeout: true}\n")
    raises = (f"warning: {t.id}: expected 1800 s > timeout 60 s: will time out; run `nightly calibrate` (it proposes "
              "est_time 2300 s; --write applies it)")
    assert nightly_plan(argv) == 0
    assert raises in capsys.readouterr().out
    assert main(["run", "--list-only", *argv]) == 0
    assert raises in capsys.readouterr().out
    assert main(["calibrate", "--repo", "fw"]) == 0
    assert "raised: the newest run timed out after 1800 s" in capsys.readouterr().out
