"""A repo overrides its dialect's rules in assets/repos.yaml (`rules:`), field by field."""

from __future__ import annotations

import dataclasses
import shutil
import textwrap

import pytest

from pipelines.core.catalog import load_catalog
from pipelines.core.catalog.dialect import M, with_rules
from pipelines.core.model import CatalogError
from pipelines.core.select import Selection, select
from pipelines.core.specs import RepoSpec, load_specs

M_MODULE = '''
def register_cuda_ci(est_time: int, suite: str, *, labels: list[str], nightly: bool = False, disabled=None):
    """GPU run."""


def register_npu_ci(est_time: int, suite: str, *, labels=None, nightly: bool = False, disabled=None):
    """NPU run."""


def register_cpu_ci(est_time: int, suite: str, *, labels=None, nightly: bool = False, disabled=None):
    """CPU run."""
'''


def m_repo(tree, files: dict[str, str]):
    return tree({"fw/ci.py": M_MODULE, **files})


def spec(repo, **rules) -> RepoSpec:
    return RepoSpec(name="fw", path=repo, rules=rules)


def test_without_rules_the_dialect_is_unchanged_and_nothing_is_said():
    assert with_rules(M, {}) == (M, "")


def test_each_overridden_rule_is_named_with_what_the_framework_said():
    dialect, note = with_rules(M, {"nightly": "exclusive", "est_time": "non-negative", "discovery": ("*_e2e.py",)})
    assert (dialect.nightly, dialect.est_time, dialect.discovery) == ("exclusive", "non-negative", ("*_e2e.py",))
    assert note == ("rules from assets/repos.yaml override the m dialect: discovery=[*_e2e.py] (was [test_*.py]), "
                    "est_time=non-negative (was positive), nightly=exclusive (was also)")
    assert dialect.source.endswith("rules from assets/repos.yaml") and dialect.digest() != M.digest()


def test_requiring_labels_where_no_register_function_takes_them_is_said_to_be_ignored():
    no_labels = dataclasses.replace(M, functions=tuple(dataclasses.replace(s, keywords=("est_time", "suite"))
                                                       for s in M.functions))
    dialect, note = with_rules(no_labels, {"labels_required": True})
    assert dialect.functions == no_labels.functions
    assert note.endswith("labels_required=true (ignored: no register function here takes labels)")


def test_discovery_and_exclude_choose_the_files_the_runner_collects(tree):
    repo = m_repo(tree, {
        "tests/grpo_e2e.py": 'register_cpu_ci(5, "stage-a-cpu")\n',
        "tests/skip_e2e.py": 'register_cpu_ci(5, "stage-a-cpu")\n',
        "tests/test_old.py": 'register_cpu_ci(5, "stage-a-cpu")\n',
    })
    cat = load_catalog(repo, spec(repo, discovery=("*_e2e.py",), exclude=("skip_e2e.py",)))
    assert [t.id for t in cat.tests] == ["tests/grpo_e2e.py"]


def test_est_time_bounds_follow_the_rules(tree):
    repo = m_repo(tree, {
        "tests/test_zero.py": 'register_cpu_ci(0, "stage-a-cpu")\n',
        "tests/test_long.py": 'register_cpu_ci(7200, "stage-a-cpu")\n',
    })
    assert [str(p) for p in load_catalog(repo, spec(repo)).problems] == [
        "tests/test_zero.py:1: est_time: must be positive, got 0; set the expected run time in seconds"]
    cat = load_catalog(repo, spec(repo, est_time="non-negative", est_time_max=3600))
    assert [str(p) for p in cat.problems] == [
        "tests/test_long.py:1: est_time: 7200 s is more than 3600 s, this repo's limit; set the expected run time in seconds"]
    assert [(t.path, t.est_time) for t in cat.tests] == [("tests/test_zero.py", 0)]


