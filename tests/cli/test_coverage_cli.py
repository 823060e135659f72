"""``nightly coverage``: the proof table, missing cells, cells a commit lost, and designed matrices."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pipelines.cli import main
from pipelines.core.coverage import configurations_by_test, uncovered_cells
from tests.core.coverage.siblings import ANTI_DIAGONAL, DIAGONAL
from tests.core.coverage.siblings import sibling as unregistered

#: appended, so that the matrix keeps its lines: only a registered test's configurations count
REGISTER = '\nregister_cuda_ci(est_time=60, suite="stage-b-2-gpu-h200", labels=["lora"])\n'

FIVE, SIX = "tests/lora/test_moe_5layer.py", "tests/lora/test_moe_6layer.py"
GROUPS = """\
repos:
  fw:
    groups:
      - name: lora-moe
        tests: [tests/lora/test_moe_5layer.py, tests/lora/test_moe_6layer.py]
        dimensions:
          backend: [megatron, tilelang]
          layout:
            fields: [shared_outer, virtual_experts]
            values: {shared+virtual: [true, true], per-expert: [false, false]}
"""


def sibling(*configs: tuple, **kwargs) -> str:
    """A registered sibling test whose `_CONFIGS` holds these rows."""
    return unregistered(*configs, **kwargs) + REGISTER


@pytest.fixture(autouse=True)
def _own_home(tmp_path, monkeypatch):
    """The catalog's cache goes under the test's own state folder."""
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                   check=True, capture_output=True)


@pytest.fixture
def framework(tmp_path):
    """A git checkout named fw with the two siblings committed, and a groups file for it."""
    repo = tmp_path / "fw"
    (repo / "tests" / "lora").mkdir(parents=True)
    (repo / FIVE).write_text(sibling(*DIAGONAL))
    (repo / SIX).write_text(sibling(*ANTI_DIAGONAL))
    git(repo, "init", "-q")
    git(repo, "add", "tests")
    git(repo, "commit", "-q", "-m", "two siblings")
    groups = tmp_path / "coverage.yaml"
    groups.write_text(GROUPS)
    return repo, groups


def coverage(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["coverage", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_complementary_siblings_are_covered_and_the_proof_shows_all_four_cells(framework, capsys):
    repo, groups = framework

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert code == 0
    assert f"backend=megatron, layout=shared+virtual  {FIVE}:6 m-shared" in out
    assert f"backend=megatron, layout=per-expert      {SIX}:6 m-per" in out
    assert f"backend=tilelang, layout=shared+virtual  {SIX}:7 t-shared" in out
    assert f"backend=tilelang, layout=per-expert      {FIVE}:7 t-per" in out
    assert "4 of 4 cells covered" in out


def test_json_has_each_groups_tests_cells_proof_and_uncovered_cells(framework, capsys):
    repo, groups = framework
    (repo / SIX).write_text(sibling(*DIAGONAL))

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--json")

    assert code == 1
    (group,) = json.loads(out)["groups"]
    assert group["name"] == "lora-moe" and group["tests"] == [FIVE, SIX]
    assert len(group["cells"]) == 4 and set(group["covered_by"]) == {c["label"] for c in group["cells"]}
    assert [x["test"] for x in group["covered_by"]["backend=megatron, layout=shared+virtual"]] == [FIVE, SIX]
    assert group["uncovered"] == [{"backend": "megatron", "layout": "per-expert"},
                                  {"backend": "tilelang", "layout": "shared+virtual"}]


def test_siblings_on_the_same_diagonal_exit_one_and_name_the_missing_cells(framework, capsys):
    repo, groups = framework
    (repo / SIX).write_text(sibling(*DIAGONAL))

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert code == 1
    assert "backend=megatron, layout=per-expert      UNCOVERED" in out
    assert "backend=tilelang, layout=shared+virtual  UNCOVERED" in out
    assert "1 group(s), 2 uncovered cell(s), 0 problem(s)" in out


DISABLED = 'labels=["lora"], disabled="flaky, see #123")'


def test_a_disabled_sibling_covers_nothing_and_its_cells_are_uncovered(framework, capsys):
    repo, groups = framework
    (repo / SIX).write_text(sibling(*ANTI_DIAGONAL).replace('labels=["lora"])', DISABLED))

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert code == 1
    assert f"  {SIX}  (covers nothing: disabled: flaky, see #123)" in out
    assert "backend=megatron, layout=per-expert      UNCOVERED" in out
    assert "backend=tilelang, layout=shared+virtual  UNCOVERED" in out
    assert (f"  {SIX}:10: registration: covers nothing: disabled: flaky, see #123; its configurations count for "
            "group lora-moe once the test runs") in out
    assert "  2 of 4 cells covered" in out and "1 group(s), 2 uncovered cell(s), 1 problem(s)" in out


def test_a_fix_to_the_groups_declaration_names_the_groups_file_the_groups_came_from(framework, capsys):
    """With --groups FILE the fixes said `fix the dimension's fields in assets/coverage.yaml`, a file
    that did not declare these groups."""
    repo, groups = framework
    (repo / FIVE).write_text(sibling(("m-shared", "megatron", True, True), ("t-mixed", "tilelang", True, False)))
    (repo / SIX).write_text('_CONFIGS = [\n    {"name": "m", "backend": "megatron", "shared_outer": False},\n'
                            '    ("t", "tilelang", True, True),\n]\n' + REGISTER)

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert code == 1
    assert (f"{FIVE}:7: t-mixed: layout true+false is not one of shared+virtual, per-expert; add it to the "
            f"dimension's values in {groups}:4 or fix the configuration") in out
    assert (f"{SIX}:2: m: has no field virtual_experts for dimension layout; add it to the configuration or fix "
            f"the dimension's fields in {groups}:4") in out
    assert (f"{SIX}:3: _CONFIGS[1]: tuple positions have no names; add a comment `# (name, a, b, ...)` right above "
            f"`_CONFIGS =` or `fields:` to the group in {groups}:4") in out
    assert "assets/coverage.yaml" not in out


def test_an_unregistered_sibling_covers_nothing_and_the_json_says_why(framework, capsys):
    repo, groups = framework
    (repo / SIX).write_text(unregistered(*ANTI_DIAGONAL))

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--json")

    [group] = json.loads(out)["groups"]
    assert code == 1 and len(group["uncovered"]) == 2
    assert group["idle"] == {SIX: "not registered (no register_*_ci call the catalog reads; `nightly catalog` says why)"}
    assert group["problems"] == [f"{SIX}:1: registration: covers nothing: {group['idle'][SIX]}; its configurations "
                                 "count for group lora-moe once the test runs"]


def test_against_a_revision_a_sibling_disabled_since_lost_its_cells_and_one_disabled_before_did_not(framework, capsys):
    repo, groups = framework
    (repo / SIX).write_text(sibling(*ANTI_DIAGONAL).replace('labels=["lora"])', DISABLED))

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "HEAD")

    assert code == 1
    assert f"      was covered by {SIX}:6 m-per (disabled: flaky, see #123)" in out
    git(repo, "commit", "-q", "-am", "disable the 6-layer sibling")
    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "HEAD")
    assert (code, out.splitlines()[0]) == (0, "against HEAD: no cell covered then is uncovered now")


@pytest.mark.parametrize("staged", [False, True], ids=["edited", "edited-and-staged"])
def test_against_a_revision_a_sibling_disabled_then_and_edited_since_lost_nothing(framework, capsys, staged):
    repo, groups = framework
    (repo / SIX).write_text(sibling(*ANTI_DIAGONAL).replace('labels=["lora"])', DISABLED))
    git(repo, "commit", "-q", "-am", "disable the 6-layer sibling")
    with (repo / SIX).open("a") as f:
        f.write("# a comment\n")
    if staged:
        git(repo, "add", SIX)

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "HEAD")

    assert (code, out.splitlines()[0]) == (0, "against HEAD: no cell covered then is uncovered now")


def test_against_a_revision_a_sibling_unregistered_then_and_disabled_now_lost_nothing(framework, capsys):
    repo, groups = framework
    (repo / SIX).write_text(unregistered(*ANTI_DIAGONAL))
    git(repo, "commit", "-q", "-am", "the 6-layer sibling is not registered")
    (repo / SIX).write_text(sibling(*ANTI_DIAGONAL).replace('labels=["lora"])', DISABLED))

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "HEAD")

    assert (code, out.splitlines()[0]) == (0, "against HEAD: no cell covered then is uncovered now")


def test_against_a_revision_reads_the_groups_files_at_it_not_every_test_of_the_catalog(framework, capsys, monkeypatch):
    """One `git show` per catalog file made --against HEAD take 8 s on 2,000 tests (bench/coverage.py)."""
    from pipelines.cli.coverage import GitSource

    repo, groups = framework
    for i in range(30):
        (repo / f"tests/test_other_{i}.py").write_text(f"def test_it():\n    pass\n{REGISTER}")
    git(repo, "add", "tests")
    git(repo, "commit", "-q", "-m", "30 more tests")
    shown, git_call = [], GitSource._git
    monkeypatch.setattr(GitSource, "_git", lambda self, *a: (shown.append(a[-1]) if a[0] == "show" else None,
                                                             git_call(self, *a))[1])

    code, _, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "HEAD")

    assert code == 0 and not [p for p in shown if "test_other" in p]


def test_against_a_revision_of_a_checkout_inside_a_bigger_repository_sees_its_uncommitted_changes(tmp_path, capsys):
    repo = tmp_path / "mono" / "fw"
    (repo / "tests" / "lora").mkdir(parents=True)
    (repo / FIVE).write_text(sibling(*DIAGONAL))
    (repo / SIX).write_text(sibling(*ANTI_DIAGONAL))
    git(tmp_path / "mono", "init", "-q")
    git(tmp_path / "mono", "add", "fw")
    git(tmp_path / "mono", "commit", "-q", "-m", "two siblings")
    (tmp_path / "coverage.yaml").write_text(GROUPS)
    (repo / SIX).write_text(sibling(*ANTI_DIAGONAL).replace('labels=["lora"])', DISABLED))

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(tmp_path / "coverage.yaml"), "--against", "HEAD")

    assert code == 1 and f"      was covered by {SIX}:6 m-per (disabled: flaky, see #123)" in out


def test_rows_a_sibling_appends_at_module_level_cover_their_cells(framework, capsys):
    repo, groups = framework
    m_per, t_shared = ANTI_DIAGONAL
    (repo / SIX).write_text(sibling(m_per) + f"_CONFIGS.append({t_shared!r})\n")

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert code == 0, out
    assert f"backend=tilelang, layout=shared+virtual  {SIX}:10 t-shared" in out


def test_rows_a_sibling_adds_only_under_a_condition_are_a_note_that_does_not_fail_the_check(framework, capsys):
    repo, groups = framework
    extra = 'if os.environ.get("EXTRA"):\n    _CONFIGS.append(("c", "fsdp", True, True))\n'
    (repo / SIX).write_text("import os\n" + sibling(*ANTI_DIAGONAL) + extra)

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert code == 0 and "  4 of 4 cells covered" in out
    assert (f"  note: {SIX}:13: _CONFIGS: an addition inside an `if` block; the checker reads only literal") in out
    assert out.rstrip().endswith("1 group(s), 0 uncovered cell(s), 0 problem(s), 1 note(s) (rows not counted that "
                                 "could only add coverage; not a failure)")
    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--json")
    [group] = json.loads(out)["groups"]
    assert (code, group["problems"], len(group["notes"])) == (0, [], 1)


def test_rows_added_under_a_condition_fail_a_group_declared_only_by_comments(tmp_path, capsys, monkeypatch):
    """Such a group takes its dimensions' values from the rows, so rows the checker cannot read may add
    values and cells: not a note (an empty matrix must not pass as nothing to check)."""
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    repo = tmp_path / "fw"
    (repo / "tests").mkdir(parents=True)
    for n in ("a", "b"):
        (repo / "tests" / f"test_sib_{n}.py").write_text(
            'import os\n# coverage-group: lora-pair\n# (name, backend, use_lora)\n_CONFIGS = []\n'
            'if os.environ.get("FULL_MATRIX"):\n    _CONFIGS.append(("m-lora", "megatron", True))\n'
            'register_cuda_ci(60, "stage-b-2-gpu-h200", labels=["lora"])\n')
    git(repo, "init", "-q")

    code, out, _ = coverage(capsys, "--repo", str(repo))

    assert code == 1, out
    assert ("tests/test_sib_a.py:6: _CONFIGS: an addition inside an `if` block; the checker reads only literal") in out
    assert "(this group, declared by comments, takes its values from the rows, so they may add cells" in out
    assert out.rstrip().endswith("1 group(s), 0 uncovered cell(s), 2 problem(s)")


def test_a_sibling_that_sorts_its_matrix_keeps_its_rows(framework, capsys):
    repo, groups = framework
    (repo / SIX).write_text(sibling(*ANTI_DIAGONAL) + "_CONFIGS.sort()\n_CONFIGS.reverse()\n")

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert code == 0 and "  4 of 4 cells covered" in out and "(no configurations)" not in out


def test_a_group_from_comments_with_no_readable_row_says_so_instead_of_an_empty_cell(capsys, tmp_path):
    repo = tmp_path / "fw"
    (repo / "tests" / "lora").mkdir(parents=True)
    (repo / FIVE).write_text(sibling(*DIAGONAL, group="lora-moe") + "del _CONFIGS[0]\n")

    code, out, _ = coverage(capsys, "--repo", str(repo))

    assert code == 1
    assert "group lora-moe (tests/lora/test_moe_5layer.py:4): no configuration read, so no dimensions and no cells " \
           "to check" in out
    assert "all pairs of \n" not in out and "UNCOVERED" not in out and "cell  " not in out
    assert out.rstrip().endswith("1 group(s), 0 uncovered cell(s), 1 problem(s)")


def test_against_a_revision_reports_the_cells_a_deleted_sibling_took_with_it(framework, capsys):
    repo, groups = framework
    (repo / SIX).unlink()

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "HEAD")

    assert code == 1
    assert out.splitlines() == [
        "against HEAD: 2 cell(s) covered then are uncovered now",
        "  lora-moe: backend=megatron, layout=per-expert",
        f"      was covered by {SIX}:6 m-per (deleted)",
        "  lora-moe: backend=tilelang, layout=shared+virtual",
        f"      was covered by {SIX}:7 t-shared (deleted)",
        "now: 2 uncovered cell(s), 1 problem(s); `nightly coverage` without --against lists them",
    ]


def test_against_a_revision_in_json_and_a_merge_that_loses_nothing(framework, capsys):
    repo, groups = framework
    (repo / FIVE).write_text(sibling(*DIAGONAL, *ANTI_DIAGONAL))
    (repo / SIX).write_text(sibling(*DIAGONAL))

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "HEAD", "--json")

    assert code == 0
    assert json.loads(out)["lost"] == [] and json.loads(out)["against"] == "HEAD"


def test_an_unknown_revision_is_refused_with_what_to_check(framework, capsys):
    repo, groups = framework

    code, _, err = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "no-such-rev")

    assert code == 2
    assert f"--against: 'no-such-rev' is not a commit of {repo}; give a commit, tag or branch of it " \
           f"(`git -C {repo} log` lists them)" in err


def test_a_broken_groups_file_stops_with_the_located_problem(framework, capsys):
    repo, groups = framework
    groups.write_text(GROUPS.replace("[megatron, tilelang]", "megatron"))

    code, _, err = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert code == 2
    assert f"{groups}:7: repos.fw.groups[0].dimensions.backend.values: must be a list of values" in err


def test_the_example_frameworks_sibling_pair_covers_its_grid(capsys, project_root):
    code, out, _ = coverage(capsys, "--repo", "minirl", "--json")

    groups = {g["name"]: g for g in json.loads(out)["groups"]}
    assert code == 0 and groups["lora-moe-diagonals"]["uncovered"] == []
    assert len(groups["lora-moe-diagonals"]["cells"]) == 4
    assert uncovered_cells(project_root / "examples" / "minirl") == []


def test_each_tests_configurations_are_listed_for_the_catalog(project_root):
    configs = configurations_by_test(project_root / "examples" / "minirl")

    assert [c.name for c in configs["tests/e2e/lora/test_lora_moe_5layer.py"]] == [
        "megatron-shared-outer-virtual", "tilelang-per-expert"]
    assert len(configs["tests/e2e/test_backend_matrix.py"]) == 4  # not in a group: its own comment names the fields


def test_design_finds_nine_configurations_for_four_three_valued_dimensions(capsys):
    argv = ["design", *(f"--dim=d{i}=a,b,c" for i in range(4)), "--tests", "3", "--budget", "3", "--est-time", "100", "--json"]

    code, out, _ = coverage(capsys, *argv)

    found = json.loads(out)
    assert code == 0 and found["size"] == 9 and found["uncovered"] == []
    assert [len(v) for v in found["assignments"].values()] == [3, 3, 3]
    assert found["gpu_seconds"] == {"design": 900.0, "cartesian": 8100.0, "saved": 7200.0}
    assert len(found["covered_by"]) == 6 * 9


def test_design_text_shows_the_rows_the_proof_and_the_saving(capsys):
    code, out, _ = coverage(capsys, "design", "--dim", "backend=megatron,tilelang", "--dim", "layout=shared,per-expert",
                            "--tests", "2", "--est-time", "875")

    assert code == 0
    assert out.startswith("design: all pairs of backend (2), layout (2): 4 configurations (lower bound 4, full product 4;")
    assert "backend=megatron, layout=per-expert  #" in out
    assert "GPU-seconds per night: 3,500 (4 x 875 s x 1 GPU) against 3,500 for the full product of 4; saves 0" in out


def test_design_says_on_stderr_what_it_searches_before_the_search_starts(capsys, monkeypatch):
    """A search over many dimensions is silent for tens of seconds otherwise; stdout stays the design."""
    import pipelines.cli.coverage as coverage_cli

    said = []
    real = coverage_cli.design
    monkeypatch.setattr(coverage_cli, "design", lambda *a, **k: said.append(capsys.readouterr().err) or real(*a, **k))
    code, out, err = coverage(capsys, "design", *(f"--dim=d{i}=a,b,c" for i in range(4)), "--json")
    assert code == 0 and json.loads(out)["size"] == 9 and err == ""
    assert said == ["nightly coverage design: searching the fewest configurations covering all pairs of 4 dimensions "
                    "(full product 81) ...\n"]


def test_design_within_a_budget_too_small_exits_one_with_the_cells_left_out(capsys):
    code, out, _ = coverage(capsys, "design", *(f"--dim=d{i}=a,b,c" for i in range(4)), "--tests", "2", "--budget", "3")

    assert code == 1
    assert "uncovered: " in out and "do not fit in 2 test(s) x 3" in out


def test_design_rejects_a_malformed_dimension_and_a_budget_without_tests(capsys):
    code, _, err = coverage(capsys, "design", "--dim", "backend")
    assert code == 2 and "--dim: 'backend' is not NAME=V1,V2,... with distinct values; give e.g. --dim tp=1,2,4" in err

    code, _, err = coverage(capsys, "design", "--dim", "a=1,2", "--dim", "b=1,2", "--budget", "2")
    assert code == 2 and "--budget: needs --tests N (at most K configurations for each of N tests); add --tests" in err


@pytest.mark.parametrize(("flags", "message"), [
    (("--est-time", "-3"), "--est-time: -3 is not a positive number of seconds; give the seconds one configuration "
                           "runs, e.g. --est-time 600"),
    (("--est-time", "0"), "--est-time: 0 is not a positive number of seconds; give"),
    (("--est-time", "nan"), "--est-time: nan is not a positive number of seconds; give"),
    (("--est-time", "inf"), "--est-time: inf is not a positive number of seconds; give"),
    (("--gpus", "0"), "--gpus: 0 is not a positive whole number; give the GPUs one configuration uses, e.g. --gpus 8"),
    (("--tests", "-1"), "--tests: -1 is not a positive whole number; give the number of sibling tests, e.g. --tests 2"),
    (("--tests", "2", "--budget", "0"), "--budget: 0 is not a positive whole number; give the most configurations "
                                        "one test may run, e.g. --budget 2"),
    (("--strength", "0"), "--strength: 0 is not a positive whole number; give how many dimensions each cell "
                          "combines, e.g. --strength 2"),
    (("--strength", "3"), "--strength: 3 is more than the 2 dimensions given; give at most --strength 2"),
    (("--tests", "5"), "--tests: 5 is more than the 4 configurations the design needs; give at most --tests 4"),
    (("--tests", "100000"), "--tests: 100000 is more than the 4 configurations the design needs; give at most"),
])
def test_design_refuses_numbers_out_of_range_and_says_which_flag_and_what_to_give(capsys, flags, message):
    code, out, err = coverage(capsys, "design", "--dim", "a=1,2", "--dim", "b=1,2", *flags)

    assert (code, out) == (2, "")
    assert message in err


def test_a_groups_file_that_does_not_exist_is_an_error_naming_it(framework, capsys, tmp_path):
    repo, _ = framework

    code, out, err = coverage(capsys, "--repo", str(repo), "--groups", str(tmp_path / "nonexist.yaml"))

    assert (code, out) == (2, "")
    assert f"--groups: {tmp_path / 'nonexist.yaml'}: no such file; give the groups file (default: " \
           "assets/coverage.yaml; docs/coverage.md describes it)" in err


def test_a_groups_path_that_is_a_folder_is_an_error_naming_it(framework, capsys, tmp_path):
    repo, _ = framework

    code, _, err = coverage(capsys, "--repo", str(repo), "--groups", str(tmp_path))

    assert code == 2
    assert f"--groups: {tmp_path}: not a file; give the groups file" in err


def test_the_overview_in_help_lists_every_flag_as_docs_coverage_md_does(capsys, project_root):
    from pipelines.cli import build_parser

    with pytest.raises(SystemExit):
        main(["coverage", "--help"])
    overview = capsys.readouterr().out
    docs = (project_root / "docs" / "coverage.md").read_text()
    coverage_parser = build_parser()._subparsers._group_actions[0].choices["coverage"]
    design_parser = coverage_parser._subparsers._group_actions[0].choices["design"]
    flags = {o for p in (coverage_parser, design_parser) for a in p._actions for o in a.option_strings
             if o.startswith("--") and o != "--help"}
    assert sorted(f for f in flags if f not in overview) == []
    assert sorted(f for f in flags if f not in docs) == []


def test_an_empty_against_is_refused_not_ignored(framework, capsys):
    repo, groups = framework

    code, out, err = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against=")

    assert (code, out) == (2, "")
    assert "--against: '' is not a revision; give a commit, tag or branch" in err


def test_a_misspelt_key_is_refused_instead_of_checking_the_default(framework, capsys):
    repo, groups = framework
    groups.write_text(GROUPS + "        strenght: 3\n")

    code, out, err = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert (code, out) == (2, "")
    assert f"{groups}:11: repos.fw.groups[0].strenght: unknown key; did you mean 'strength'?" in err


@pytest.mark.parametrize(("text", "message"), [
    ("", "declares no groups for fw (repos.fw.groups)"),
    ("repos:\n  fw: {groups: []}\n", "declares no groups for fw (repos.fw.groups)"),
    ("- fw\n", ":1: repos: the file must be a mapping `repos: {NAME: {groups: [...]}}`"),
    (GROUPS.replace("  fw:", "  fw2:"), ":2: repos.fw2: 'fw2' is not a repo in repos.yaml"),
])
def test_a_groups_file_declaring_nothing_for_the_repo_is_refused(framework, capsys, text, message):
    repo, groups = framework
    groups.write_text(text)

    code, out, err = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert (code, out) == (2, "")
    assert message in err


def test_an_unconfigured_sglang_style_checkout_reads_its_group_comments_under_the_detected_roots(capsys, project_root, tmp_path):
    import shutil

    repo = tmp_path / "sgcopy"
    shutil.copytree(project_root / "examples" / "sglangish", repo)
    matrix = "\n# coverage-group: sg-matrix\n# (name, tp, dtype)\n_CONFIGS = [{rows}]\n"
    generate, tp2 = "test/registered/basic/test_generate.py", "test/registered/multi/test_tp2_consistency.py"
    with (repo / generate).open("a") as f:
        f.write(matrix.format(rows='("tp1-bf16", 1, "bf16"), ("tp2-fp8", 2, "fp8")'))
    with (repo / tp2).open("a") as f:
        f.write(matrix.format(rows='("tp1-fp8", 1, "fp8"), ("tp2-bf16", 2, "bf16")'))

    code, out, _ = coverage(capsys, "--repo", str(repo))

    assert code == 0
    assert f"group sg-matrix ({generate}:" in out and "4 of 4 cells covered" in out
    assert [c.name for c in configurations_by_test(repo)[tp2]] == ["tp1-fp8", "tp2-bf16"]


def test_template_entries_without_num_gpus_take_the_test_files_or_the_default_gpu_count(capsys, project_root, tmp_path):
    """As `nightly catalog` lists them: sft_dense NUM_GPUS = 4, ckpt_resume 2, dpo_short none (8)."""
    groups = tmp_path / "coverage.yaml"
    groups.write_text("""\
