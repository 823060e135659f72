"""Test ids are safe Dagster partition keys, reversible to the file; hostile names are rejected."""

from __future__ import annotations

import os

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pipelines.core.catalog import load_catalog
from pipelines.core.catalog.ids import (
    id_from_filename,
    id_problem,
    make_id,
    path_problem,
    safe_filename,
    test_id_to_path,
)
from pipelines.core.specs import RepoSpec

REGISTERED = 'register_cpu_ci(1, "stage-a-cpu")\n'


@pytest.mark.parametrize(("path", "why"), [
    ("tests/../etc/test_x.py", "contains '..'"),
    ("tests/test_a|b.py", "contains character '|'"),
    ("tests/test_a,b.py", "contains character ','"),
    ("tests/test_[a].py", "contains character '['"),
    ("tests/test_a b.py", "contains whitespace ' '"),
    ("tests/test_\x07.py", "contains control character '\\x07'"),
    ("tests/test_é.py", "contains non-ASCII character '\\xe9'"),
    ("tests/test_\u00a0.py", "contains non-ASCII character '\\xa0'"),
    ("tests/test_\t.py", "contains whitespace '\\t'"),
    ("tests/test_$(rm).py", "contains character '$'"),
    ("tests/test_a;b.py", "contains character ';'"),
    ("tests/test_a:b.py", "contains character ':'"),
    ("/abs/test_a.py", "absolute path"),
    ("tests//test_a.py", "contains an empty path segment"),
    ("tests/.hidden/test_a.py", "has a path segment starting with '.'"),
    (".tests/test_a.py", "has a path segment starting with '.'"),
    ("tests/", "contains an empty path segment"),
    ("", "empty path"),
    ("tests/test_a.py\n", "contains whitespace '\\n'"),
    ("tests/..", "contains '..'"),
])
def test_unsafe_paths_are_rejected_with_the_reason(path, why):
    assert path_problem(path).startswith(why)


def test_ordinary_paths_and_variants_are_accepted():
    assert path_problem("tests/e2e/megatron/test_qwen3.5_0.8B-x+y=z@1.py") is None
    assert id_problem(make_id("tests/test_a.py", "cuda-stage-c-4-gpu-h200")) is None
    assert id_problem("tests/test_a.py::bad variant") == "contains whitespace ' '; variants may only use ASCII letters, digits and ._-+=@/"


def test_an_id_reverses_to_its_file():
    assert test_id_to_path("tests/test_a.py") == "tests/test_a.py"
    assert test_id_to_path("tests/test_a.py::rocm-stage-c-8-gpu-mi300") == "tests/test_a.py"
    assert test_id_to_path("tests/test_ckpt.py::--save+gpu") == "tests/test_ckpt.py"


def test_safe_filenames_have_no_slash_and_are_not_hidden():
    name = safe_filename("tests/e2e/test_a.py::cuda-stage-c-4-gpu-h200")
    assert name == "tests%2Fe2e%2Ftest_a.py%3A%3Acuda-stage-c-4-gpu-h200"
    assert safe_filename(".hidden") == "%2Ehidden"
    assert safe_filename("..") == "%2E."
    assert safe_filename("") == "%"


@given(st.text(max_size=60))
def test_safe_filename_reverses_for_any_text(text):
    name = safe_filename(text)
    assume("~" not in name)  # shortened names are covered below
    assert "/" not in name and "\x00" not in name and name not in (".", "..")
    assert id_from_filename(name) == text


@given(st.text(max_size=60), st.text(max_size=60))
def test_distinct_ids_never_share_a_filename(a, b):
    if a != b:
        assert safe_filename(a) != safe_filename(b)


def test_very_long_ids_are_shortened_with_a_hash_and_stay_distinct():
    a, b = "tests/" + "x" * 300 + "_a.py", "tests/" + "x" * 300 + "_b.py"
    assert len(safe_filename(a)) <= 200 and safe_filename(a) != safe_filename(b)
    with pytest.raises(ValueError, match="shortened with a hash"):
        id_from_filename(safe_filename(a))


