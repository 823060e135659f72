"""The registry format read exactly as framework M's and SGLang's runners read it."""

from __future__ import annotations

import argparse
import hashlib

import pytest

from pipelines.cli import catalog as catalog_cli
from pipelines.core.catalog import load_catalog
from pipelines.core.specs import RepoSpec

HEADER = "from fw.ci import register_cuda_ci, register_rocm_ci, register_cpu_ci\n"


def catalog_of(tree, files: dict[str, str], **spec):
    repo = tree(files)
    return load_catalog(repo, RepoSpec(name="fw", path=repo, format="registry", **spec))


def only_problem(cat) -> str:
    assert len(cat.problems) == 1, [str(p) for p in cat.problems]
    return str(cat.problems[0])


def test_a_positional_registration_becomes_one_test_named_by_its_path(tree):
    cat = catalog_of(tree, {"tests/e2e/test_grpo.py": HEADER + 'register_cuda_ci(600, "stage-c-4-gpu-h200", labels=["megatron"])\n'})
    assert cat.problems == ()
    (t,) = cat.tests
    data = (tree({}) / "tests/e2e/test_grpo.py").read_bytes()
    assert (t.id, t.path, t.backend, t.suite, t.gpus, t.hardware) == (
        "tests/e2e/test_grpo.py", "tests/e2e/test_grpo.py", "cuda", "stage-c-4-gpu-h200", 4, "h200")
    assert (t.est_time, t.labels, t.nightly, t.disabled, t.line) == (600, ("megatron",), False, None, 2)
    assert t.sha256 == hashlib.sha256(data).hexdigest()
    assert (t.est_source, t.fmt) == ("registered", "registry")


def test_keywords_nightly_and_disabled_are_read(tree):
    cat = catalog_of(tree, {"tests/test_a.py": HEADER + (
        'register_cuda_ci(est_time=12.2, suite="stage-b-2-gpu-h100", labels=["fsdp", "long"], nightly=True,\n'
        '                 disabled="flaky on H100, see issue 12")\n')})
    (t,) = cat.tests
    assert (t.est_time, t.gpus, t.hardware, t.nightly, t.disabled) == (13, 2, "h100", True, "flaky on H100, see issue 12")
    assert t.labels == ("fsdp", "long")


def test_rocm_and_cpu_calls_set_the_backend_and_cpu_tests_need_no_gpus_or_labels(tree):
    cat = catalog_of(tree, {"tests/test_multi.py": HEADER + (
        'register_cuda_ci(100, "stage-c-8-gpu-h200", labels=["megatron"])\n'
        'register_rocm_ci(120, "stage-c-8-gpu-mi300", labels=["megatron"])\n'
        'register_cpu_ci(5, "stage-a-cpu")\n')})
    assert cat.problems == ()
    got = {(t.id, t.backend, t.gpus, t.hardware, t.line) for t in cat.tests}
    assert got == {
        ("tests/test_multi.py::cuda-stage-c-8-gpu-h200", "cuda", 8, "h200", 2),
        ("tests/test_multi.py::rocm-stage-c-8-gpu-mi300", "rocm", 8, "mi300", 3),
        ("tests/test_multi.py::cpu-stage-a-cpu", "cpu", 0, "cpu", 4),
    }


def test_hardware_list_gives_gpus_and_hardware_when_the_suite_does_not(tree):
    cat = catalog_of(tree, {"tests/test_h.py": HEADER + 'register_cuda_ci(60, "nightly-big", labels=["x"], hardware=["8-gpu-h100"])\n'})
    (t,) = cat.tests
    assert (t.gpus, t.hardware) == (8, "h100")


def test_hardware_list_fills_the_hardware_a_suite_leaves_out(tree):
    cat = catalog_of(tree, {"tests/test_h.py": HEADER + 'register_cuda_ci(60, "stage-a-2-gpu", labels=["x"], hardware=["h200"])\n'})
    (t,) = cat.tests
    assert (t.gpus, t.hardware) == (2, "h200")


def test_every_hardware_a_call_lists_is_a_test_of_its_own(tree):
    cat = catalog_of(tree, {"tests/test_h.py": HEADER + (
        'register_cuda_ci(60, "nightly-big", labels=["x"], hardware=["8-gpu-h100", "4-gpu-h200"])\n')})
    assert cat.problems == ()
    assert sorted((t.id, t.gpus, t.hardware, t.line) for t in cat.tests) == [
        ("tests/test_h.py::cuda-nightly-big@h100", 8, "h100", 2),
        ("tests/test_h.py::cuda-nightly-big@h200", 4, "h200", 2)]


