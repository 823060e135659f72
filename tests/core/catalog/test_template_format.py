"""The template format (framework S): test lists in a Jinja2 workflow template with <% %> delimiters."""

from __future__ import annotations

import re

import pytest

from pipelines.core.catalog import load_catalog
from pipelines.core.specs import RepoSpec

WORKFLOW = ".github/workflows/pr-test.yml.j2"

TEMPLATE = """
<% set gpu_tests = [
    {'test_file': 'test_short.py', 'num_gpus': 4},
    {'test_file': 'test_eval.py', 'enable_eval': '0'},
    {'test_file': 'test_ckpt.py', 'test_args': '--save gpu --load cpu', 'num_gpus': 8},
    {'test_file': 'test_ckpt.py', 'test_args': '--async-save', 'num_gpus': 8},
    {'test_file': 'test_moe.py', 'num_gpus': 8},
    {'test_file': 'test_moe.py', 'num_gpus': 8, 'use_deepep': '1'},
] %>
<% set jobs = {
    'e2e-test-gpu': {'label': 'run-ci-gpu', 'tests': gpu_tests},
    'e2e-test-image': {'label': 'run-ci-image', 'image': 'fw/test:latest', 'tests': gpu_tests},
    'cpu-unittest': {'label': 'run-ci-cpu', 'cpu': True, 'tests': [{'test_file': 'utils/test_unit.py', 'num_gpus': 0}]},
} %>
name: PR Test
jobs:
<% for job_name, config in jobs.items() %>
  << job_name >>:
    if: contains(github.event.pull_request.labels.*.name, '<< config.label >>')
    env:
      FW_TEST_USE_DEEPEP: ${{ matrix.info.use_deepep || '0' }}
      FW_TEST_ENABLE_EVAL: ${{ matrix.info.enable_eval || '1' }}
    steps:
      - run: python "${{ matrix.info.test_file }}" ${{ matrix.info.test_args }}
<% endfor %>
"""

PREPARE = """
NUM_GPUS = 2
def prepare():
    exec_command("hf download org/M --local-dir /root/models/M")
"""

FILES = {
    WORKFLOW: TEMPLATE,
    "tests/test_short.py": "",
    "tests/test_eval.py": PREPARE,
    "tests/test_ckpt.py": "",
    "tests/test_moe.py": "",
    "tests/utils/test_unit.py": "",
}


def load(tree, files=None, estimates=None, **spec):
    repo = tree(files if files is not None else FILES)
    return load_catalog(repo, RepoSpec(name="fw", path=repo, format="template", **spec), estimates=estimates)


def test_every_entry_becomes_a_test_with_the_job_as_suite_and_its_label(tree):
    cat = load(tree)
    assert cat.problems == ()
    by_id = cat.by_id()
    short = by_id["tests/test_short.py"]
    assert (short.suite, short.labels, short.gpus, short.backend, short.fmt) == (
        "e2e-test-gpu", ("gpu", "image"), 4, "cuda", "template")
    unit = by_id["tests/utils/test_unit.py"]
    assert (unit.backend, unit.gpus, unit.suite, unit.labels) == ("cpu", 0, "cpu-unittest", ("cpu",))


def test_the_same_file_with_different_args_or_env_gets_ids_showing_the_variant(tree):
    ids = sorted(t.id for t in load(tree).tests)
    assert ids == [
        "tests/test_ckpt.py::--async-save",
        "tests/test_ckpt.py::--save+gpu+--load+cpu",
        "tests/test_eval.py",
        "tests/test_moe.py::default",
        "tests/test_moe.py::use_deepep=1",
        "tests/test_short.py",
        "tests/utils/test_unit.py",
    ]


def test_an_entry_without_num_gpus_beside_one_with_it_has_no_none_in_its_id(tree):
    """The variant is what the entry sets: one that sets no num_gpus gets no `gpus=None` (a Python literal
    nobody wrote), only the entry that sets it gets `gpus=N`."""
    files = {"tests/test_d.py": "NUM_GPUS = 2\n", "tests/test_a.py": "", ".github/workflows/n.yml.j2": """
        <% set jobs = {'j': {'tests': [{'test_file': 'test_d.py'}, {'test_file': 'test_d.py', 'num_gpus': 1},
                                       {'test_file': 'test_a.py', 'enable_eval': '0'},
                                       {'test_file': 'test_a.py', 'num_gpus': 2}]}} %>
        """}
    assert sorted((t.id, t.gpus) for t in load(tree, files).tests) == [
        ("tests/test_a.py::enable_eval=0", 8), ("tests/test_a.py::gpus=2", 2),
        ("tests/test_d.py::default", 2), ("tests/test_d.py::gpus=1", 1)]


def test_args_and_env_are_carried_as_the_framework_passes_them(tree):
    by_id = load(tree).by_id()
    ckpt = by_id["tests/test_ckpt.py::--save+gpu+--load+cpu"]
    assert ckpt.args == ("--save", "gpu", "--load", "cpu")
    assert by_id["tests/test_eval.py"].env == (("FW_TEST_ENABLE_EVAL", "0"), ("FW_TEST_USE_DEEPEP", "0"))
    assert by_id["tests/test_moe.py::use_deepep=1"].env == (("FW_TEST_ENABLE_EVAL", "1"), ("FW_TEST_USE_DEEPEP", "1"))


def test_keys_the_template_does_not_map_become_upper_cased_env(tree):
    files = dict(FILES)
    files[WORKFLOW] = "<% set jobs = {'j': {'label': 'run-ci-j', 'tests': [{'test_file': 'test_short.py', 'use_fp8': '1'}]}} %>\n"
    (t,) = load(tree, files).tests
    assert t.env == (("USE_FP8", "1"),)


