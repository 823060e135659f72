"""Checking a group: which cells its siblings cover, which they miss, and what is wrong with them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipelines.core.coverage import catalogued
from pipelines.core.coverage.check import check_group, check_groups, required_cells
from pipelines.core.coverage.model import Catalogued, Cell, Dimension, Group, Registered
from tests.conftest import make_test
from tests.core.coverage.siblings import (
    ANTI_DIAGONAL,
    BACKEND,
    DIAGONAL,
    FIVE,
    LAYOUT,
    SIX,
    FilesSource,
    lora_group,
    sibling,
)


def test_complementary_diagonals_cover_all_four_cells_and_the_proof_names_each_configuration():
    source = FilesSource({FIVE: sibling(*DIAGONAL), SIX: sibling(*ANTI_DIAGONAL)})

    report = check_group(lora_group(), source)

    assert report.ok and report.uncovered == ()
    proof = {cell.label: [(c.test, c.name, c.line) for c in report.covered_by(cell)] for cell in report.cells}
    assert proof == {
        "backend=megatron, layout=shared+virtual": [(FIVE, "m-shared", 6)],
        "backend=megatron, layout=per-expert": [(SIX, "m-per", 6)],
        "backend=tilelang, layout=shared+virtual": [(SIX, "t-shared", 7)],
        "backend=tilelang, layout=per-expert": [(FIVE, "t-per", 7)],
    }


def test_both_siblings_on_the_same_diagonal_leave_the_other_two_cells_uncovered():
    source = FilesSource({FIVE: sibling(*DIAGONAL), SIX: sibling(*DIAGONAL)})

    report = check_group(lora_group(), source)

    assert not report.ok
    assert [c.label for c in report.uncovered] == [
        "backend=megatron, layout=per-expert", "backend=tilelang, layout=shared+virtual"]


def test_all_pairs_is_every_value_combination_of_every_two_dimensions():
    third = replace(BACKEND, name="world", fields=("world",), values=(("2", ("2",)), ("4", ("4",)), ("8", ("8",))))

    cells = required_cells((BACKEND, LAYOUT, third), strength=2)

    assert len(cells) == 2 * 2 + 2 * 3 + 2 * 3
    assert {c.dims for c in cells} == {("backend", "layout"), ("backend", "world"), ("layout", "world")}
    assert len(required_cells((BACKEND, LAYOUT, third), strength=2, require=[("backend", "world")])) == 6


def test_a_listed_test_that_does_not_exist_is_a_located_problem_and_its_cells_are_uncovered():
    report = check_group(lora_group(), FilesSource({FIVE: sibling(*DIAGONAL)}))

    assert [str(p) for p in report.problems] == [
        f"{SIX}:1: test: listed in group lora (coverage.yaml:3) but does not exist; restore it or drop it from the group"]
    assert len(report.uncovered) == 2


def test_a_value_no_dimension_declares_is_reported_at_the_configuration_line():
    odd = sibling(("m-shared", "megatron", True, True), ("t-mixed", "tilelang", True, False))

    report = check_group(lora_group(FIVE), FilesSource({FIVE: odd}))

    assert [str(p) for p in report.problems] == [
        f"{FIVE}:7: t-mixed: layout true+false is not one of shared+virtual, per-expert; add it to the dimension's "
        "values in coverage.yaml:3 or fix the configuration"]


def test_a_configuration_missing_a_dimensions_field_is_located_with_the_fix():
    text = '_CONFIGS = [\n    {"name": "m", "backend": "megatron", "shared_outer": True},\n]\n'

    report = check_group(lora_group(FIVE), FilesSource({FIVE: text}))

    assert [str(p) for p in report.problems] == [
        f"{FIVE}:2: m: has no field virtual_experts for dimension layout; add it to the configuration or fix the "
        "dimension's fields in coverage.yaml:3"]


def test_a_group_declared_in_file_comments_takes_every_field_but_name_as_a_dimension():
    source = FilesSource({FIVE: sibling(*DIAGONAL, group="moe"), SIX: sibling(ANTI_DIAGONAL[0], group="moe")})

    (report,), problems = check_groups((), source, roots=("tests",))

    assert problems == () and report.group.name == "moe" and report.group.origin == f"{FIVE}:4"
    assert [d.name for d in report.dimensions] == ["backend", "shared_outer", "virtual_experts"]
    assert [c.label for c in report.uncovered] == [
        "backend=tilelang, shared_outer=true", "backend=tilelang, virtual_experts=true",
        "shared_outer=true, virtual_experts=false", "shared_outer=false, virtual_experts=true"]


def test_a_file_naming_a_declared_group_that_does_not_list_it_is_a_problem_unless_adopted():
    third = "tests/lora/test_moe_7layer.py"
    source = FilesSource({FIVE: sibling(*DIAGONAL), SIX: sibling(*ANTI_DIAGONAL), third: sibling(*DIAGONAL, group="lora")})

    reports, problems = check_groups((lora_group(),), source)
    adopted, none = check_groups((lora_group(),), source, adopt=True)

    assert [str(p) for p in problems] == [
        f"{third}:4: coverage-group: {third} says it belongs to 'lora' but coverage.yaml:3 does not list it; "
        "add it to the group's tests"]
    assert reports[0].tests == (FIVE, SIX)
    assert none == () and adopted[0].tests == (FIVE, SIX, third)


def test_named_dimension_tuples_replace_all_pairs():
    report = check_group(lora_group(require=(("backend",),)), FilesSource({FIVE: sibling(*DIAGONAL), SIX: sibling(*DIAGONAL)}))

    assert report.cells == (Cell(("backend",), ("megatron",)), Cell(("backend",), ("tilelang",)))
    assert report.ok


def test_a_template_groups_cells_come_from_the_workflow_template_entries():
    template = (".github/workflows/pr-test.yml.j2", """\