def test_a_listed_hardware_that_conflicts_with_the_suite_is_reported_and_the_agreeing_ones_count(tree):
    cat = catalog_of(tree, {"tests/test_h.py": HEADER + (
        'register_cuda_ci(60, "stage-c-4-gpu", labels=["x"], hardware=["h200", "8-gpu-h100", "4-gpu-b200"])\n'
        'register_cuda_ci(60, "stage-d-2-gpu-h200", labels=["x"], hardware=["h200", "b200", "h200"])\n')})
    assert sorted((t.id, t.gpus, t.hardware) for t in cat.tests) == [
        ("tests/test_h.py::cuda-stage-c-4-gpu@b200", 4, "b200"),
        ("tests/test_h.py::cuda-stage-c-4-gpu@h200", 4, "h200"),
        ("tests/test_h.py::cuda-stage-d-2-gpu-h200", 2, "h200")]
    assert [str(p) for p in cat.problems] == [
        "tests/test_h.py:2: hardware: '8-gpu-h100' asks for 8 GPUs but the suite name 'stage-c-4-gpu' says 4; "
        "make them agree (write 'h100' or fix the suite name)",
        "tests/test_h.py:3: hardware: 'b200' is not 'h200', which the suite name 'stage-d-2-gpu-h200' asks for; "
        "list only 'h200' or register the file once per suite",
        "tests/test_h.py:3: hardware: ['h200', 'b200', 'h200'] lists an entry twice; remove the repeat"]


def test_calls_inside_blocks_or_through_attributes_are_reported_not_counted(tree):
    cat = catalog_of(tree, {"tests/test_n.py": (
        "import ci\n"
        "if True:\n"
        '    register_cuda_ci(60, "stage-a-2-gpu-h200", labels=["x"])\n'
        'ci.register_cuda_ci(60, "stage-a-2-gpu-h200", labels=["x"])\n')})
    assert cat.tests == ()
    assert [str(p) for p in cat.problems] == [
        "tests/test_n.py:3: register_cuda_ci: not a module-level statement, so the runner ignores it; "
        "move the call to the top level of the file",
        "tests/test_n.py:4: register_cuda_ci: called as an attribute; the runner only reads plain "
        "register_cuda_ci(...) calls; import the name and call it directly",
    ]


BAD_CALLS = [
    ('register_cuda_ci(EST, "stage-c-4-gpu-h200", labels=["x"])',
     "est_time: must be a literal (number, string, True/False/None, list of strings), got `EST`"),
    ('register_cuda_ci(60, f"stage-{X}-4-gpu-h200", labels=["x"])', "suite: must be a literal"),
    ('register_cuda_ci(*ARGS, labels=["x"])', "register_cuda_ci: *args is not allowed"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", **OPTS)', "register_cuda_ci: **kwargs is not allowed"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["x"], num_gpus=4)',
     "num_gpus: unknown argument to register_cuda_ci (the GPU count comes from the suite name: -<N>-gpu-)"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["x"], owner="me")', "owner: unknown argument to register_cuda_ci"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", ["x"])',
     "register_cuda_ci: only est_time and suite may be positional, got 3 positional arguments"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["x"], suite="other")', "suite: given twice"),
    ('register_cuda_ci(0, "stage-c-4-gpu-h200", labels=["x"])', "est_time: must be positive, got 0"),
    ('register_cuda_ci(-5, "stage-c-4-gpu-h200", labels=["x"])', "est_time: must be positive, got -5"),
    ('register_cuda_ci("600", "stage-c-4-gpu-h200", labels=["x"])',
     "est_time: must be a number of seconds, got '600'; write the expected run time as a plain number, "
     "e.g. register_cuda_ci(600, ...)"),
    ('register_cuda_ci(True, "stage-c-4-gpu-h200", labels=["x"])', "est_time: must be a number of seconds, got True; "),
    ('register_cuda_ci(suite="stage-c-4-gpu-h200", labels=["x"])', "est_time: required"),
    ('register_cuda_ci(60, labels=["x"])', "suite: required: the suite name (or stage= with runner_config=); pass it "
     'as the second argument, e.g. register_cuda_ci(60, "<stage>-<N>-gpu-<hardware>", ...)'),  # no CUDA call to copy
    ('register_cuda_ci(60, "stage-c-h200", labels=["x"])', "suite: unknown suite shape 'stage-c-h200'"),
    ('register_cuda_ci(60, "stage-c-0-gpu-h200", labels=["x"])', "suite: 'stage-c-0-gpu-h200' asks for 0 GPUs"),
    ('register_cuda_ci(60, "stage c", labels=["x"])',
     "suite: must be a name of letters, digits, '.', '_' or '-' (no '..'), got 'stage c'; rename the suite with only "
     "those characters"),
    ('register_cuda_ci(60, "stage-b-2-gpu-h200..fp8", labels=["x"])',
     "suite: must be a name of letters, digits, '.', '_' or '-' (no '..'), got 'stage-b-2-gpu-h200..fp8'"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200")', "labels: required for GPU tests"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", labels="megatron")', "labels: must be a list of strings, got 'megatron'"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["a", 3])', "labels: must be a list of string literals"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", labels=("megatron", "ckpt"))',
     "labels: must be a list, got a tuple `('megatron', 'ckpt')`; write it in square brackets: "
     "labels=['megatron', 'ckpt']"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["x"], hardware={"h200"})',
     "hardware: must be a list, got a set `{'h200'}`; write it in square brackets: hardware=['h200']"),
    ('register_cuda_ci((60,), "stage-c-4-gpu-h200", labels=["x"])',
     "est_time: must be a literal (number, string, True/False/None, list of strings), got `(60,)`"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["a,b"])', "labels: 'a,b' is not a label"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["x"], nightly="yes")',
     "nightly: must be True or False, got 'yes'; write nightly=True or leave it out"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["x"], disabled=True)',
     "disabled: must be None or a reason string, got True; write disabled=\"<why>\" or leave it out"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["x"], hardware=[])', "hardware: must be a non-empty list"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["x"], hardware=["h100"])',
     "hardware: 'h100' is not 'h200', which the suite name 'stage-c-4-gpu-h200' asks for; list only 'h200' or "
     "register the file once per suite"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["x"], hardware=["8-gpu-h200"])',
     "hardware: '8-gpu-h200' asks for 8 GPUs but the suite name 'stage-c-4-gpu-h200' says 4; make them agree "
     "(write 'h200' or fix the suite name)"),
    ('register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["x"], stage="base-b", runner_config="1-gpu-large")',
     "suite: give either suite= or stage= with runner_config=, not both"),
    ('register_cuda_ci(60, stage="base-b")', "runner_config: must be a name of letters, digits, '.', '_' or '-' (no '..'), "
     "got None; give both stage= and runner_config= as names, e.g. stage=\"stage-b\", runner_config=\"1-gpu-large\""),
]