def test_env_values_are_what_github_sets_booleans_and_numbers_as_json_and_the_default_for_falsy_ones(tree):
    """``${{ matrix.info.x || 'd' }}`` renders true as 'true', and gives 'd' for false, 0, '' and null; the
    string '0' is truthy there. A key no line names is rendered the same way, with no default."""
    files = dict(FILES)
    values = {"t": "True", "f": "False", "zero": "0", "two": "2", "half": "0.5", "whole": "2.0", "empty": "''",
              "null": "none", "text0": "'0'", "text": "'on'"}
    files[WORKFLOW] = ("<% set jobs = {'j': {'label': 'run-ci-j', 'tests': [\n"
                       + ",\n".join(f"  {{'test_file': 'test_short.py', 'use_deepep': {v}, 'extra_{k}': {v}}}"
                                     for k, v in values.items())
                       + "]}} %>\nenv:\n  FW_TEST_USE_DEEPEP: ${{ matrix.info.use_deepep || '7' }}\n")
    got = {}
    for t in load(tree, files).tests:
        env = dict(t.env)
        (extra,) = [k for k in env if k.startswith("EXTRA_")]
        got[extra.removeprefix("EXTRA_").lower()] = (env["FW_TEST_USE_DEEPEP"], env[extra])
    assert got == {"t": ("true", "true"), "f": ("7", "false"), "zero": ("7", "0"), "two": ("2", "2"),
                   "half": ("0.5", "0.5"), "whole": ("2", "2"), "empty": ("7", ""), "null": ("7", ""),
                   "text0": ("0", "0"), "text": ("on", "on")}


def test_num_gpus_comes_from_the_entry_else_the_file_else_the_default(tree):
    files = dict(FILES)
    files[WORKFLOW] = ("<% set jobs = {'j': {'label': 'run-ci-j', 'tests': [\n"
                       "  {'test_file': 'test_short.py', 'num_gpus': 4}, {'test_file': 'test_eval.py'},\n"
                       "  {'test_file': 'test_moe.py'}]}} %>\n")
    gpus = {t.path: t.gpus for t in load(tree, files, default_num_gpus=6).tests}
    assert gpus == {"tests/test_short.py": 4, "tests/test_eval.py": 2, "tests/test_moe.py": 6}
    assert {t.path: t.gpus for t in load(tree, files).tests}["tests/test_moe.py"] == 8


NUM_GPUS_JOB = ("<% set jobs = {'j': {'label': 'run-ci-j', 'tests': [\n"
                "  {'test_file': 'test_short.py'}, {'test_file': 'test_eval.py'}, {'test_file': 'test_moe.py', 'num_gpus': 2},\n"
                "  {'test_file': 'test_ckpt.py'}]}} %>\n")


@pytest.mark.parametrize("value", ["int(os.environ.get('GPUS', '4'))", "'4'", "True"])
def test_a_num_gpus_the_catalog_cannot_read_is_a_located_problem_not_a_silent_default(tree, value):
    files = {**FILES, WORKFLOW: NUM_GPUS_JOB, "tests/test_short.py": f"import os\nNUM_GPUS = {value}\n",
             "tests/test_moe.py": f"NUM_GPUS = {value}\n",  # its entry gives num_gpus: the file's value is not needed
             "tests/test_ckpt.py": "PER_NODE = 4\nNUM_GPUS: int = -PER_NODE\n"}
    cat = load(tree, files)
    assert [str(p) for p in cat.problems] == [
        "tests/test_ckpt.py:2: NUM_GPUS: -4 must be 0 or more; write the number of GPUs the test needs",
        f"tests/test_short.py:2: NUM_GPUS: `{value}` must be an integer literal (the catalog reads the file without "
        "running it); write NUM_GPUS = <N> or give the template entry 'num_gpus' (entries without one use "
        "default_num_gpus)"]
    assert {t.path: t.gpus for t in cat.tests} == {
        "tests/test_short.py": 8, "tests/test_eval.py": 2, "tests/test_moe.py": 2, "tests/test_ckpt.py": 8}


def test_num_gpus_from_a_module_constant_or_given_twice_is_read_without_a_problem(tree):
    files = {**FILES, WORKFLOW: NUM_GPUS_JOB, "tests/test_short.py": "PER_NODE = 4\nNUM_GPUS = PER_NODE\n",
             "tests/test_ckpt.py": "NUM_GPUS = TOTAL = 6\n"}
    cat = load(tree, files)
    assert cat.problems == ()
    assert {t.path: t.gpus for t in cat.tests}["tests/test_short.py"] == 4
    assert {t.path: t.gpus for t in cat.tests}["tests/test_ckpt.py"] == 6


def test_num_gpus_unpacked_from_a_tuple_of_literals_is_read(tree):
    files = {**FILES, WORKFLOW: NUM_GPUS_JOB, "tests/test_short.py": "NUM_GPUS, NUM_NODES = 2, 1\n",
             "tests/test_eval.py": "(NODES, [NUM_GPUS, _]) = 1, (4, 0)\n",
             "tests/test_ckpt.py": "NUM_GPUS: int\nif True:\n    pass\nNUM_GPUS = 3\n"}
    cat = load(tree, files)
    assert cat.problems == ()
    assert {t.path: t.gpus for t in cat.tests} == {
        "tests/test_short.py": 2, "tests/test_eval.py": 4, "tests/test_moe.py": 2, "tests/test_ckpt.py": 3}