repos:
  templaterl:
    groups:
      - name: fsdp
        matrix: template
        tests: [tests/test_sft_dense.py, tests/test_dpo_short.py, tests/test_ckpt_resume.py]
        dimensions: {enable_eval: ['0', '1'], num_gpus: [2, 4, 8]}
        require: [[num_gpus]]
""")

    code, out, _ = coverage(capsys, "--repo", str(project_root / "examples" / "templaterl"), "--groups", str(groups))

    assert code == 0, out
    assert "num_gpus=2  .github/workflows/pr-test.yml.j2:6 e2e-test-fsdp" in out
    assert "num_gpus=4  .github/workflows/pr-test.yml.j2:5 e2e-test-fsdp enable_eval=1" in out
    assert "num_gpus=8  .github/workflows/pr-test.yml.j2:7 e2e-test-fsdp enable_eval=0" in out


def test_test_paths_spelt_with_a_leading_dot_slash_are_the_files_that_name_the_group(capsys, project_root, tmp_path):
    groups = tmp_path / "coverage.yaml"
    groups.write_text((project_root / "assets" / "coverage.yaml").read_text().replace(
        "- tests/e2e/lora/", "- ./tests/e2e/lora/"))

    code, out, _ = coverage(capsys, "--repo", "minirl", "--groups", str(groups))

    assert code == 0, out
    assert "does not list it" not in out and "4 of 4 cells covered" in out


def test_design_names_the_required_tuples_in_its_header(capsys):
    code, out, _ = coverage(capsys, "design", "--dim", "backend=megatron,tilelang", "--dim", "layout=a,b",
                            "--dim", "tp=1,2", "--require", "backend,layout", "--require", "layout,tp")

    assert code == 0
    assert out.startswith("design: backendxlayout and layoutxtp of backend (2), layout (2), tp (2): ")


def test_a_list_as_a_yaml_key_is_a_located_problem_not_a_crash(framework, capsys):
    repo, groups = framework
    groups.write_text(GROUPS.replace("backend: [megatron, tilelang]", "? [backend, x] : [megatron, tilelang]"))

    code, out, err = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert (code, out) == (2, "")
    assert f"{groups}:7: key: a key must be a plain name, not a list or a mapping; write it as text" in err


def test_two_configurations_of_one_test_with_one_name_fail_the_check_at_the_second(framework, capsys):
    repo, groups = framework
    (repo / SIX).write_text(sibling(*ANTI_DIAGONAL, ("m-per", "tilelang", False, False)))

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert code == 1
    assert f"{SIX}:8: m-per: another configuration of this test is named 'm-per' (line 6); give each a name of its own" in out


def test_a_yaml_null_value_is_the_value_of_a_python_none_in_the_matrix(framework, capsys):
    repo, groups = framework
    groups.write_text(GROUPS + "          quant: [null, fp8]\n        require: [[quant]]\n")
    for path, quant in ((FIVE, None), (SIX, "fp8")):
        (repo / path).write_text(f"# (name, backend, shared_outer, virtual_experts, quant)\n"
                                 f"_CONFIGS = [('x', 'megatron', True, True, {quant!r})]\n" + REGISTER)

    code, out, err = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert (code, err) == (0, "")
    assert f"quant=null  {FIVE}:2 x" in out and f"quant=fp8   {SIX}:2 x" in out


@pytest.mark.parametrize("argv", [("--json", "design"), ("design", "--json")])
def test_design_prints_json_whichever_side_of_design_json_is_given(capsys, argv):
    code, out, _ = coverage(capsys, *argv, "--dim", "a=1,2", "--dim", "b=1,2")

    assert code == 0 and json.loads(out)["size"] == 4


def test_design_refuses_the_checks_flags_instead_of_ignoring_them(capsys):
    code, out, err = coverage(capsys, "--repo", "X", "--against", "HEAD", "design", "--dim", "a=1,2", "--dim", "b=1,2")

    assert (code, out) == (2, "")
    assert "--repo, --against: check a repo's groups, and `design` reads no repo; drop them or leave out `design`" in err


def test_against_a_revision_that_lost_nothing_still_counts_what_is_uncovered_now(framework, capsys):
    repo, groups = framework
    (repo / SIX).write_text(sibling(*DIAGONAL))
    git(repo, "commit", "-q", "-am", "both on one diagonal")

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "HEAD")

    assert code == 0
    assert out.splitlines() == ["against HEAD: no cell covered then is uncovered now",
                                "now: 2 uncovered cell(s), 0 problem(s); `nightly coverage` without --against lists them"]
    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "HEAD", "--json")
    assert (code, json.loads(out)["ok"], json.loads(out)["lost"]) == (0, True, [])
    assert len(json.loads(out)["groups"][0]["uncovered"]) == 2


def test_a_group_only_in_comments_with_correlated_fields_says_they_need_a_declared_group(capsys, tmp_path):
    """The diagonal split of GROUPS, declared only by comments: each of shared_outer and virtual_experts is
    a dimension of its own, so the two cells no diagonal has read as gaps; the report says how to declare them."""
    repo = tmp_path / "fw"
    (repo / "tests" / "lora").mkdir(parents=True)
    (repo / FIVE).write_text(sibling(*DIAGONAL, group="lora-moe"))
    (repo / SIX).write_text(sibling(*ANTI_DIAGONAL, group="lora-moe"))

    code, out, _ = coverage(capsys, "--repo", str(repo))

    assert code == 1 and "2 uncovered cell(s)" in out
    assert ("  group lora-moe is declared only by # coverage-group: comments, so each field is a dimension of its "
            "own; fields that vary together (one axis, as a diagonal split uses them) need a group under "
            "repos.fw in ") in out

    (repo / SIX).write_text(sibling(*ANTI_DIAGONAL, ("m-x", "megatron", True, False), ("t-x", "tilelang", False, True),
                                    group="lora-moe"))
    code, out, _ = coverage(capsys, "--repo", str(repo))
    assert code == 0 and "declared only by" not in out  # nothing uncovered: no hint


def test_against_a_revision_a_group_renamed_in_its_comments_and_the_groups_file_lost_nothing(framework, capsys):
    repo, groups = framework
    for path, rows in ((FIVE, DIAGONAL), (SIX, ANTI_DIAGONAL)):
        (repo / path).write_text(sibling(*rows, group="lora-moe"))
    git(repo, "commit", "-qam", "comments")
    for path, rows in ((FIVE, DIAGONAL), (SIX, ANTI_DIAGONAL)):
        (repo / path).write_text(sibling(*rows, group="lora-diag"))
    groups.write_text(GROUPS.replace("name: lora-moe", "name: lora-diag"))

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "HEAD")

    assert code == 0, out
    assert out.splitlines()[:2] == [
        "against HEAD: no cell covered then is uncovered now",
        "  group lora-moe (at HEAD) is lora-diag now: no group has its name now, so its cells count as covered "
        "where the group holding its tests covers them"]
    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "HEAD", "--json")
    assert code == 0 and json.loads(out)["renamed"] == {"lora-moe": ["lora-diag"]}


@pytest.mark.parametrize("comment", [False, True], ids=["listed-only", "with-group-comments"])
def test_against_a_revision_a_sibling_renamed_since_is_read_under_its_old_name_and_said_renamed(
        framework, capsys, comment):
    """A sibling `git mv`'d and trimmed: at the revision it existed only under its old name, which
    neither today's groups file nor (without comments) any comment names, so its cell went unreported."""
    repo, groups = framework
    if comment:
        for path, rows in ((FIVE, DIAGONAL), (SIX, ANTI_DIAGONAL)):
            (repo / path).write_text(sibling(*rows, group="lora-moe"))
        git(repo, "commit", "-qam", "comments")
    six_now = "tests/lora/test_moe_six.py"
    git(repo, "mv", SIX, six_now)
    groups.write_text(GROUPS.replace(SIX, six_now))
    git(repo, "commit", "-qam", "rename the 6-layer sibling")

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "HEAD~1")
    assert (code, out.splitlines()[0]) == (0, "against HEAD~1: no cell covered then is uncovered now")

    (repo / six_now).write_text(sibling(ANTI_DIAGONAL[0], group="lora-moe" if comment else None))
    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "HEAD~1")

    assert code == 1, out
    assert out.splitlines()[:3] == [
        "against HEAD~1: 1 cell(s) covered then are uncovered now",
        "  lora-moe: backend=tilelang, layout=shared+virtual",
        f"      was covered by {SIX}:{8 if comment else 7} t-shared (renamed ({SIX} -> {six_now}), edited)"]
    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--against", "HEAD~1", "--json")
    (lost,) = json.loads(out)["lost"]
    assert (code, json.loads(out)["ok"], lost["label"]) == (1, False, "backend=tilelang, layout=shared+virtual")
    assert lost["was_covered_by"][0]["change"] == f"renamed ({SIX} -> {six_now}), edited"