@pytest.mark.parametrize(("call", "expected"), BAD_CALLS, ids=[c for c, _ in BAD_CALLS])
def test_each_bad_registration_is_one_located_problem(tree, call, expected):
    cat = catalog_of(tree, {"tests/test_bad.py": HEADER + call + "\n", "tests/test_ok.py": HEADER + (
        'register_cpu_ci(1, "stage-a-cpu")\n')})
    assert only_problem(cat).startswith("tests/test_bad.py:2: " + expected)
    assert [t.id for t in cat.tests] == ["tests/test_ok.py"]


def test_a_call_without_a_suite_is_told_the_suite_a_registration_of_its_backend_here_uses(tree):
    cat = catalog_of(tree, {"tests/test_bad.py": HEADER + 'register_cuda_ci(60, labels=["x"])\n',
                            "tests/test_cpu.py": HEADER + 'register_cpu_ci(1, "stage-a-cpu")\n',
                            "tests/test_ok.py": HEADER + 'register_cuda_ci(900, "stage-b-2-gpu-h200", labels=["x"])\n'})
    assert only_problem(cat) == ("tests/test_bad.py:2: suite: required: the suite name (or stage= with "
                                 'runner_config=); e.g. register_cuda_ci(900, "stage-b-2-gpu-h200", ...) as other '
                                 "files here do")


def test_a_nested_call_or_an_alias_written_with_spaces_or_line_breaks_is_still_reported(tree):
    """Python accepts `register_cuda_ci (...)` and `register_cuda_ci\\\n as reg`: the runner still ignores them."""
    cat = catalog_of(tree, {
        "tests/test_x.py": (HEADER + 'register_cuda_ci(60, "stage-a-1-gpu-h200", labels=["x"])\n'
                            'if __name__ == "__main__":\n'
                            '    register_cuda_ci (60, "stage-b-2-gpu-h200", labels=["x"])\n'),
        "tests/test_y.py": ("from fw.ci import (register_cpu_ci, register_cuda_ci\n    as reg)\n"
                            'reg(900, "stage-b-2-gpu-h200", labels=["x"])\n')})
    assert [t.id for t in cat.tests] == ["tests/test_x.py"]
    assert [(p.path, p.line, p.field) for p in cat.problems] == [
        ("tests/test_x.py", 4, "register_cuda_ci"), ("tests/test_y.py", 3, "register_cuda_ci")]