def test_a_num_gpus_set_where_its_value_depends_on_how_the_file_runs_is_a_located_problem(tree):
    files = {**FILES, WORKFLOW: NUM_GPUS_JOB,
             "tests/test_short.py": "import os\nif os.environ.get('BIG'):\n    NUM_GPUS = 8\nelse:\n    NUM_GPUS = 2\n",
             "tests/test_eval.py": "NUM_GPUS = 4\ntry:\n    from fw.sizes import NUM_GPUS\nexcept ImportError:\n    pass\n",
             "tests/test_moe.py": "if True:\n    NUM_GPUS = 2\n",  # its entry gives num_gpus: not needed
             "tests/test_ckpt.py": "NUM_GPUS, NUM_NODES = sizes()\n"}
    cat = load(tree, files)
    tail = ("; write NUM_GPUS = <N> at module level or give the template entry 'num_gpus' (entries without one use "
            "default_num_gpus)")
    assert [str(p) for p in cat.problems] == [
        "tests/test_ckpt.py:1: NUM_GPUS: `NUM_GPUS, NUM_NODES = sizes()` cannot be unpacked without running the file" + tail,
        "tests/test_eval.py:3: NUM_GPUS: is set in a `try` block (line 2), not by a plain module-level assignment, so "
        "its value depends on how the file runs and the catalog reads the file without running it" + tail,
        "tests/test_short.py:3: NUM_GPUS: is set in an `if` block (line 2), not by a plain module-level assignment, so "
        "its value depends on how the file runs and the catalog reads the file without running it" + tail]
    assert {t.path: t.gpus for t in cat.tests}["tests/test_moe.py"] == 2


def test_a_plain_num_gpus_then_set_again_under_an_if_keeps_the_plain_value_with_a_note(tree):
    """`NUM_GPUS = 2` then `if os.environ.get('X'): NUM_GPUS = 1`: CI's default environment runs it on 2, so
    the test plans on 2 and the assumptions say so (no problem, the night does not fail on it). An `if` whose
    every branch sets it again, or a NUM_GPUS set only under an `if`, stays a located problem."""
    files = {**FILES, WORKFLOW: NUM_GPUS_JOB,
             "tests/test_short.py": "import os\nNUM_GPUS = 2\nif os.environ.get('X'):\n    NUM_GPUS = 1\n",
             "tests/test_eval.py": "import os\nNUM_GPUS = 2\nif os.environ.get('X'):\n    NUM_GPUS = 1\n"
                                   "elif os.environ.get('Y'):\n    NUM_GPUS = 4\nelse:\n    NUM_GPUS = 8\n",
             "tests/test_ckpt.py": "import os\nif os.environ.get('X'):\n    NUM_GPUS = 1\n"}
    cat = load(tree, files)
    assert [(p.path, p.line, p.field) for p in cat.problems] == [
        ("tests/test_ckpt.py", 3, "NUM_GPUS"), ("tests/test_eval.py", 4, "NUM_GPUS")]
    assert {t.path: t.gpus for t in cat.tests}["tests/test_short.py"] == 2
    assert ("tests/test_short.py:4: NUM_GPUS: set again under an `if` (line 3), which the catalog does not evaluate; "
            "the test plans on 2 from line 2, the value when the condition does not hold (give the template entry "
            "'num_gpus' to plan otherwise)") in cat.assumptions


def test_a_num_gpus_set_under_the_main_guard_is_the_value_the_script_runs_with(tree):
    """CI and the wrapper run a test file as a script, so `if __name__ == "__main__":` always holds: its
    NUM_GPUS is the one the test runs on (8 here), not the plain value before it, and it is no `if` to note."""
    main = 'NUM_GPUS = 2\ndef execute():\n    print(NUM_GPUS)\nif __name__ == "__main__":\n    NUM_GPUS = 8\n    execute()\n'
    files = {**FILES, WORKFLOW: NUM_GPUS_JOB, "tests/test_short.py": main,
             "tests/test_eval.py": 'if "__main__" == __name__:\n    NUM_GPUS = 4\nelse:\n    NUM_GPUS = 1\n'}
    cat = load(tree, files)
    assert not cat.problems, [str(p) for p in cat.problems]
    gpus = {t.path: t.gpus for t in cat.tests}
    assert (gpus["tests/test_short.py"], gpus["tests/test_eval.py"]) == (8, 4)
    assert not [a for a in cat.assumptions if "NUM_GPUS" in a]


def test_est_time_comes_from_history_else_a_default_marked_uncalibrated(tree):
    cat = load(tree, estimates={"tests/test_short.py": 420}, default_est_time=900)
    by_id = cat.by_id()
    assert (by_id["tests/test_short.py"].est_time, by_id["tests/test_short.py"].est_source) == (420, "history")
    moe = by_id["tests/test_moe.py::default"]
    assert (moe.est_time, moe.est_source, moe.uncalibrated) == (900, "default", True)


def test_the_first_night_timeout_of_tests_without_history_is_stated_as_ours_not_the_framework_s(tree):
    cat = load(tree, estimates={"tests/test_short.py": 420}, default_est_time=2000, timeout_floor_s=1800)
    guessed = sum(t.uncalibrated for t in cat.tests)
    assert guessed == len(cat.tests) - 1
    assert f"{guessed} template test(s) have no history: they plan with est_time 2000 s (default_est_time) and time " \
           "out after 2500 s, max(timeout floor 1800 s, 1.25 x est_time; a test killed there gets about 1.56 x that " \
           "limit next night); the framework's own CI sets no per-test timeout, so raise default_est_time in " \
           "assets/repos.yaml above its longest test; after a night (or `nightly calibrate --write` on measured " \
           "history) they plan from the calibrated estimates" in cat.assumptions
    all_known = {t.id: 600 for t in cat.tests}
    assert not any("no history" in a for a in load(tree, estimates=all_known).assumptions)