def test_hostile_file_names_in_a_repo_are_reported_and_skipped(tree):
    repo = tree({"tests/test_ok.py": REGISTERED, "tests/test_a b.py": REGISTERED, "tests/test_a,b.py": REGISTERED,
                 "tests/test_x|y.py": REGISTERED, "tests/test_\u00e9.py": REGISTERED})
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="registry"))
    assert [t.id for t in cat.tests] == ["tests/test_ok.py"]
    assert {str(p) for p in cat.problems} == {
        "tests/test_a b.py:1: path: contains whitespace ' '; test paths may only use ASCII letters, digits and ._-+=@/; "
        "rename the file (test ids must be safe partition keys)",
        "tests/test_a,b.py:1: path: contains character ','; test paths may only use ASCII letters, digits and ._-+=@/; "
        "rename the file (test ids must be safe partition keys)",
        "tests/test_x|y.py:1: path: contains character '|'; test paths may only use ASCII letters, digits and ._-+=@/; "
        "rename the file (test ids must be safe partition keys)",
        "tests/test_\\xe9.py:1: path: contains non-ASCII character '\\xe9'; test paths may only use ASCII letters, "
        "digits and ._-+=@/; rename the file (test ids must be safe partition keys)",
    }


def test_a_symlink_escaping_the_repo_is_rejected_and_one_inside_is_kept(tree, tmp_path):
    repo = tree({"tests/test_real.py": REGISTERED})
    outside = tmp_path / "elsewhere.py"
    outside.write_text(REGISTERED)
    os.symlink(outside, repo / "tests/test_escape.py")
    os.symlink(repo / "tests/test_real.py", repo / "tests/test_alias.py")
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="registry"))
    assert [t.id for t in cat.tests] == ["tests/test_alias.py", "tests/test_real.py"]
    (problem,) = cat.problems
    assert str(problem) == (f"tests/test_escape.py:1: path: resolves outside the repository ({outside}); "
                            "replace the symlink with the file itself")


def test_a_symlinked_folder_outside_the_repo_is_not_followed_and_said_so(tree, tmp_path):
    repo = tree({"tests/test_real.py": REGISTERED})
    (tmp_path / "other").mkdir()
    (tmp_path / "other/test_out.py").write_text(REGISTERED)
    os.symlink(tmp_path / "other", repo / "tests/linked")
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="registry"))
    assert [t.id for t in cat.tests] == ["tests/test_real.py"]
    assert cat.assumptions == (
        f"symlinked folder tests/linked not followed, its files are not listed: it leads outside the repository "
        f"({tmp_path / 'other'}); replace the link with the folder itself if the runner should collect its files",)


def test_a_symlinked_folder_inside_the_repo_is_followed_under_the_link_path_as_the_runners_glob_does(tree, tmp_path):
    """SGLang's runner collects ``glob("registered/**/*.py", recursive=True)``, which follows linked folders."""
    import glob

    repo = tree({"tests/a/test_a.py": REGISTERED, "shared/test_s.py": REGISTERED})
    os.symlink("../shared", repo / "tests/shared")
    runner = sorted(glob.glob("tests/**/test_*.py", root_dir=repo, recursive=True))
    cache = tmp_path / "cache"
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="registry"), cache_dir=cache)
    assert [t.id for t in cat.tests] == runner == ["tests/a/test_a.py", "tests/shared/test_s.py"]
    assert cat.problems == () and cat.assumptions == ()
    (repo / "shared/test_s.py").write_text('register_cpu_ci(7, "stage-a-cpu")\n')  # the kept catalog sees edits
    (repo / "shared/test_t.py").write_text(REGISTERED)  # ... and new files under the link
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="registry"), cache_dir=cache)
    assert [(t.id, t.est_time) for t in cat.tests] == [
        ("tests/a/test_a.py", 1), ("tests/shared/test_s.py", 7), ("tests/shared/test_t.py", 1)]


def test_a_symlinked_folder_leading_back_up_is_a_loop_not_followed_and_said_so(tree):
    repo = tree({"tests/a/test_a.py": REGISTERED})
    os.symlink("..", repo / "tests/a/up")
    os.symlink("../a", repo / "tests/a/again")  # the folder it is in
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="registry"))
    assert [t.id for t in cat.tests] == ["tests/a/test_a.py"]
    assert cat.assumptions == tuple(
        f"symlinked folder tests/a/{name} not followed, its files are not listed: it leads back to {target}, a folder "
        "it is in; the runner's recursive glob walks such a loop again and again: remove the link"
        for name, target in (("again", "tests/a"), ("up", "tests")))


