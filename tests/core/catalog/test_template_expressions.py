"""Framework S templates as maintainers write them: concatenated lists, sets inside blocks, job matrices."""

from __future__ import annotations

from pipelines.core.catalog import load_catalog
from pipelines.core.specs import RepoSpec

WORKFLOW = ".github/workflows/pr-test.yml.j2"
TESTS = {f"tests/{name}": "" for name in ("test_fsdp.py", "test_megatron.py", "test_moe.py")}


def load(tree, template: str):
    repo = tree({**TESTS, WORKFLOW: template})
    return load_catalog(repo, RepoSpec(name="fw", path=repo, format="template"))


def test_two_test_lists_joined_with_plus_are_one_job_holding_both(tree):
    cat = load(tree, """
        <% set fsdp_tests = [{'test_file': 'test_fsdp.py', 'num_gpus': 4}] %>
        <% set megatron_tests = [{'test_file': 'test_megatron.py', 'num_gpus': 8}] %>
        <% set jobs = {
            'e2e-all': {'label': 'run-ci-all', 'tests': fsdp_tests + megatron_tests + [{'test_file': 'test_moe.py'}]},
        } %>
        """)
    assert cat.problems == ()
    assert [(t.id, t.suite, t.gpus) for t in cat.tests] == [
        ("tests/test_fsdp.py", "e2e-all", 4), ("tests/test_megatron.py", "e2e-all", 8), ("tests/test_moe.py", "e2e-all", 8)]


def test_plus_of_a_list_and_a_string_is_a_located_problem_naming_both_types(tree):
    cat = load(tree, """
        <% set jobs = {'j': {'label': 'run-ci-j', 'tests': [{'test_file': 'test_fsdp.py', 'test_args': '--a ' + 'b'}]},
                       'k': {'tests': [{'test_file': 'test_moe.py'}] + 'x'}} %>
        """)
    assert [(t.id, t.args) for t in cat.tests] == [("tests/test_fsdp.py", ("--a", "b"))]
    assert [str(p) for p in cat.problems] == [
        f"{WORKFLOW}:2: jobs.k.tests: `+` joins two lists or two strings here, not a list and a str; "
        "write both sides as lists (or both as strings); this entry is skipped"]