def test_requirements_are_inferred_from_the_listed_files(tree):
    cat = load(tree)
    assert cat.by_id()["tests/test_eval.py"].requirements == ("M",)
    assert cat.requirement("M").path == "/root/models/M"


def test_a_variant_that_would_be_an_unsafe_key_uses_a_short_hash(tree):
    files = dict(FILES)
    files[WORKFLOW] = ("<% set jobs = {'j': {'label': 'run-ci-j', 'tests': [\n"
                       "  {'test_file': 'test_ckpt.py', 'test_args': '--name \"a,b\"'},\n"
                       "  {'test_file': 'test_ckpt.py'}]}} %>\n")
    ids = sorted(t.id for t in load(tree, files).tests)
    assert ids[0] == "tests/test_ckpt.py::default"
    assert re.fullmatch(r"tests/test_ckpt\.py::v-[0-9a-f]{10}", ids[1])


def test_a_non_literal_value_is_a_problem_on_its_line_naming_the_list_item(tree):
    files = dict(FILES)
    files[WORKFLOW] = ("<% set extra = [\n  {'test_file': lookup('x')},\n  {'test_file': 'test_short.py'}\n] %>\n"
                       "<% set other = lookup('y') %>\n<% set jobs = {'j': {'label': 'run-ci-j', 'tests': extra}} %>\n")
    cat = load(tree, files)
    assert [str(p) for p in cat.problems] == [
        f"{WORKFLOW}:2: extra[0].test_file: Call is not a literal; write the value itself (a string, number, list or "
        "dict): the catalog reads the template without rendering it; this entry is skipped"]
    assert [t.id for t in cat.tests] == ["tests/test_short.py"]
    # no job uses `other`: its value cannot change what runs, so it is named, not a problem of the night
    assert (f"{WORKFLOW}:5: set other: not used by `jobs`, and the catalog cannot read it (Call is not a literal); "
            "ignored") in cat.assumptions


MATRIX = """<% set gpu_tests = [
  {'test_file': 'test_short.py', 'num_gpus': 4},
  {'test_file': 'test_eval.py', 'num_gpus': -1},
  {'test_file': lookup('x')},
  {'test_file': 'test_moe.py', 'num_gpus': 2, 'scale': -0.5},
  {'test_file': 'test_ckpt.py', 'num_gpus': +8},
  undefined_entry,
] %>
<% set jobs = {'gpu': {'label': 'run-ci-gpu', 'tests': gpu_tests}, 'image': {'label': 'run-ci-image', 'tests': gpu_tests}} %>
"""


def test_one_bad_item_of_a_matrix_list_is_reported_alone_and_the_good_items_load(tree):
    cat = load(tree, {**FILES, WORKFLOW: MATRIX})
    by_id = cat.by_id()
    assert sorted(by_id) == ["tests/test_ckpt.py", "tests/test_moe.py", "tests/test_short.py"]
    assert by_id["tests/test_moe.py"].env == (("SCALE", "-0.5"),)  # a negative number is a literal value
    assert by_id["tests/test_ckpt.py"].gpus == 8
    skipped = "this entry is skipped"
    assert [str(p) for p in cat.problems] == [  # once each, though two jobs list them
        f"{WORKFLOW}:3: num_gpus: must be a whole number >= 0, got -1; write the test's GPU count (0 for a CPU test)",
        f"{WORKFLOW}:4: gpu_tests[2].test_file: Call is not a literal; write the value itself (a string, number, list "
        f"or dict): the catalog reads the template without rendering it; {skipped}",
        f"{WORKFLOW}:7: gpu_tests[5]: `undefined_entry` is not set earlier in the template; set it with "
        "`<% set undefined_entry = [...] %>` above this line, or write the value itself (a string, number, list or "
        f"dict): the catalog reads the template without rendering it; {skipped}",
    ]


def test_a_list_that_cannot_be_read_is_named_where_it_is_used_not_called_unset(tree):
    files = {**FILES, WORKFLOW: "<% set gpu_tests = lookup('x') %>\n<% set jobs = {'j': {'tests': gpu_tests}} %>\n"}
    assert [str(p) for p in load(tree, files).problems][1:] == [
        f"{WORKFLOW}:2: jobs.j.tests: `gpu_tests` could not be read (line 1); fix the problem reported there; "
        "this entry is skipped"]


def test_a_job_that_cannot_be_read_is_skipped_alone_and_the_other_jobs_load(tree):
    files = {**FILES, WORKFLOW: ("<% set jobs = {\n"
                                 "  'bad': {'label': label_of('x'), 'tests': [{'test_file': 'test_eval.py'}]},\n"
                                 "  'good': {'label': 'run-ci-good', 'tests': [{'test_file': 'test_short.py'}]},\n"
                                 "} %>\n")}
    cat = load(tree, files)
    assert [(t.id, t.suite) for t in cat.tests] == [("tests/test_short.py", "good")]
    assert [str(p) for p in cat.problems] == [
        f"{WORKFLOW}:2: jobs.bad.label: Call is not a literal; write the value itself (a string, number, list or dict): "
        "the catalog reads the template without rendering it; this entry is skipped"]


def test_test_args_with_an_unbalanced_quote_are_a_located_problem_not_split_by_guess(tree):
    files = {**FILES, WORKFLOW: ("<% set jobs = {'j': {'label': 'run-ci-j', 'tests': [\n"
                                 "  {'test_file': 'test_short.py', 'test_args': '--name \"a b'},\n"
                                 "  {'test_file': 'test_eval.py', 'test_args': '--name \"a b\"'}]}} %>\n")}
    cat = load(tree, files)
    assert [(t.id, t.args) for t in cat.tests] == [("tests/test_eval.py", ("--name", "a b"))]
    assert [str(p) for p in cat.problems] == [
        f"{WORKFLOW}:2: test_args: '--name \"a b' cannot be split into arguments (No closing quotation); "
        "close the quote or escape it with a backslash"]


