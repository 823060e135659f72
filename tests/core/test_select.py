"""Selection: cadences, labels, suites, and changed paths (the framework's rules)."""

from __future__ import annotations

import pytest

from pipelines.core.model import Discovery
from pipelines.core.select import (
    Selection,
    SelectionError,
    in_cadence,
    is_test_file,
    repo_relative,
    select,
    select_changed,
    split_csv,
    why_nothing,
)
from tests.conftest import make_test

A = make_test(id="a", path="tests/e2e/test_a.py", labels=("megatron",))
B = make_test(id="b", path="tests/e2e/test_b.py", labels=("fsdp", "short"), nightly=True)
LONG = make_test(id="long", path="tests/e2e/test_long.py", labels=("long",))
FT = make_test(id="ft", path="tests/e2e/test_ft.py", labels=("ft-long",), suite="stage-c-8-gpu-h200")
ALL = [A, B, LONG, FT]


def ids(tests) -> list[str]:
    return [t.id for t in tests]


def test_nightly_skips_long_and_ft_long_labels_and_weekly_runs_everything():
    assert ids(select(ALL, Selection(cadence="nightly"))) == ["a", "b"]
    assert ids(select(ALL, Selection(cadence="weekly"))) == ["a", "b", "long", "ft"]
    assert ids(select(ALL, Selection(cadence="release"))) == ["a", "b", "long", "ft"]


def test_per_commit_runs_skip_only_nightly_only_tests():
    # long/ft-long are left out by the nightly cadence only; a PR picking their label runs them
    assert ids(select(ALL, Selection(cadence="pr"))) == ["a", "long", "ft"]
    assert ids(select(ALL, Selection(cadence="pr", labels=("long",)))) == ["long"]


def test_an_unknown_cadence_is_an_error_that_lists_the_cadences():
    with pytest.raises(SelectionError, match="unknown cadence 'daily'; use one of pr, nightly, weekly, release"):
        in_cadence(A, "daily")


def test_labels_pick_tests_with_any_of_them():
    assert ids(select(ALL, Selection(labels=split_csv(["fsdp,long"])))) == ["b", "long"]


def test_an_unknown_suite_is_an_error_not_an_empty_selection():
    with pytest.raises(SelectionError, match="unknown suite.s. stage-x; registered suites: stage-c-4-gpu-h200"):
        select(ALL, Selection(suites=("stage-x",)))


def test_a_changed_registered_test_selects_only_itself():
    assert ids(select_changed(ALL, ["tests/e2e/test_b.py"])) == ["b"]
    assert ids(select_changed(ALL, ["./tests/e2e/test_b.py", "tests/e2e/test_a.py"])) == ["a", "b"]


def test_docs_and_markdown_select_nothing():
    assert select_changed(ALL, ["docs/guide.rst", "README.md", "tests/e2e/NOTES.md"]) == []


def test_any_other_changed_path_selects_everything():
    assert ids(select_changed(ALL, ["README.md", "minirl/train.py"])) == ["a", "b", "long", "ft"]
    assert ids(select_changed(ALL, ["tests/e2e/conftest.py", "tests/e2e/test_a.py"])) == ["a", "b", "long", "ft"]


def test_no_changed_paths_select_nothing():
    assert select_changed(ALL, []) == []


def test_changed_paths_combine_with_the_cadence():
    # the long test changed, but nightly skips it; it is still a test file, not library code
    assert select(ALL, Selection(cadence="nightly", changed=("tests/e2e/test_long.py",))) == []
    assert ids(select(ALL, Selection(cadence="nightly", changed=("setup.py",)))) == ["a", "b"]
    assert ids(select(ALL, Selection(cadence="nightly"))) == ["a", "b"]


def test_an_empty_selection_names_the_flag_and_the_labels_that_exist():
    assert why_nothing(ALL, Selection(labels=("nosuch",))) == (
        "--labels nosuch selects none of the 4 test(s) the other flags leave; labels there: fsdp, ft-long, long, "
        "megatron, short (pick one of them, or drop --labels)")