<% set jobs = {'e2e': {'label': 'run-ci-e2e', 'tests': [
    {'test_file': 'test_fp8.py', 'use_fp8_rollout': '0'},
    {'test_file': 'test_fp8.py', 'use_fp8_rollout': '1'},
]}} -%>
""")
    fp8 = Dimension("fp8", ("use_fp8_rollout",), (("off", ("0",)), ("on", ("1",))))
    group = Group("fp8", ("tests/test_fp8.py",), (fp8,), "coverage.yaml:9", matrix="template", strength=1)

    report = check_group(group, FilesSource(dict([template])), template[0])

    assert report.ok
    assert [(c.label, [(x.path, x.line) for x in report.covered_by(c)]) for c in report.cells] == [
        ("fp8=off", [(template[0], 2)]), ("fp8=on", [(template[0], 3)])]


def test_a_template_groups_entries_may_be_split_over_several_templates():
    """Framework S keeps a PR template and a nightly one: cells covered in either count."""
    pr = (".github/workflows/pr-test.yml.j2", """\
<% set jobs = {'e2e': {'label': 'run-ci-e2e', 'tests': [
    {'test_file': 'test_fp8.py', 'use_fp8_rollout': '0'},
]}} -%>
""")
    nightly = (".github/workflows/nightly-test.yml.j2", """\
<% set jobs = {'nightly': {'label': 'run-ci-nightly', 'tests': [
    {'test_file': 'test_fp8.py', 'use_fp8_rollout': '1'},
]}} -%>
""")
    fp8 = Dimension("fp8", ("use_fp8_rollout",), (("off", ("0",)), ("on", ("1",))))
    group = Group("fp8", ("tests/test_fp8.py",), (fp8,), "coverage.yaml:9", matrix="template", strength=1)

    report = check_group(group, FilesSource(dict([pr, nightly])), (pr[0], nightly[0]))

    assert report.ok, report.problems
    assert [(c.label, [x.path for x in report.covered_by(c)]) for c in report.cells] == [
        ("fp8=off", [pr[0]]), ("fp8=on", [nightly[0]])]
    missing = Group("gone", ("tests/test_gone.py",), (fp8,), "coverage.yaml:12", matrix="template", strength=1)
    [problem] = check_group(missing, FilesSource(dict([pr, nightly])), (pr[0], nightly[0])).problems
    assert problem.message == ("no entry runs tests/test_gone.py in .github/workflows/pr-test.yml.j2, "
                               ".github/workflows/nightly-test.yml.j2; add one or drop it from the group")


def test_a_template_entry_without_num_gpus_takes_the_files_count_and_an_unreadable_one_is_located():
    template = (".github/workflows/pr-test.yml.j2", """\