def test_a_jinja_syntax_error_is_a_problem_not_a_crash(tree):
    files = dict(FILES)
    files[WORKFLOW] = "line one\n<% set jobs = {'j': %>\n"
    cat = load(tree, files)
    assert cat.tests == ()
    (problem,) = cat.problems
    assert str(problem).startswith(f"{WORKFLOW}:2: template: ") and str(problem).endswith("; fix the Jinja2 syntax")


def test_bad_entries_are_located_problems_and_the_rest_loads(tree):
    files = dict(FILES)
    files[WORKFLOW] = ("<% set jobs = {'j': {'label': 'run-ci-j', 'tests': [\n"
                       "  {'test_file': 'test_short.py'},\n"
                       "  {'test_file': 'test_gone.py'},\n"
                       "  {'test_file': 'test_eval.py', 'num_gpus': 'eight'},\n"
                       "  {'test_file': '../outside/test_x.py'},\n"
                       "  {'num_gpus': 8},\n"
                       "]}} %>\n")
    cat = load(tree, files)
    assert [t.id for t in cat.tests] == ["tests/test_short.py"]
    assert [str(p) for p in cat.problems] == [
        f"{WORKFLOW}:3: test_file: tests/test_gone.py does not exist: test_file is read relative to tests/; write it "
        "as the file's path under tests/ ('e2e/test_x.py' for tests/e2e/test_x.py), or `cd` into its folder in the "
        "job's run line (`cd tests/e2e && python ${{ matrix.info.test_file }}`)",
        f"{WORKFLOW}:4: num_gpus: must be a whole number >= 0, got 'eight'; write the test's GPU count (0 for a CPU test)",
        f"{WORKFLOW}:5: test_file: tests/../outside/test_x.py: contains '..'; rename the file (test ids must be safe "
        "partition keys)",
        f"{WORKFLOW}:6: test_file: required: the test's path under tests/; add 'test_file': 'test_<name>.py'",
    ]


def test_a_matrix_key_no_environment_variable_can_have_is_a_located_problem_not_a_crash_at_launch(tree):
    # the job passes every unmapped key upper-cased as an environment variable: `a=b` (or a NUL in a
    # value) made Popen raise mid-night and every test of the suite went unrun
    files = {**FILES, WORKFLOW: ("<% set jobs = {'j': {'label': 'run-ci-j', 'tests': [\n"
                                 "  {'test_file': 'test_short.py', 'a=b': 'x'},\n"
                                 "  {'test_file': 'test_eval.py', 'mode': 'a\\x00b'},\n"
                                 "  {'test_file': 'test_moe.py', '2nd': '1'},\n"
                                 "  {'test_file': 'test_ckpt.py', 'use_deepep': '1'}]}} %>\n")}
    cat = load(tree, files)
    assert [t.id for t in cat.tests] == ["tests/test_ckpt.py"]
    assert [str(p) for p in cat.problems] == [
        f"{WORKFLOW}:2: a=b: 'a=b' is not a valid environment variable name; use ASCII letters, digits and '_', "
        "not starting with a digit (e.g. MINIRL_FAIL): the job passes every key as one",
        f"{WORKFLOW}:3: mode: holds a NUL character (\\0), which no process environment can carry; remove it",
        f"{WORKFLOW}:4: 2nd: '2nd' is not a valid environment variable name; use ASCII letters, digits and '_', "
        "not starting with a digit (e.g. MINIRL_FAIL): the job passes every key as one",
    ]


def test_a_template_repo_without_a_template_says_where_to_declare_it(tree):
    cat = load(tree, {"tests/test_a.py": ""})
    assert [str(p) for p in cat.problems] == [
        ".github/workflows:1: template: no workflow template with a `<% set ... %>` test list; "
        "set `template:` for the repo in assets/repos.yaml"]


def test_a_template_entry_pointing_outside_the_repo_is_reported_and_never_read(tree, tmp_path):
    import os

    repo = tree(FILES)
    outside = tmp_path / "outside.py"
    outside.write_text("this is ( not python\n")
    escape = os.path.relpath(outside, repo / "tests")
    assert (repo / "tests" / escape).resolve() == outside.resolve()
    (repo / WORKFLOW).write_text(TEMPLATE.replace("'test_short.py'", repr(escape)))
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="template"))
    assert not any("not python" in p.message or p.field == "syntax" for p in cat.problems), cat.problems
    assert any(".." in f"{p.path} {p.message}" for p in cat.problems), cat.problems
    assert all(".." not in t.path for t in cat.tests)


def test_a_template_using_whitespace_control_is_still_detected_as_the_template_format(tree):
    plain = load_catalog(tree(FILES))
    repo = tree({**FILES, WORKFLOW: TEMPLATE.replace("<% set gpu_tests", "<%- set gpu_tests")})
    cat = load_catalog(repo)  # unconfigured: the format is detected
    assert any("template" in a for a in cat.assumptions)
    assert [t.id for t in cat.tests] == [t.id for t in plain.tests] and len(cat.tests) >= 6


CKPT_JOB = """
<% set fsdp_tests = [{'test_file': 'test_sft.py'}, {'test_file': 'test_ckpt.py'}] %>
<% set jobs = {
    'e2e-test-fsdp': {'label': 'run-ci-fsdp', 'tests': fsdp_tests},
    'e2e-test-ckpt': {'label': 'run-ci-ckpt', 'tests': [{'test_file': 'test_ckpt.py'}]},
} %>
"""