def test_numbers_and_yaml_switch_words_match_however_each_file_spells_them(tmp_path, capsys):
    """Python prints 1e-5 as 1e-05 and YAML 1.1 keeps `1e-5` as text and reads `on` as true."""
    repo = tmp_path / "lr"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_lr.py").write_text(
        "# (name, lr, offload, tp, scale)\n_CONFIGS = [\n    ('a', 1e-5, 'on', 1, 2.0),\n"
        "    ('b', 3e-6, 'off', 2, 0.5),\n]\n" + REGISTER)
    groups = tmp_path / "coverage.yaml"
    groups.write_text("repos:\n  lr:\n    groups:\n      - name: lr\n        tests: [tests/test_lr.py]\n"
                      "        dimensions:\n          lr: [1e-5, 3.0e-6]\n          offload: [on, off]\n"
                      "          tp: [1, 2.0]\n          scale: [2, .5]\n        require: [[lr, offload, tp, scale]]\n")

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--json")

    (group,) = json.loads(out)["groups"]
    assert (code, group["problems"]) == (1, [])  # 2 of the 16 cells only: rows a and b
    assert group["dimensions"] == {"lr": ["1e-05", "3e-06"], "offload": ["on", "off"], "tp": ["1", "2"],
                                   "scale": ["2", "0.5"]}
    assert {label: [x["config"] for x in by] for label, by in group["covered_by"].items() if by} == {
        "lr=1e-05, offload=on, tp=1, scale=2": ["a"], "lr=3e-06, offload=off, tp=2, scale=0.5": ["b"]}


