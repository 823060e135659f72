"""Framework S templates as maintainers write them: concatenated lists, sets inside blocks, job matrices."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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


CONFIG_IN_LOOP = """
    <% set megatron_tests = [{'test_file': 'test_megatron.py', 'num_gpus': 8}] %>
    <% set jobs = {'e2e-megatron': {'label': 'run-ci-megatron', 'tests': megatron_tests}} %>
    <% set python_version = env_python | default('3.11') %>
    jobs:
    <% for name, config in jobs.items() %>
    <% set image = config.image | default('fws/ci:latest') %>
      << name >>:
        container: << image >>
    <% endfor %>
    """


def test_a_set_inside_the_jobs_loop_is_not_a_problem(tree):
    cat = load(tree, CONFIG_IN_LOOP)
    assert cat.problems == ()
    assert [t.id for t in cat.tests] == ["tests/test_megatron.py"]


def test_an_unreadable_set_that_no_job_uses_is_a_note_not_a_problem(tree):
    cat = load(tree, CONFIG_IN_LOOP)
    assert (f"{WORKFLOW}:3: set python_version: not used by `jobs`, and the catalog cannot read it (Filter is not a "
            "literal); ignored") in cat.assumptions


def test_an_unreadable_set_that_a_job_uses_is_still_a_problem(tree):
    cat = load(tree, """
        <% set megatron_tests = lookup('x') %>
        <% set all_tests = megatron_tests %>
        <% set jobs = {'j': {'tests': all_tests}} %>
        """)
    assert [str(p).split(";")[0] for p in cat.problems] == [
        f"{WORKFLOW}:1: set megatron_tests: Call is not a literal",
        f"{WORKFLOW}:2: set all_tests: `megatron_tests` could not be read (line 1)",
        f"{WORKFLOW}:3: jobs.j.tests: `all_tests` could not be read (line 2)"]


def test_a_night_with_a_set_inside_the_loop_exits_zero_in_nightly_catalog(tree, tmp_path):
    repo = tree({**TESTS, WORKFLOW: textwrap.dedent(CONFIG_IN_LOOP)})
    done = subprocess.run([sys.executable, "-m", "pipelines", "catalog", "--repo", str(repo), "--strict", "--no-cache"],
                          capture_output=True, text=True, cwd=Path(__file__).parents[3],
                          env={"NIGHTLY_HOME": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "tests/test_megatron.py" in done.stdout


#: the body of a template that renders a job's include and exclude lists into its strategy.matrix
RENDERS_MATRIX = """
    <% for name, config in jobs.items() %>
      << name >>:
        strategy:
          matrix:
            info: << config.tests | tojson >>
            exclude: << config['exclude'] | default([]) | tojson >>
            include: << config.get('include', []) | tojson >>
    <% endfor %>
    """

MATRIX_JOB = """
    <% set megatron_tests = [
        {'test_file': 'test_megatron.py', 'num_gpus': 8},
        {'test_file': 'test_megatron.py', 'num_gpus': 8, 'use_deepep': '1'},
    ] %>
    <% set jobs = {
        'e2e-megatron': {
            'label': 'run-ci-megatron', 'tests': megatron_tests, 'image': 'fws/ci:latest',
            'exclude': [{'info': {'test_file': 'test_megatron.py', 'num_gpus': 8, 'use_deepep': '1'}}],
            'include': [{'info': {'test_file': 'test_moe.py', 'num_gpus': 4}},
                        {'info': {'test_file': 'test_megatron.py', 'num_gpus': 8}},
                        {'info': {'test_file': 'test_fsdp.py', 'num_gpus': 2}, 'runner': 'big'}],
        },
    } %>
    """ + RENDERS_MATRIX


def test_a_job_matrix_exclude_drops_the_combination_and_include_adds_one_as_github_does(tree):
    cat = load(tree, MATRIX_JOB)
    assert cat.problems == ()
    assert [(t.id, t.gpus) for t in cat.tests] == [  # the included copy of an existing entry adds nothing
        ("tests/test_fsdp.py", 2), ("tests/test_megatron.py", 8), ("tests/test_moe.py", 4)]


def test_a_job_key_the_catalog_does_not_read_is_a_located_note(tree):
    notes = load(tree, MATRIX_JOB).assumptions
    assert (f"{WORKFLOW}:6: jobs.e2e-megatron.image: not read by the catalog (it reads label, tests, cpu, include, "
            "exclude); the job's tests are listed without it") in notes
    assert (f"{WORKFLOW}:11: jobs.e2e-megatron.include[2].runner: not read by the catalog (it reads `info` of an "
            "include or exclude entry); the included entry is listed without it") in notes


def test_an_exclude_drops_every_entry_it_partly_matches_as_github_does(tree):
    """GitHub: an excluded configuration only has to be a partial match (object values too)."""
    cat = load(tree, """
        <% set jobs = {'j': {'tests': [{'test_file': 'test_moe.py', 'num_gpus': 8},
                                       {'test_file': 'test_moe.py', 'num_gpus': 8, 'test_args': '--tp 4'},
                                       {'test_file': 'test_fsdp.py', 'num_gpus': 2}],
                             'exclude': [{'info': {'test_file': 'test_moe.py'}}]}} %>
        """ + RENDERS_MATRIX)
    assert [t.id for t in cat.tests] == ["tests/test_fsdp.py"]


def test_an_exclude_that_matches_no_entry_is_named(tree):
    cat = load(tree, """
        <% set jobs = {'j': {'tests': [{'test_file': 'test_moe.py', 'num_gpus': 8}],
                             'exclude': [{'info': {'test_file': 'test_moe.py', 'num_gpus': 4}}]}} %>
        """ + RENDERS_MATRIX)
    assert [t.id for t in cat.tests] == ["tests/test_moe.py"]
    assert (f"{WORKFLOW}:2: jobs.j.exclude[0]: matches no entry of the job (no entry's `info` has every key and value "
            "it gives); nothing is excluded") in cat.assumptions


def test_include_and_exclude_the_template_never_renders_change_nothing_and_are_named(tree):
    """A body rendering only `info: << config.tests | tojson >>` gives GitHub the un-excluded matrix: the catalog
    lists it so, never drops an excluded entry or invents an included one."""
    cat = load(tree, """
        <% set jobs = {'j': {'tests': [{'test_file': 'test_moe.py', 'num_gpus': 8},
                                       {'test_file': 'test_fsdp.py', 'num_gpus': 2}],
                             'exclude': [{'info': {'test_file': 'test_moe.py'}}],
                             'include': [{'info': {'test_file': 'test_megatron.py', 'num_gpus': 4}}]}} %>
        jobs:
        <% for name, config in jobs.items() %>
          << name >>:
            strategy:
              matrix:
                info: << config.tests | tojson >>
        <% endfor %>
        """)
    assert [t.id for t in cat.tests] == ["tests/test_fsdp.py", "tests/test_moe.py"]
    for key, line in (("exclude", 3), ("include", 4)):
        assert (f"{WORKFLOW}:{line}: jobs.j.{key}: not rendered by the template (its body never reads `config.{key}`), so "
                "GitHub runs the job without it; the job's tests are listed without it") in cat.assumptions
    rendered = load(tree, """
        <% set jobs = {'j': {'tests': [{'test_file': 'test_moe.py', 'num_gpus': 8},
                                       {'test_file': 'test_fsdp.py', 'num_gpus': 2}],
                             'exclude': [{'info': {'test_file': 'test_moe.py'}}],
                             'include': [{'info': {'test_file': 'test_megatron.py', 'num_gpus': 4}}]}} %>
        """ + RENDERS_MATRIX)
    assert [t.id for t in rendered.tests] == ["tests/test_fsdp.py", "tests/test_megatron.py"]


BOTH = {
    "tests/test_registered.py": 'register_cuda_ci(60, "stage-c-8-gpu-h200", labels=["megatron"])\n',
    "tests/test_template_only.py": "",
    ".github/workflows/nightly-test.yml.j2": """
        <% set jobs = {'nightly': {'label': 'run-ci-nightly', 'tests': [
            {'test_file': 'test_registered.py', 'num_gpus': 8}, {'test_file': 'test_template_only.py', 'num_gpus': 4}]}} %>
        """,
}


def test_a_repo_with_registrations_and_a_template_names_the_template_it_does_not_read(tree):
    cat = load_catalog(tree(BOTH))
    assert [t.id for t in cat.tests] == ["tests/test_registered.py"]
    assert ("format: registry, so .github/workflows/nightly-test.yml.j2 (2 entries) is not read; set `format: "
            "template` for this repo in assets/repos.yaml to read the template instead") in cat.assumptions
    assert [str(p).split(";")[0] for p in cat.problems] == [
        "tests/test_template_only.py:1: registration: no register_cuda_ci/register_rocm_ci/register_cpu_ci call at "
        "module level, but .github/workflows/nightly-test.yml.j2 lists it (not read: format registry)"]


def _workflow(name: str, on: str, test_file: str) -> str:
    return (f"<% set jobs = {{'{name}': {{'label': 'run-ci-{name}', 'tests': [{{'test_file': '{test_file}'}}]}}}} %>\n"
            f"on:\n{on}jobs:\n  x: {{}}\n")


def test_entries_only_a_scheduled_workflow_lists_are_nightly_only(tree):
    from pipelines.core.select import in_cadence
    repo = tree({**TESTS,
                 ".github/workflows/nightly-test.yml.j2": _workflow("nightly", "  schedule:\n    - cron: '0 3 * * *'\n",
                                                                    "test_moe.py"),
                 ".github/workflows/pr-test.yml.j2": _workflow("pr", "  pull_request:\n    types: [labeled]\n",
                                                               "test_fsdp.py")})
    by_id = load_catalog(repo, RepoSpec(name="fw", path=repo, format="template")).by_id()
    assert [c for c in ("pr", "nightly") if in_cadence(by_id["tests/test_moe.py"], c)] == ["nightly"]
    assert [c for c in ("pr", "nightly") if in_cadence(by_id["tests/test_fsdp.py"], c)] == ["pr", "nightly"]


@pytest.mark.parametrize("on", [
    "#  push:\n#    branches: [main]\n  pull_request:\n",   # a trigger commented out at column 0
    "  workflow_call:\n",                                  # a reusable workflow a PR workflow calls
    "  schedule:\n    - cron: '0 3 * * *'\n  pull_request:\n",
    "  schedule:\n    - cron: '0 3 * * *'\n  push:\n    branches: [main]\n",  # every commit to main
    "  schedule:\n    - cron: '0 3 * * *'\n  push:\n    tags: ['v*']\n    branches: [main]\n",
], ids=["comment at column 0", "workflow_call", "schedule and PR", "schedule and push", "push of tags and branches"])
def test_a_workflow_that_may_run_for_a_pr_is_not_nightly_only(tree, on):
    from pipelines.core.select import in_cadence
    repo = tree({**TESTS, ".github/workflows/pr-test.yml.j2": _workflow("pr", on, "test_fsdp.py")})
    by_id = load_catalog(repo, RepoSpec(name="fw", path=repo, format="template")).by_id()
    assert in_cadence(by_id["tests/test_fsdp.py"], "pr")


@pytest.mark.parametrize("on", [
    "  schedule:\n    - cron: '0 3 * * *'\n  push:\n    tags: ['v*']\n",
    "  {schedule: [{cron: '0 3 * * *'}], push: {tags: ['v*']}}\n",
    "  schedule:\n    - cron: '0 3 * * *'\n  push:\n    tags-ignore: ['nightly-*']\n",
], ids=["block", "flow", "tags-ignore"])
def test_a_scheduled_workflow_also_pushed_for_tags_only_is_nightly_only(tree, on):
    """`push: {tags: [...]}` runs for a release tag, never for a pushed commit: no per-change event."""
    from pipelines.core.select import in_cadence
    repo = tree({**TESTS, ".github/workflows/nightly.yml.j2": _workflow("nightly", on, "test_moe.py")})
    by_id = load_catalog(repo, RepoSpec(name="fw", path=repo, format="template")).by_id()
    assert [c for c in ("pr", "nightly") if in_cadence(by_id["tests/test_moe.py"], c)] == ["nightly"]


SCHEDULED_WITH_JINJA = """\
<# The GPU tests. Delimiters <% %>, << >> and these comments. #>
<% set jobs = {'nightly': {'label': 'run-ci-nightly', 'tests': [{'test_file': 'test_moe.py'}]}} %>
name: nightly
on:
  schedule:
    - cron: '0 3 * * *'