def test_every_job_is_a_suite_even_one_that_only_relists_another_job_s_entry(tree):
    from pipelines.core.select import Selection, SelectionError, select

    repo = tree({WORKFLOW: CKPT_JOB, "tests/test_sft.py": "", "tests/test_ckpt.py": ""})
    tests = load_catalog(repo).tests
    ckpt = next(t for t in tests if t.path == "tests/test_ckpt.py")
    assert (ckpt.suite, ckpt.also_suites, ckpt.labels) == ("e2e-test-fsdp", ("e2e-test-ckpt",), ("fsdp", "ckpt"))
    assert [t.id for t in select(tests, Selection(suites=("e2e-test-ckpt",)))] == ["tests/test_ckpt.py"]
    assert len(select(tests, Selection(suites=("e2e-test-fsdp",)))) == 2
    with pytest.raises(SelectionError, match="unknown suite.s. e2e-test-gone; registered suites: e2e-test-ckpt, e2e-test-fsdp"):
        select(tests, Selection(suites=("e2e-test-gone",)))


def test_a_changed_test_file_that_no_job_lists_selects_nothing_while_library_code_selects_all(tree):
    from pipelines.core.select import Selection, select

    repo = tree({WORKFLOW: CKPT_JOB, "tests/test_sft.py": "", "tests/test_ckpt.py": "", "tests/test_new.py": ""})
    tests = load_catalog(repo).tests
    assert select(tests, Selection(changed=("tests/test_new.py",))) == []
    assert [t.path for t in select(tests, Selection(changed=("tests/test_new.py", "tests/test_sft.py")))] == [
        "tests/test_sft.py"]
    assert len(select(tests, Selection(changed=("fw/trainer.py",)))) == 2


NIGHTLY_WORKFLOW = ".github/workflows/nightly-test.yml.j2"
NIGHTLY_TEMPLATE = """
<% set nightly_tests = [
    {'test_file': 'test_long.py', 'num_gpus': 8},
    {'test_file': 'test_short.py', 'num_gpus': 4},
] %>
<% set jobs = {'e2e-test-nightly': {'label': 'run-ci-long', 'tests': nightly_tests}} %>
env:
  LONG_MODE: ${{ matrix.info.long_mode || '0' }}
"""


def test_every_workflow_template_with_a_test_list_is_read_and_an_entry_both_list_is_one_test_per_env(tree):
    repo = tree({**FILES, NIGHTLY_WORKFLOW: NIGHTLY_TEMPLATE, "tests/test_long.py": "",
                 ".github/workflows/lint.yml.j2": "<% set python = '3.11' %>\nname: lint\n"})
    cat = load_catalog(repo)  # unconfigured: every template found is read
    by_id = cat.by_id()
    assert by_id["tests/test_long.py"].suite == "e2e-test-nightly"
    # both list test_short.py, and each gives it its own env lines: one test per environment, the first
    # template (file-name order) keeping the id
    short = {t.id: (t.suite, t.also_suites, t.env) for t in cat.tests if t.path == "tests/test_short.py"}
    assert short == {
        "tests/test_short.py": ("e2e-test-nightly", (), (("LONG_MODE", "0"),)),
        "tests/test_short.py::pr-test.yml.j2": ("e2e-test-gpu", ("e2e-test-image",), (
            ("FW_TEST_ENABLE_EVAL", "1"), ("FW_TEST_USE_DEEPEP", "0")))}
    assert by_id["tests/test_long.py"].env == (("LONG_MODE", "0"),)  # the nightly template's own env lines
    assert ("FW_TEST_USE_DEEPEP", "1") in by_id["tests/test_moe.py::use_deepep=1"].env
    assert len(cat.tests) == 9  # the 7 of pr-test, test_long, and test_short with the nightly template's env
    assert any(a.startswith(f"templates: {NIGHTLY_WORKFLOW}, {WORKFLOW} (found under .github/workflows") for a in cat.assumptions)
    assert "skipped .github/workflows/lint.yml.j2: no test list in its `<% set %>` statements" in cat.assumptions


def test_a_computed_num_gpus_in_a_file_only_a_cpu_job_runs_is_no_problem(tree):
    files = {WORKFLOW: "<% set jobs = {'unit': {'label': 'run-ci-cpu', 'cpu': True, "
                       "'tests': [{'test_file': 'test_unit.py'}]}} %>\n",
             "tests/test_unit.py": "import os\nNUM_GPUS = int(os.environ.get('N', '8'))\n"}
    cat = load(tree, files)
    assert cat.problems == ()
    assert [(t.id, t.backend, t.gpus) for t in cat.tests] == [("tests/test_unit.py", "cpu", 0)]


def test_a_mapped_key_the_entry_lacks_without_a_default_is_set_empty_as_github_sets_it(tree):
    """`ENABLE_EVAL: ${{ matrix.info.enable_eval }}` renders an absent key as '' (as an explicit none): the
    variable is set, empty, never left unset."""
    files = dict(FILES)
    files[WORKFLOW] = ("<% set jobs = {'j': {'label': 'run-ci-j', 'tests': [{'test_file': 'test_short.py'}, "
                       "{'test_file': 'test_eval.py', 'enable_eval': none}]}} %>\n"
                       "env:\n  ENABLE_EVAL: ${{ matrix.info.enable_eval }}\n")
    by_id = load(tree, files).by_id()
    assert by_id["tests/test_short.py"].env == (("ENABLE_EVAL", ""),)
    assert by_id["tests/test_eval.py"].env == (("ENABLE_EVAL", ""),)