def test_a_group_comment_with_text_after_the_name_is_a_located_problem_not_a_file_dropped(tmp_path, capsys):
    repo = tmp_path / "fw"
    (repo / "tests" / "lora").mkdir(parents=True)
    (repo / FIVE).write_text(sibling(*DIAGONAL, group="lora-moe"))
    (repo / SIX).write_text(sibling(*ANTI_DIAGONAL, group="lora-moe  (pairs with the 5-layer test)"))

    code, out, _ = coverage(capsys, "--repo", str(repo))

    assert code == 1, out
    assert (f"{SIX}:4: coverage-group: cannot read '# coverage-group: lora-moe  (pairs with the 5-layer test)'; "
            "write '# coverage-group: NAME' alone on the line (a note goes on a line of its own)") in out


def test_a_required_tuple_naming_one_dimension_twice_is_refused_with_its_line(framework, capsys):
    repo, groups = framework
    groups.write_text(GROUPS + "        require: [[backend, layout], [backend, backend]]\n")

    code, out, err = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert (code, out) == (2, "")
    assert (f"{groups}:11: repos.fw.groups[0].require: ['backend', 'backend'] names backend twice; each tuple must "
            "name distinct dimensions, e.g. [backend, layout]") in err


def test_a_strength_above_the_number_of_dimensions_is_refused_with_its_line(framework, capsys):
    repo, groups = framework
    groups.write_text(GROUPS + "        strength: 5\n")

    code, out, err = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert (code, out) == (2, "")
    assert (f"{groups}:11: repos.fw.groups[0].strength: 5 is more than the 2 dimensions declared; give at most "
            "strength: 2") in err