def test_a_call_through_an_import_alias_is_located_with_the_reason_the_runner_skips_it(tree):
    """Framework M's runner reads calls by the function's name only: `reg(...)` registers nothing there."""
    cat = catalog_of(tree, {"tests/test_alias.py": (
        "import os\nfrom fw.ci import register_cuda_ci as reg, register_cpu_ci\n\n"
        'reg(900, "stage-b-2-gpu-h200", labels=["x"])\n')})
    assert cat.tests == ()
    assert only_problem(cat) == (
        "tests/test_alias.py:4: register_cuda_ci: reg is an alias of register_cuda_ci; the framework's runner only "
        "reads calls by that name: call register_cuda_ci(...)")


def test_a_bad_call_does_not_hide_the_good_call_next_to_it(tree):
    cat = catalog_of(tree, {"tests/test_mix.py": HEADER + (
        'register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["x"])\n'
        'register_rocm_ci(-1, "stage-c-4-gpu-mi300", labels=["x"])\n')})
    assert [t.backend for t in cat.tests] == ["cuda"]
    assert only_problem(cat).startswith("tests/test_mix.py:3: est_time: must be positive, got -1")


def test_the_same_backend_and_suite_twice_in_one_file_is_a_duplicate_id(tree):
    cat = catalog_of(tree, {"tests/test_dup.py": HEADER + (
        'register_cuda_ci(60, "stage-c-4-gpu-h200", labels=["x"])\n'
        'register_cuda_ci(90, "stage-c-4-gpu-h200", labels=["y"])\n')})
    assert [t.est_time for t in cat.tests] == [60]
    assert only_problem(cat).startswith(
        "tests/test_dup.py:3: id: duplicate test id 'tests/test_dup.py::cuda-stage-c-4-gpu-h200' (also line 2)")


def test_a_file_without_registration_is_an_error(tree):
    cat = catalog_of(tree, {"tests/test_none.py": "def test_x():\n    pass\n"})
    assert cat.tests == ()
    assert only_problem(cat).startswith("tests/test_none.py:1: registration: no register_cuda_ci/register_rocm_ci/"
                                        "register_cpu_ci call at module level")


def test_files_in_an_implicit_cpu_folder_are_cpu_tests_of_one_second(tree):
    cat = catalog_of(tree, {"tests/fast/test_unit.py": "def test_x():\n    pass\n",
                            "tests/fast/test_gpu.py": HEADER + 'register_cuda_ci(60, "stage-a-1-gpu-h200", labels=["x"])\n'},
                     implicit_cpu_dirs=("tests/fast",))
    by_id = cat.by_id()
    unit = by_id["tests/fast/test_unit.py"]
    assert (unit.backend, unit.gpus, unit.est_time, unit.suite) == ("cpu", 0, 1, "stage-a-cpu")  # as M's runner names it
    # a GPU registration there is no GPU test: M's runner refuses the file ("move the file to tests/fast-gpu/")
    assert "tests/fast/test_gpu.py" not in by_id
    assert only_problem(cat).startswith("tests/fast/test_gpu.py:2: register_cuda_ci: register_cuda_ci is forbidden in "
                                        "tests/fast/")


def test_a_syntax_error_in_one_file_leaves_the_rest_loaded(tree):
    cat = catalog_of(tree, {"tests/test_broken.py": HEADER + "def oops(:\n",
                            "tests/test_fine.py": HEADER + 'register_cpu_ci(3, "stage-a-cpu")\n'})
    assert [t.id for t in cat.tests] == ["tests/test_fine.py"]
    assert only_problem(cat).startswith("tests/test_broken.py:2: syntax: ")


def test_a_file_that_is_not_utf8_is_reported(tree):
    repo = tree({"tests/test_fine.py": HEADER + 'register_cpu_ci(3, "stage-a-cpu")\n'})
    (repo / "tests/test_latin1.py").write_bytes(b"# caf\xe9\n")
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="registry"))
    assert only_problem(cat) == ("tests/test_latin1.py:1: file: is not UTF-8 (invalid continuation byte at byte 5); "
                                 "save the file as UTF-8 or declare its encoding with a `# -*- coding: <name> -*-` "
                                 "line, as Python reads it so")
    assert len(cat.tests) == 1