jobs:
<% for name, config in jobs.items() %>
  << name >>:
    runs-on: [self-hosted]
    strategy:
      matrix:
        info: << config.tests | tojson >>
<% endfor %>
"""


def test_a_scheduled_template_with_comments_and_templated_job_keys_is_nightly_only(tree):
    """Only the top-level `on:` is read: the `<< name >>:` job keys below it need not be YAML."""
    from pipelines.core.select import in_cadence
    repo = tree({**TESTS, ".github/workflows/nightly.yml.j2": SCHEDULED_WITH_JINJA})
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="template"))
    assert [c for c in ("pr", "nightly") if in_cadence(cat.by_id()["tests/test_moe.py"], c)] == ["nightly"]
    assert not any("`on:`" in n for n in cat.assumptions)


def test_an_on_block_that_cannot_be_read_runs_on_every_cadence_and_says_so(tree):
    from pipelines.core.select import in_cadence
    broken = SCHEDULED_WITH_JINJA.replace("    - cron: '0 3 * * *'", "    - cron: [unclosed")
    repo = tree({**TESTS, ".github/workflows/nightly.yml.j2": broken})
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="template"))
    assert in_cadence(cat.by_id()["tests/test_moe.py"], "pr")
    assert (".github/workflows/nightly.yml.j2:4: `on:` cannot be read as a list of events; its entries are taken to "
            "run on every cadence") in cat.assumptions


def test_the_note_on_an_unreadable_on_names_its_line_below_multi_line_jinja_parts(tree):
    """Multi-line `<# #>` and `<% set %>` parts above `on:` still count their lines."""
    broken = SCHEDULED_WITH_JINJA.replace("    - cron: '0 3 * * *'", "    - cron: [unclosed").replace(
        "<# The GPU tests. Delimiters <% %>, << >> and these comments. #>",
        "<# The GPU tests.\n   Delimiters <% %>, << >> and these comments. #>").replace(
        "'tests': [{'test_file': 'test_moe.py'}]}} %>", "\n  'tests': [{'test_file': 'test_moe.py'}]}}\n%>")
    repo = tree({**TESTS, ".github/workflows/nightly.yml.j2": broken})
    on_line = broken.splitlines().index("on:") + 1
    assert on_line == 7
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="template"))
    assert (f".github/workflows/nightly.yml.j2:{on_line}: `on:` cannot be read as a list of events; its entries are "
            "taken to run on every cadence") in cat.assumptions


def test_a_kept_catalog_is_not_reused_once_the_unread_template_changes(tree, tmp_path):
    both = dict(BOTH)
    repo = tree(both)
    cache = tmp_path / "cache"
    first = load_catalog(repo, cache_dir=cache)
    assert any("(2 entries) is not read" in n for n in first.assumptions)
    assert any("(2 entries) is not read" in n for n in load_catalog(repo, cache_dir=cache).assumptions)  # kept
    wf = repo / ".github/workflows/nightly-test.yml.j2"
    wf.write_text(wf.read_text().replace("'tests': [", "'tests': [{'test_file': 'test_registered.py'}, ", 1))
    assert any("(3 entries) is not read" in n for n in load_catalog(repo, cache_dir=cache).assumptions)


MORE_AXES = """
    <% set megatron_tests = [{'test_file': 'test_megatron.py', 'num_gpus': 4}] %>
    <% set jobs = {'e2e-megatron': {'label': 'run-ci-megatron', 'tests': megatron_tests}} %>
    jobs:
    <% for name, config in jobs.items() %>
      << name >>:
        strategy:
          matrix:
            info: << config.tests | tojson >>
            backend: [megatron, fsdp]
            'precision':
              - bf16
              - fp8
        env:
          TRAIN_BACKEND: ${{ matrix.backend }}
          PRECISION: ${{ matrix.precision || 'bf16' }}
          ENABLE_EVAL: ${{ matrix.info.enable_eval || '1' }}
        steps:
          - run: python tests/${{ matrix.info.test_file }} --seed ${{ matrix.seed }}
    <% endfor %>
    """


def test_matrix_axes_beside_info_and_the_values_they_feed_are_located_problems_not_dropped_cells(tree):
    """GitHub runs each entry once per backend x precision; the catalog lists it once: never silently."""
    cat = load(tree, MORE_AXES)
    assert [t.id for t in cat.tests] == ["tests/test_megatron.py"]
    assert [(p.line, p.field) for p in cat.problems] == [
        (9, "strategy.matrix.backend"), (10, "strategy.matrix.precision"), (18, "matrix.seed")]
    backend, precision, seed = (str(p) for p in cat.problems)
    assert backend == (
        f"{WORKFLOW}:9: strategy.matrix.backend: an axis beside `info` is not read: GitHub runs each test of the job "
        "once per backend value and gives it ${{ matrix.backend }} (TRAIN_BACKEND at line 14), the catalog lists each "
        "test once, without it; list each combination as an entry of the job's test list instead ({'test_file': ..., "
        "'backend': '<value>'} with `TRAIN_BACKEND: ${{ matrix.info.backend }}`): the catalog makes one test per entry")
    assert "(PRECISION at line 15)" in precision
    assert seed.startswith(f"{WORKFLOW}:18: matrix.seed: ${{{{ matrix.seed }}}} is a matrix value the catalog does not "
                           "read (it reads `info` and its keys), so the tests of the job would run without it")


UNIT_JOB_BESIDE = """
    <% set megatron_tests = [{'test_file': 'test_megatron.py', 'num_gpus': 4}] %>
    <% set jobs = {'e2e-megatron': {'label': 'run-ci-megatron', 'tests': megatron_tests}} %>
    jobs:
      unit:
        runs-on: ubuntu-latest
        strategy:
          matrix:
            python-version: ["3.10", "3.11"]
        steps:
          - uses: actions/setup-python@v5
            with:
              python-version: ${{ matrix.python-version }}
          - run: pip install -e . && pytest tests/unit
    <% for name, config in jobs.items() %>
      << name >>:
        strategy:
          matrix:
            info: << config.tests | tojson >>
        env:
          ENABLE_EVAL: ${{ matrix.info.enable_eval || '1' }}
        steps:
          - run: python tests/${{ matrix.info.test_file }} --seed ${{ matrix.seed }}
    <% endfor %>
      lint:
        runs-on: ubuntu-latest
        steps:
          - run: ruff check --target ${{ matrix.target }}
    """


def test_a_matrix_of_a_job_without_info_is_no_problem_of_the_test_list(tree):
    """A unit-test job over python-version runs no e2e test: its axis and ${{ matrix.python-version }} (and a
    job after the loop) are not the catalog's; the e2e job's own ${{ matrix.seed }} still is."""
    cat = load(tree, UNIT_JOB_BESIDE)
    assert [t.id for t in cat.tests] == ["tests/test_megatron.py"]
    assert [(p.line, p.field) for p in cat.problems] == [(22, "matrix.seed")]