def test_with_a_cadence_a_sibling_that_cadence_never_runs_covers_nothing(framework, capsys):
    repo, groups = framework
    (repo / SIX).write_text(sibling(*ANTI_DIAGONAL).replace('labels=["lora"])', 'labels=["lora", "long"])'))
    git(repo, "commit", "-qam", "six is long")

    assert coverage(capsys, "--repo", str(repo), "--groups", str(groups))[0] == 0  # registered and enabled
    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--cadence", "nightly")

    assert code == 1
    assert f"{SIX}  (covers nothing: the nightly cadence does not run it)" in out
    assert "backend=megatron, layout=per-expert      UNCOVERED" in out
    assert coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--cadence", "weekly")[0] == 0
    # at a revision, a changed file is read again: the cadence applies to it there too
    (repo / SIX).write_text((repo / SIX).read_text() + "# edited\n")
    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups), "--cadence", "nightly",
                            "--against", "HEAD")
    assert code == 0 and "no cell covered then is uncovered now" in out


def test_the_report_says_which_repo_name_the_groups_file_was_read_under(tmp_path, capsys):
    """A checkout in a folder named otherwise than its repos.yaml name finds no group of that name:
    the header and the hint name the key looked up, so the mismatch shows."""
    repo = tmp_path / "fw-checkout"
    (repo / "tests" / "lora").mkdir(parents=True)
    (repo / FIVE).write_text(sibling(*DIAGONAL, group="lora-moe"))
    (repo / SIX).write_text(sibling(*ANTI_DIAGONAL, group="lora-moe"))

    code, out, _ = coverage(capsys, "--repo", str(repo))

    assert code == 1
    assert out.splitlines()[0].endswith("coverage.yaml (repos.fw-checkout: the folder name, as no repo of "
                                         "assets/repos.yaml is this checkout) and # coverage-group: comments")
    assert "need a group under repos.fw-checkout in " in out