def test_an_empty_selection_lists_only_what_the_earlier_flags_leave():
    why = why_nothing(ALL, Selection(suites=("stage-c-8-gpu-h200",), labels=("megatron",)))
    assert why.startswith("--labels megatron selects none of the 1 test(s) the other flags leave; labels there: ft-long")
    assert why_nothing(ALL, Selection(backend="amd")).startswith(
        "--backend amd selects none of the 4 test(s) the other flags leave; backends there: cuda")
    assert why_nothing(ALL, Selection(cadence="pr", labels=("fsdp",))).startswith(
        "--cadence pr selects none of the 1 test(s) the other flags leave; cadences that run some of them there: "
        "nightly, weekly, release")


def test_a_selection_that_matches_something_needs_no_explanation():
    assert why_nothing(ALL, Selection(cadence="nightly", labels=("fsdp",))) == ""
    assert why_nothing([], Selection()).startswith("the catalog has no tests")


def test_absolute_changed_paths_inside_the_repo_become_repo_relative():
    assert repo_relative(["/src/fw/tests/e2e/test_b.py", "tests/e2e/test_a.py"], "/src/fw") == (
        "tests/e2e/test_b.py", "tests/e2e/test_a.py")
    assert ids(select(ALL, Selection(changed=repo_relative(["/src/fw/tests/e2e/test_b.py"], "/src/fw/")))) == ["b"]


def test_changed_paths_outside_the_repo_are_an_error_that_lists_them():
    with pytest.raises(SelectionError, match=r"--changed: /src/other/test_b.py, /src/fwx/a.py: outside the repo "
                                             r"/src/fw; give paths inside it"):
        repo_relative(["/src/other/test_b.py", "/src/fw/ok.py", "/src/fwx/a.py"], "/src/fw")


def test_dot_dot_segments_collapse_so_a_changed_test_selects_only_itself():
    assert ids(select_changed(ALL, ["tests/e2e/../e2e/test_b.py"])) == ["b"]
    assert repo_relative(["tests/x/../e2e/test_b.py", "/src/fw/tests/../tests/e2e/test_a.py"], "/src/fw") == (
        "tests/e2e/test_b.py", "tests/e2e/test_a.py")


def test_changed_paths_that_climb_above_the_repo_are_an_error_that_lists_them():
    with pytest.raises(SelectionError, match=r"--changed: \.\./\.\./etc/passwd, test/\.\./\.\./x, /src/fw/\.\./fwx/a.py: "
                                             r"outside the repo /src/fw; give paths inside it"):
        repo_relative(["../../etc/passwd", "tests/ok.py", "test/../../x", "/src/fw/../fwx/a.py"], "/src/fw")
    with pytest.raises(SelectionError, match=r"--changed: \.\./setup.py: outside the repo; give paths inside it"):
        select(ALL, Selection(changed=("../setup.py",)))  # a caller that skipped repo_relative still cannot select all


def test_a_test_named_file_outside_the_runner_roots_is_library_code_and_selects_everything():
    assert ids(select_changed(ALL, ["python/fw/test/test_utils.py"])) == ["a", "b", "long", "ft"]
    assert select_changed(ALL, ["tests/e2e/test_new.py"]) == []  # under the roots: an unlisted test
    assert ids(select(ALL, Selection(changed=("fw/test_helpers.py",)))) == ["a", "b", "long", "ft"]


def test_what_is_a_test_file_follows_the_runner_s_roots_globs_and_excluded_names():
    sglang = Discovery(roots=("test/registered",), globs=("*.py",), exclude=("conftest.py", "__init__.py"))
    assert is_test_file("test/registered/kernels/bench_moe.py", sglang)
    assert not is_test_file("test/registered/conftest.py", sglang)  # every test imports it
    assert not is_test_file("python/sglang/test/test_utils.py", sglang)
    assert not is_test_file("test/registered/.cache/test_x.py", sglang)
    assert is_test_file("anywhere/test_x.py", Discovery(roots=(".",)))
    assert not is_test_file("tests/helper.py", Discovery())
    sg = make_test(id="sg", path="test/registered/test_s.py")
    assert select_changed([sg], ["test/registered/bench_new.py"], discovery=sglang) == []
    assert ids(select_changed([sg], ["test/registered/conftest.py"], discovery=sglang)) == ["sg"]