def _two_workflows(pr_default: str, nightly_default: str) -> dict[str, str]:
    """A PR workflow and a scheduled one listing the same entries, each mapping use_deepep with its own default."""
    def workflow(job: str, on: str, default: str) -> str:
        return ("<% set moe_tests = [{'test_file': 'test_moe.py', 'num_gpus': 8}, "
                "{'test_file': 'test_moe.py', 'num_gpus': 8, 'use_deepep': '1'}] %>\n"
                f"<% set jobs = {{'{job}': {{'label': 'run-ci-{job}', 'tests': moe_tests}}}} %>\n"
                f"on:\n{on}env:\n  USE_DEEPEP: ${{{{ matrix.info.use_deepep || '{default}' }}}}\n")

    return {"tests/test_moe.py": "",
            ".github/workflows/nightly-test.yml.j2": workflow("e2e-nightly", "  schedule:\n    - cron: '0 3 * * *'\n",
                                                              nightly_default),
            ".github/workflows/pr-test.yml.j2": workflow("e2e-pr", "  pull_request:\n", pr_default)}


def test_an_entry_two_templates_give_different_env_is_one_test_per_env_each_on_its_own_cadence(tree):
    """The PR job runs test_moe.py with USE_DEEPEP=false (its `|| 'false'`), the nightly job with 0: two tests,
    never the first template's env on every cadence. The first template (file-name order) keeps the id."""
    from pipelines.core.select import in_cadence

    cat = load_catalog(tree(_two_workflows("false", "0")))
    assert cat.problems == ()
    got = {t.id: (dict(t.env)["USE_DEEPEP"], t.suite, t.also_suites, [c for c in ("pr", "nightly") if in_cadence(t, c)])
           for t in cat.tests}
    assert got == {
        "tests/test_moe.py::default": ("0", "e2e-nightly", (), ["nightly"]),
        "tests/test_moe.py::default+pr-test.yml.j2": ("false", "e2e-pr", (), ["pr", "nightly"]),
        # the same env from both: one test, as before
        "tests/test_moe.py::use_deepep=1": ("1", "e2e-nightly", ("e2e-pr",), ["pr", "nightly"]),
    }
    (note,) = [a for a in cat.assumptions if "different environment" in a]
    assert note == ("1 entry listed by several templates gets a different environment from each, so each environment "
                    "is its own test: tests/test_moe.py::default (.github/workflows/nightly-test.yml.j2: USE_DEEPEP=0) "
                    "and tests/test_moe.py::default+pr-test.yml.j2 (.github/workflows/pr-test.yml.j2: "
                    "USE_DEEPEP=false)")


def test_an_entry_two_templates_give_the_same_env_stays_one_test_with_its_id(tree):
    cat = load_catalog(tree(_two_workflows("0", "0")))
    assert sorted(t.id for t in cat.tests) == ["tests/test_moe.py::default", "tests/test_moe.py::use_deepep=1"]
    assert not any("different environment" in a for a in cat.assumptions)



def test_two_entries_giving_the_same_arguments_are_one_problem_at_the_second_entry_in_the_template(tree):
    files = {"tests/test_f.py": "NUM_GPUS = 1\n", WORKFLOW: (
        "<% set t = [\n"
        "    {'test_file': 'test_f.py', 'test_args': '--a --b'},\n"
        "    {'test_file': 'test_f.py', 'test_args': '--a  --b'},\n"
        "] %>\n"
        "<% set jobs = { 'gpu': {'label': 'run-ci-gpu', 'tests': t} } %>\n")}
    cat = load(tree, files)
    assert [t.id for t in cat.tests] == ["tests/test_f.py::--a+--b"]
    assert [str(p) for p in cat.problems] == [
        f"{WORKFLOW}:3: id: duplicate test id 'tests/test_f.py::--a+--b': this entry and the one at line 2 give the "
        "same test file and arguments (`--a --b` and `--a  --b` split alike); remove one"]


def test_two_different_entries_whose_readable_variants_coincide_keep_two_ids(tree):
    """A matrix key (an env var) and an argument both spelled `use_fp8_rollout=1`, and a value holding `+`:
    different jobs, so two tests; the matrix-key form (no arguments), then the one with fewer keys, keeps its
    readable id, the other gets a hashed one."""
    files = {"tests/test_f.py": "NUM_GPUS = 2\n", WORKFLOW: (
        "<% set t = [\n"
        "    {'test_file': 'test_f.py', 'use_fp8_rollout': '1'},\n"
        "    {'test_file': 'test_f.py', 'test_args': 'use_fp8_rollout=1'},\n"
        "    {'test_file': 'test_f.py', 'a': '1+b=2'},\n"
        "    {'test_file': 'test_f.py', 'a': '1', 'b': '2'},\n"
        "] %>\n"
        "<% set jobs = { 'gpu': {'label': 'run-ci-gpu', 'tests': t} } %>\n")}
    cat = load(tree, files)
    assert not cat.problems, [str(p) for p in cat.problems]
    by_id = {t.id: t for t in cat.tests}
    assert len(by_id) == 4
    assert dict(by_id["tests/test_f.py::use_fp8_rollout=1"].env).get("USE_FP8_ROLLOUT") == "1"  # the matrix key
    assert dict(by_id["tests/test_f.py::a=1+b=2"].env).get("A") == "1+b=2"
    hashed = [t for i, t in by_id.items() if i.startswith("tests/test_f.py::v-")]
    assert sorted(dict(t.env).get("B", "") for t in hashed) == ["", "2"]