#: two siblings splitting a (backend, lang) grid by a group comment, as the reviewer's repro; `lang` holds
#: a value outside ASCII, so a file decoded another way than Python decodes it misreads the value
DIAGONAL_LANG = (("a", "megatron", "café"), ("b", "fsdp", "en"))
ANTI_DIAGONAL_LANG = (("c", "megatron", "en"), ("d", "fsdp", "café"))
LANG_A, LANG_B = "tests/e2e/lora/test_a.py", "tests/e2e/lora/test_b.py"


def lang_sibling(rows: tuple, head: str = "") -> str:
    return (f'{head}register_cuda_ci(100, "stage-b-1-gpu-h100", labels=["lora"])\n\n# coverage-group: diag\n'
            f"# (name, backend, lang)\n_CONFIGS = [{', '.join(map(repr, rows))}]\n")


def lang_siblings(tmp_path: Path, a: bytes, b: bytes) -> Path:
    repo = tmp_path / "fw"
    (repo / "tests" / "e2e" / "lora").mkdir(parents=True)
    (repo / LANG_A).write_bytes(a)
    (repo / LANG_B).write_bytes(b)
    git(repo, "init", "-q")
    return repo


def test_a_sibling_saved_with_a_utf8_bom_is_read_as_python_reads_it(tmp_path, capsys):
    """A BOM was a syntax error (U+FEFF) to the checker, so its rows counted as missing; Python runs the file."""
    repo = lang_siblings(tmp_path, b"\xef\xbb\xbf" + lang_sibling(DIAGONAL_LANG).encode(),
                         lang_sibling(ANTI_DIAGONAL_LANG).encode())

    code, out, _ = coverage(capsys, "--repo", str(repo))

    assert code == 0, out
    assert f"backend=megatron, lang=café  {LANG_A}:5 a" in out and "  4 of 4 cells covered" in out