<% set jobs = {'e2e': {'label': 'run-ci-e2e', 'tests': [
    {'test_file': 'test_a.py'},
    {'test_file': 'test_b.py'},
]}} -%>
""")
    gpus = Dimension("num_gpus", ("num_gpus",), (("4", ("4",)), ("6", ("6",))))
    group = Group("g", ("tests/test_a.py", "tests/test_b.py"), (gpus,), "coverage.yaml:9", matrix="template", strength=1)
    files = FilesSource(dict([template, ("tests/test_a.py", "NUM_GPUS = 4\n"), ("tests/test_b.py", "NUM_GPUS = 'x'\n")]))

    report = check_group(group, files, template[0], default_gpus=6)

    assert [(c.label, [x.test for x in report.covered_by(c)]) for c in report.cells] == [
        ("num_gpus=4", ["tests/test_a.py"]), ("num_gpus=6", ["tests/test_b.py"])]
    assert [p.path + ":" + p.field for p in report.problems] == ["tests/test_b.py:NUM_GPUS"]


# ---- only tests the catalog runs cover a cell ---------------------------------------------------

FP8_TEMPLATE = (".github/workflows/pr-test.yml.j2", """\
<% set jobs = {'e2e': {'label': 'run-ci-e2e', 'tests': [
    {'test_file': 'test_fp8.py', 'use_fp8_rollout': '0'},
    {'test_file': 'test_fp8.py', 'use_fp8_rollout': '1'},
]}} -%>
""")
FP8 = Dimension("fp8", ("use_fp8_rollout",), (("off", ("0",)), ("on", ("1",))))


def test_a_disabled_sibling_covers_nothing_and_is_reported_at_its_registration():
    source = FilesSource({FIVE: sibling(*DIAGONAL), SIX: sibling(*ANTI_DIAGONAL)})
    catalog = catalogued([make_test(id=FIVE, path=FIVE, line=4),
                          make_test(id=SIX, path=SIX, line=4, disabled="flaky, see #123")])

    report = check_group(lora_group(), source, catalog=catalog)

    assert [c.label for c in report.uncovered] == [
        "backend=megatron, layout=per-expert", "backend=tilelang, layout=shared+virtual"]
    assert [str(p) for p in report.problems] == [
        f"{SIX}:4: registration: covers nothing: disabled: flaky, see #123; its configurations count for group lora "
        "once the test runs"]
    assert report.idle == ((SIX, "disabled: flaky, see #123"),)


def test_a_sibling_the_catalog_does_not_hold_covers_nothing_and_one_running_registration_is_enough():
    source = FilesSource({FIVE: sibling(*DIAGONAL), SIX: sibling(*ANTI_DIAGONAL)})
    rocm_off = make_test(id=f"{FIVE}::rocm", path=FIVE, backend="rocm", disabled="no MI300 runner")
    catalog = catalogued([make_test(id=f"{FIVE}::cuda", path=FIVE), rocm_off])

    report = check_group(lora_group(), source, catalog=catalog)

    assert {c.test for r in report.rows for c in [r.config]} == {FIVE}
    assert [str(p) for p in report.problems] == [
        f"{SIX}:1: registration: covers nothing: not registered (no register_*_ci call the catalog reads; "
        "`nightly catalog` says why); its configurations count for group lora once the test runs"]


def test_a_sibling_tonights_selection_left_out_covers_nothing_with_the_nights_reason():
    source = FilesSource({FIVE: sibling(*DIAGONAL), SIX: sibling(*ANTI_DIAGONAL)})
    tests = [make_test(id=FIVE, path=FIVE), make_test(id=SIX, path=SIX, labels=("lora", "long"))]

    report = check_group(lora_group(), source, catalog=catalogued(tests, ran={FIVE}))

    assert len(report.uncovered) == 2 and report.idle == ((SIX, "not in tonight's selection"),)
    assert check_group(lora_group(), source, catalog=catalogued(tests, ran={FIVE, SIX})).ok


def test_a_template_entry_whose_test_id_is_disabled_covers_nothing_while_its_sibling_entry_does():
    group = Group("fp8", ("tests/test_fp8.py",), (FP8,), "coverage.yaml:9", matrix="template", strength=1)
    off, on = "tests/test_fp8.py::use_fp8_rollout=0", "tests/test_fp8.py::use_fp8_rollout=1"
    catalog = catalogued([make_test(id=off, path="tests/test_fp8.py"),
                          make_test(id=on, path="tests/test_fp8.py", disabled="fp8 kernels broken")])

    report = check_group(group, FilesSource(dict([FP8_TEMPLATE])), FP8_TEMPLATE[0], catalog=catalog)

    assert [c.label for c in report.uncovered] == ["fp8=on"]
    assert [str(p) for p in report.problems] == [
        f"{FP8_TEMPLATE[0]}:3: e2e use_fp8_rollout=1: covers nothing: disabled: fp8 kernels broken; its cells count "
        "for group fp8 once it runs"]
    assert check_group(group, FilesSource(dict([FP8_TEMPLATE])), FP8_TEMPLATE[0],
                       catalog=catalogued([make_test(id=off, path="tests/test_fp8.py"),
                                           make_test(id=on, path="tests/test_fp8.py")])).ok


def test_an_earlier_revision_counts_a_file_the_catalog_does_not_know_as_it_reads():
    source = FilesSource({FIVE: sibling(*DIAGONAL), SIX: sibling(*ANTI_DIAGONAL)})

    idle_five = Registered(FIVE, FIVE, 4, "disabled: flaky")

    report = check_group(lora_group(), source, catalog=Catalogued({FIVE: (idle_five,)}, complete=False))

    assert [t for r in report.rows for t in [r.config.test]] == [SIX, SIX], "SIX changed since: counted as it reads"
    assert report.idle == ((FIVE, "disabled: flaky"),)


def test_an_earlier_revision_of_a_template_repo_knows_its_tests_from_the_templates_then():
    """A template entry is never disabled: a file the templates listed then counts as it reads; one
    they did not list registered nothing; with the templates unchanged, today's ids hold."""
    from pathlib import Path

    from pipelines.core.coverage import RepoGroups, as_of

    fp8 = Group("fp8", ("tests/test_fp8.py", "tests/test_new.py"), (FP8,), "coverage.yaml:9", matrix="template")
    where = RepoGroups(Path("s"), "s", (fp8,), Path("coverage.yaml"), ("tests",), (FP8_TEMPLATE[0],))
    then = FilesSource(dict([FP8_TEMPLATE]))
    now = catalogued([make_test(id="tests/test_fp8.py::use_fp8_rollout=0", path="tests/test_fp8.py")])

    changed = as_of(now, where, then, {FP8_TEMPLATE[0]}, True, lambda: pytest.fail("a template repo has no dialect"))
    same = as_of(now, where, then, set(), True, lambda: pytest.fail("a template repo has no dialect"))

    assert dict(changed.files) == {"tests/test_new.py": ()} and not changed.complete
    assert dict(same.files) == {"tests/test_fp8.py": now.files["tests/test_fp8.py"], "tests/test_new.py": ()}


def test_the_rows_are_indexed_once_per_dimension_tuple_not_scanned_per_cell(monkeypatch):
    """A group of thousands of rows took minutes when every cell scanned every row (bench/coverage.py --only big)."""
    source = FilesSource({FIVE: sibling(*DIAGONAL, ("x", "megatron", "maybe", True)), SIX: sibling(*DIAGONAL)})
    report = check_group(lora_group(), source)
    reads = []
    monkeypatch.setattr(type(report.rows[0]), "labels", property(lambda row: reads.append(row) or row.__dict__["labels"]),
                        raising=False)

    assert [c.label for c in report.uncovered] == ["backend=megatron, layout=per-expert",
                                                   "backend=tilelang, layout=shared+virtual"]
    assert [c.name for c in report.covered_by(report.cells[0])] == ["m-shared", "m-shared"]  # row order; x has no layout
    assert report.uncovered is report.uncovered and len(reads) <= len(report.rows)