def test_a_file_with_a_utf8_bom_or_a_coding_line_is_read_as_python_reads_it(tree):
    repo = tree({})
    (repo / "tests").mkdir()
    reg = HEADER + 'register_cpu_ci(3, "stage-a-cpu")\n'
    (repo / "tests/test_bom.py").write_bytes(b"\xef\xbb\xbf" + reg.encode())
    (repo / "tests/test_latin1.py").write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + reg.encode())
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="registry"))
    assert cat.problems == ()
    assert [(t.id, t.line) for t in cat.tests] == [("tests/test_bom.py", 2), ("tests/test_latin1.py", 4)]


def test_a_coding_line_python_refuses_is_reported_on_its_line(tree):
    repo = tree({})
    (repo / "tests").mkdir()
    (repo / "tests/test_odd.py").write_bytes(b"#!/usr/bin/env python\n# coding: klingon\nx = 1\n")
    (repo / "tests/test_bad.py").write_bytes(b"# coding: latin-1\nx = '\xe9'\n")  # fine: latin-1 decodes any byte
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="registry"))
    problems = [str(p) for p in cat.problems if p.field == "file"]
    assert problems == ["tests/test_odd.py:2: file: unknown encoding: klingon (Python refuses to run it); fix the "
                        "`# -*- coding: <name> -*-` line: name a codec Python knows, and only utf-8 in a file that "
                        "starts with a UTF-8 BOM"]


def test_a_file_that_is_not_utf8_is_reported_on_the_line_of_the_bad_byte(tree):
    repo = tree({})
    (repo / "tests").mkdir()
    (repo / "tests/test_latin1.py").write_bytes(b"x = 1\n\n# caf\xe9\n")
    cat = load_catalog(repo, RepoSpec(name="fw", path=repo, format="registry"))
    assert only_problem(cat).startswith("tests/test_latin1.py:3: file: is not UTF-8 (invalid continuation byte at byte 12)")


def test_only_configured_roots_are_searched_and_a_missing_root_is_reported(tree):
    cat = catalog_of(tree, {"tests/e2e/test_a.py": HEADER + 'register_cpu_ci(3, "stage-a-cpu")\n',
                            "tests/unit/test_b.py": "x = 1\n"}, roots=("tests/e2e", "tests/gone"))
    assert [t.id for t in cat.tests] == ["tests/e2e/test_a.py"]
    assert only_problem(cat) == "tests/gone:1: roots: no such folder in the repository; set `roots:` in assets/repos.yaml"


def test_an_unregistered_file_in_a_cpu_unit_test_folder_is_advised_implicit_cpu_dirs_not_an_8_gpu_registration(tree):
    cat = catalog_of(tree, {
        "tests/e2e/test_big.py": HEADER + 'register_cuda_ci(7200, "stage-d-8-gpu-h200", labels=["long"])\n',
        "tests/fast/test_utils.py": "def test_x():\n    assert 1\n",
        "tests/cpu_only/test_reg.py": HEADER + 'register_cpu_ci(30, "stage-a-cpu")\n',
        "tests/cpu_only/test_plain.py": "def test_y():\n    assert 1\n",
        "tests/other/test_noreg.py": "x = 1\n",
    })
    by_path = {p.path: p.message for p in cat.problems}
    for folder in ("tests/fast", "tests/cpu_only"):  # by its name; by its only registrations being CPU ones
        message = by_path[f"{folder}/" + ("test_utils.py" if folder == "tests/fast" else "test_plain.py")]
        assert message == (
            f"no register_cuda_ci/register_rocm_ci/register_cpu_ci call at module level; {folder}/ looks like a folder "
            f"of CPU unit tests: list \"{folder}\" under `implicit_cpu_dirs:` for this repo in assets/repos.yaml (its "
            "unregistered files become CPU tests of est_time 1, as the framework's runner treats its fast folder), or "
            "register the file as a CPU test, e.g. register_cpu_ci(30, \"stage-a-cpu\")")
    assert "implicit_cpu_dirs" not in by_path["tests/other/test_noreg.py"]  # elsewhere: the usual advice


def test_a_disabled_reason_is_kept_with_its_control_characters_escaped(tree, capsys):
    """A reason is printed by every listing (catalog, plan, run): a terminal must not act on escapes in a test file."""
    cat = catalog_of(tree, {"tests/test_x.py": HEADER + (
        'register_cuda_ci(60, "stage-c-8-gpu-h200", labels=["x"], disabled="flaky\\n\\x1b[2J\\x1b[31mHACKED")\n')})
    assert cat.tests[0].disabled == "flaky\\n\\x1b[2J\\x1b[31mHACKED"
    parser = argparse.ArgumentParser(prog="nightly")
    catalog_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["catalog", "--repo", str(cat.repo), "--no-cache"])
    args.func(args)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "flaky\\n\\x1b[2J" in out