def test_a_sibling_declaring_latin_1_is_decoded_by_its_coding_line_in_coverage_and_the_catalog(tmp_path, capsys):
    """Read as UTF-8 with replacement, `café` became `caf\\ufffd`: a made-up cell, and a real one uncovered."""
    latin = lang_sibling(ANTI_DIAGONAL_LANG, head="# -*- coding: latin-1 -*-\n").encode("latin-1")
    repo = lang_siblings(tmp_path, lang_sibling(DIAGONAL_LANG).encode(), latin)

    code, out, _ = coverage(capsys, "--repo", str(repo))

    assert code == 0, out
    assert f"backend=fsdp, lang=café      {LANG_B}:6 d" in out and "\ufffd" not in out
    git(repo, "add", "tests")
    git(repo, "commit", "-q", "-m", "siblings")  # git show gives the file's bytes at the revision: decoded alike
    assert coverage(capsys, "--repo", str(repo), "--against", "HEAD")[0] == 0
    assert main(["catalog", "--repo", str(repo)]) == 0
    listing = capsys.readouterr().out
    assert f"{LANG_B}: config d: backend=fsdp, lang=café" in listing and "\ufffd" not in listing


def test_a_sibling_python_cannot_decode_is_a_located_problem_saying_what_to_do(tmp_path, capsys):
    bad = lang_sibling(ANTI_DIAGONAL_LANG).encode().replace("café".encode(), b"caf\xe9")  # latin-1, undeclared
    repo = lang_siblings(tmp_path, lang_sibling(DIAGONAL_LANG).encode(), bad)
    (repo / "tests" / "e2e" / "lora" / "test_c.py").write_bytes(bad)  # in no group yet: its comment is unread

    code, out, _ = coverage(capsys, "--repo", str(repo))

    assert code == 1 and "\ufffd" not in out
    for path in (LANG_B, "tests/e2e/lora/test_c.py"):
        assert out.count(f"{path}:5: file: is not UTF-8 (invalid continuation byte at byte 164); save the file as "
                         "UTF-8 or declare its encoding with a `# -*- coding: <name> -*-` line, as Python reads it so") == 1


def test_a_listed_sibling_python_cannot_decode_is_one_located_problem(framework, capsys):
    repo, groups = framework
    (repo / SIX).write_bytes(sibling(*ANTI_DIAGONAL, group="lora-moe").encode() + b"# caf\xe9\n")

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert code == 1 and "\ufffd" not in out
    assert out.count(f"{SIX}:12: file: is not UTF-8 (invalid continuation byte at byte ") == 1