def test_labels_can_be_made_optional_or_required(tree):
    repo = m_repo(tree, {
        "tests/test_gpu.py": 'register_cuda_ci(60, "stage-c-4-gpu-h200")\n',
        "tests/test_npu.py": 'register_npu_ci(60, "stage-c-1-gpu-910b")\n',
        "tests/test_cpu.py": 'register_cpu_ci(5, "stage-a-cpu")\n',
    })
    assert [p.path for p in load_catalog(repo, spec(repo)).problems] == ["tests/test_gpu.py"]
    assert load_catalog(repo, spec(repo, labels_required=False)).problems == ()
    required = load_catalog(repo, spec(repo, labels_required=True))
    assert [(p.path, p.field) for p in required.problems] == [("tests/test_gpu.py", "labels"), ("tests/test_npu.py", "labels")]


def test_suites_free_accepts_a_suite_without_a_gpu_count(tree):
    repo = m_repo(tree, {"tests/test_stress.py": 'register_cuda_ci(60, "stress", labels=["x"])\n'})
    (shaped,) = load_catalog(repo, spec(repo)).problems
    assert shaped.field == "suite" and "unknown suite shape 'stress'" in shaped.message
    (t,) = load_catalog(repo, spec(repo, suites="free")).tests
    assert (t.suite, t.gpus) == ("stress", 1)


def test_nightly_exclusive_makes_the_nightly_cadence_run_only_nightly_registrations(tree):
    repo = m_repo(tree, {"tests/test_a.py": ('register_cpu_ci(5, "per-commit")\n'
                                             'register_cpu_ci(5, "nightly", nightly=True)\n')})

    def nightly_suites(**rules):
        return sorted(t.suite for t in select(load_catalog(repo, spec(repo, **rules)).tests, Selection(cadence="nightly")))

    assert nightly_suites() == ["nightly", "per-commit"]
    assert nightly_suites(nightly="exclusive") == ["nightly"]


def test_default_pool_backends_decide_which_untyped_tests_may_land_on_the_default_pool(tree):
    repo = m_repo(tree, {"tests/test_npu.py": 'register_npu_ci(60, "stage-c-2-gpu")\n'})
    assert [t.hardware for t in load_catalog(repo, spec(repo)).tests] == ["npu"]
    assert [t.hardware for t in load_catalog(repo, spec(repo, default_pool_backends=("cuda", "npu"))).tests] == [""]


def _assets(project_root, tmp_path, repo_text: str):
    d = tmp_path / "assets"
    shutil.copytree(project_root / "assets", d)
    (d / "repos.yaml").write_text(textwrap.dedent(repo_text))
    return d


def test_rules_load_from_repos_yaml_with_lists_as_tuples(project_root, tmp_path):
    d = _assets(project_root, tmp_path, """\
        repos:
          fw:
            path: .
            rules:
              nightly: exclusive
              discovery: ["*.py"]
              labels_required: false
    """)
    assert load_specs(d).repo("fw").rules == {"discovery": ("*.py",), "nightly": "exclusive", "labels_required": False}


def test_an_unknown_rule_or_a_wrong_type_is_a_located_problem_naming_the_valid_keys(project_root, tmp_path):
    d = _assets(project_root, tmp_path, """\
        repos:
          fw:
            path: .
            rules:
              nightley: exclusive
              est_time: zero
              labels_required: "no"
              discovery: "test_*.py"
    """)
    with pytest.raises(CatalogError) as exc:
        load_specs(d)
    text = str(exc.value)
    assert (":5: repos.fw.rules.nightley: unknown key; did you mean 'nightly'? known keys: discovery, exclude, "
            "est_time, est_time_max, suites, nightly, labels_required, default_pool_backends") in text
    assert ":6: repos.fw.rules.est_time: must be one of 'positive' or 'non-negative', got 'zero'; pick one" in text
    assert ":7: repos.fw.rules.labels_required: expected true or false, got text 'no'; write true or false" in text
    assert ":8: repos.fw.rules.discovery: expected a list, got text 'test_*.py'; write a YAML list" in text