@pytest.mark.parametrize("argument_first", [False, True])
def test_which_of_two_entries_reading_alike_keeps_the_readable_id_does_not_depend_on_their_order(tree, argument_first):
    """An entry added above an existing one must not take its id (and with it the calibrated estimate,
    flaky state and quarantine): the matrix-key form keeps `use_fp8_rollout=1` in either order, and the
    assumptions name both entries' lines and ids."""
    key = "    {'test_file': 'test_f.py', 'use_fp8_rollout': '1'},\n"
    arg = "    {'test_file': 'test_f.py', 'test_args': 'use_fp8_rollout=1'},\n"
    files = {"tests/test_f.py": "NUM_GPUS = 2\n", WORKFLOW: (
        "<% set t = [\n" + (arg + key if argument_first else key + arg) + "] %>\n"
        "<% set jobs = { 'gpu': {'label': 'run-ci-gpu', 'tests': t} } %>\n")}
    cat = load(tree, files)
    assert not cat.problems, [str(p) for p in cat.problems]
    by_id = {t.id: t for t in cat.tests}
    assert dict(by_id["tests/test_f.py::use_fp8_rollout=1"].env).get("USE_FP8_ROLLOUT") == "1"
    hashed = "tests/test_f.py::v-" + next(i for i in by_id if "::v-" in i).split("::v-")[1]
    assert by_id[hashed].args == ("use_fp8_rollout=1",)
    key_line, arg_line = (3, 2) if argument_first else (2, 3)
    assert (f"{WORKFLOW}:{arg_line} and {WORKFLOW}:{key_line}: two entries of tests/test_f.py read alike "
            f"(use_fp8_rollout=1) but run differently; tests/test_f.py::use_fp8_rollout=1 (line {key_line}) keeps "
            f"the readable id, {hashed} (line {arg_line}) gets a hashed one (chosen by what each runs, not by its "
            "place in the template)") in cat.assumptions


@pytest.mark.parametrize(("run", "folder", "read"), [
    ("python tests/${{ matrix.info.test_file }} ${{ matrix.info.test_args }}", "tests", True),
    ("cd tests/e2e && python ${{ matrix.info.test_file }}", "tests/e2e", True),
    ("cd tests; python3 -u e2e/${{ matrix.info.test_file }}", "tests/e2e", True),
    ("cd ${{ github.workspace }}/tests/e2e || exit 1; python '${{ matrix.info.test_file }}'", "tests/e2e", True),
    ("cd tests && cd e2e && python ./${{ matrix.info.test_file }} 2>&1 | tee log", "tests/e2e", True),
    ('python "${{ matrix.info.test_file }}"', "tests", False),  # names no folder: framework S's tests/
    ("cd $TEST_DIR && python ${{ matrix.info.test_file }}", "tests", False),
    ("cd /work/fw/tests && python ${{ matrix.info.test_file }}", "tests", False),
    ("cd .. && python ${{ matrix.info.test_file }}", "tests", False),
    ("cd << config.dir >> && python ${{ matrix.info.test_file }}", "tests", False),
    ("pushd tests/e2e && python ${{ matrix.info.test_file }}", "tests", False),
    ("python tests/${{ matrix.info.test_file }}\n    working-directory: sub", "tests", False),
    ("if [ -d e2e ]; then cd e2e; fi; python ${{ matrix.info.test_file }}", "tests", False),
    ("python --file=tests/${{ matrix.info.test_file }}", "tests", False),
    ("|\n      cd tests/e2e\n      python ${{ matrix.info.test_file }}", "tests/e2e", True),
])
def test_the_folder_a_job_runs_test_file_from_is_read_from_its_run_line_only_when_it_is_certain(run, folder, read):
    from pipelines.core.catalog.template import run_folder

    got, said, was_read = run_folder(f"jobs:\n  x:\n    run: {run}\n")
    assert (got, was_read) == (folder, read), said
    assert " at line " in said


def test_a_matrix_value_outside_a_run_line_says_nothing_of_the_folder():
    from pipelines.core.catalog.template import run_folder

    source = ("steps:\n  - run: pip install -e .\n  - env:\n      TEST_FILE: ${{ matrix.info.test_file }}\n"
              "    run: cd tests/e2e && python $TEST_FILE\n")
    assert run_folder(source) == ("tests", "", False)


@pytest.mark.parametrize("change", [
    ("{'test_file': 'test_short.py', 'num_gpus': 4}", "{'test_file': 'test_short.py', 'num_gpus': 8}"),
    ("{'test_file': 'test_eval.py', 'enable_eval': '0'}", "{'test_file': 'test_eval.py', 'enable_eval': '1'}"),
    ("{'test_file': 'test_short.py', 'num_gpus': 4}", "{'test_file': 'test_short.py', 'num_gpus': 4, 'test_args': '--fast'}"),
], ids=["num_gpus", "env", "args"])
def test_a_changed_template_entry_keeps_its_id_and_gets_a_new_digest_and_the_others_keep_theirs(tree, change):
    """Samples are keyed by a test's sha256: an entry run on other GPUs, env or args must not keep the
    digest its earlier runs were stored under, though its file and its id did not change."""
    before = {t.id: t.sha256 for t in load(tree).tests}
    after = {t.id: t.sha256 for t in load(tree, {**FILES, WORKFLOW: TEMPLATE.replace(*change)}).tests}
    assert set(after) == set(before)
    file = re.search(r"'test_file': '([^']+)'", change[0]).group(1)
    assert {i for i in before if before[i] != after[i]} == {f"tests/{file}"}


def test_a_template_test_s_digest_ignores_its_labels_and_differs_from_its_file_s(tree):
    """Labels say when a test runs, not what it runs; and the digest is not the file's bytes alone."""
    import hashlib

    before = {t.id: t.sha256 for t in load(tree).tests}
    relabelled = {**FILES, WORKFLOW: TEMPLATE.replace("'label': 'run-ci-gpu'", "'label': 'run-ci-all'")}
    assert {t.id: t.sha256 for t in load(tree, relabelled).tests} == before
    repo = tree(FILES)
    assert before["tests/test_short.py"] != hashlib.sha256((repo / "tests/test_short.py").read_bytes()).hexdigest()