@pytest.mark.parametrize(("damage", "where", "message"), [
    (b"# caf\xe9\n", ":11: file: is not UTF-8 (invalid continuation byte at byte ",
     "); save it as UTF-8 (an editor's 'save with encoding')"),
    (b"# bell \x07\n", ":11: yaml: character '\\x07' at column 8 is not allowed in YAML; ",
     "remove it (write it as \"\\x07\" inside double quotes if it is meant)"),
])
def test_a_groups_file_that_is_not_utf8_or_holds_a_control_character_is_a_located_problem(
        framework, capsys, damage, where, message):
    repo, groups = framework
    groups.write_bytes(GROUPS.encode() + damage)

    code, out, err = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert (code, out) == (2, "")
    assert f"{groups}{where}" in err and message in err and "Traceback" not in err


@pytest.mark.slow
def test_a_night_with_a_coverage_yaml_that_is_not_utf8_still_writes_its_report_and_calibration(tmp_path, monkeypatch):
    """The calibration run after a night whose tests all passed: the broken groups file is a warning and a
    line of the report, never a failed run without report, evidence or estimates."""
    import dagster as dg

    from pipelines.definitions import build_definitions
    from pipelines.defs.keys import TAG_SOURCE_RUN
    from pipelines.defs.resources import NightlyResource
    from tests.support.assets import example_assets

    assets, home = example_assets(tmp_path / "assets"), tmp_path / "home"
    groups = assets / "coverage.yaml"
    groups.write_bytes(groups.read_bytes() + b"# caf\xe9\n")
    monkeypatch.setenv("NIGHTLY_ASSETS_DIR", str(assets))  # as `nightly run` is pointed at its assets
    test = "tests/e2e/lora/test_lora_moe_5layer.py"
    record = json.dumps({"night": "2026-12-01T150000Z-r1", "run_id": "r1", "repo": "minirl", "selected": [test],
                         "attempts": [{"test_id": test, "outcome": "passed", "elapsed_s": 9.5, "timeout_s": 60,
                                       "started_at": "2026-12-01T15:00:00+00:00"}]})
    for key in ("runs/r1.json", "nights/2026-12-01T150000Z-r1.json"):
        (home / key).parent.mkdir(parents=True, exist_ok=True)
        (home / key).write_text(record)
    defs = build_definitions(nightly=NightlyResource(home=str(home), assets_dir=str(assets)))
    with dg.instance_for_test() as instance:
        run = defs.resolve_job_def("calibration").execute_in_process(instance=instance, tags={TAG_SOURCE_RUN: "r1"},
                                                                      raise_on_error=False)
    assert run.success
    page = (home / "reports" / "2026-12-01T150000Z-r1.html").read_text()
    assert f"coverage not checked: {groups}:" in page and "is not UTF-8 (invalid continuation byte at byte " in page
    assert (home / "calibration" / "minirl" / "evidence.csv").exists()
    assert (home / "estimates" / "minirl.json").exists()


@pytest.mark.parametrize(("edit", "line"), [
    ('_CONFIGS[0]["backend"] = "tilelang"\n', 6),
    ('for _c in _CONFIGS:\n    _c["backend"] = "tilelang"\n', 7),
    ('_CONFIGS[0].update(layout="shared")\n', 6),
])
def test_a_sibling_that_edits_a_row_in_place_is_a_located_problem_not_a_false_green(tmp_path, capsys, edit, line):
    """The reviewer's checkout: dict rows on a 2x2 diagonal split; an in-place edit makes the test run
    another configuration than its literal row, so the cell that row seemed to cover is never run."""
    repo = tmp_path / "r1"
    (repo / "tests" / "e2e").mkdir(parents=True)
    rows = {"a": (("a1", "megatron", "shared"), ("a2", "tilelang", "per")),
            "b": (("b1", "megatron", "per"), ("b2", "tilelang", "shared"))}
    for name, configs in rows.items():
        text = "_CONFIGS = [\n" + "".join(f'    {{"name": "{n}", "backend": "{b}", "layout": "{lay}"}},\n'
                                         for n, b, lay in configs) + "]\n"
        (repo / "tests" / "e2e" / f"test_{name}.py").write_text(REGISTER.lstrip("\n") + text + (edit if name == "b" else ""))
    groups = tmp_path / "coverage.yaml"
    groups.write_text("repos:\n  r1:\n    groups:\n      - name: diag\n        tests: [tests/e2e/test_a.py, tests/e2e/test_b.py]\n"
                      "        dimensions:\n          backend: [megatron, tilelang]\n          layout: [shared, per]\n")

    code, out, _ = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert code == 1, out
    assert f"tests/e2e/test_b.py:{line}: _CONFIGS: a change of one of its rows (`" in out
    assert ["backend=megatron,", "layout=per", "UNCOVERED"] in [row.split() for row in out.splitlines()]  # b1's row


@pytest.mark.parametrize("strength", ["2", "3", "5"])
def test_strength_and_require_in_one_group_are_refused_as_exclusive_instead_of_ignoring_strength(
        framework, capsys, strength):
    """`require:` lists the cells' tuples instead of `strength:`; given both, `strength:` was silently ignored."""
    repo, groups = framework
    groups.write_text(GROUPS + f"        strength: {strength}\n        require: [[backend, layout]]\n")

    code, out, err = coverage(capsys, "--repo", str(repo), "--groups", str(groups))

    assert (code, out) == (2, "")
    assert (f"{groups}:11: repos.fw.groups[0].strength: cannot stand beside require: (line 12), which names the "
            "dimension tuples to cover instead; keep require: for those tuples only, or strength: for every "
            "combination of that many dimensions") in err


def test_design_refuses_strength_with_require_instead_of_ignoring_strength(capsys):
    code, out, err = coverage(capsys, "design", "--dim", "a=1,2", "--dim", "b=1,2", "--dim", "c=1,2",
                              "--strength", "3", "--require", "a,b")

    assert (code, out) == (2, "")
    assert ("--strength: cannot stand beside --require, which names the dimension tuples to cover instead; give "
            "--require for those tuples only, or --strength for every combination of that many dimensions") in err
