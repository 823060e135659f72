"""Reading configuration matrices from Python test files and workflow templates, never running them."""

from __future__ import annotations

import textwrap

from pipelines.core.catalog.scan import FileScan
from pipelines.core.coverage.matrix import (
    declared_groups,
    python_matrix,
    template_matrix,
    unreadable_group_comments,
)


def test_tuple_rows_take_their_field_names_from_the_comment_above_the_matrix():
    source = textwrap.dedent("""\
        # (name, backend, use_lora, grad_accum_2)
        _CONFIGS = [
            ("megatron-dense", "megatron", False, False),
            ("fsdp-lora", "fsdp", True, True),
        ]
        """)

    configs, problems = python_matrix(source, "tests/test_m.py", "_CONFIGS")

    assert problems == []
    assert [(c.name, c.line, c.field("backend"), c.field("use_lora")) for c in configs] == [
        ("megatron-dense", 3, "megatron", "false"), ("fsdp-lora", 4, "fsdp", "true")]


def test_dict_rows_name_their_own_fields_and_unnamed_rows_are_named_by_position():
    source = 'MATRIX = [\n    {"backend": "megatron", "fp8": True},\n    {"backend": "fsdp", "fp8": False},\n]\n'

    configs, problems = python_matrix(source, "tests/test_m.py", "MATRIX")

    assert problems == []
    assert [(c.name, c.fields) for c in configs] == [
        ("MATRIX[0]", (("backend", "megatron"), ("fp8", "true"))), ("MATRIX[1]", (("backend", "fsdp"), ("fp8", "false")))]


def test_a_group_can_name_the_tuple_positions_when_the_file_has_no_comment():
    configs, problems = python_matrix('_CONFIGS = [("a", 1)]\n', "t.py", "_CONFIGS", fields=("name", "world"))

    assert problems == [] and configs[0].field("world") == "1"


def test_tuple_rows_without_field_names_are_refused_with_how_to_name_them():
    configs, problems = python_matrix('_CONFIGS = [("a", "megatron")]\n', "tests/t.py", "_CONFIGS")

    assert configs == []
    assert [str(p) for p in problems] == [
        "tests/t.py:1: _CONFIGS[0]: tuple positions have no names; add a comment `# (name, a, b, ...)` right above "
        "`_CONFIGS =` or `fields:` to the group in assets/coverage.yaml"]


def test_a_row_that_is_not_literal_or_has_the_wrong_length_is_located_and_the_others_are_kept():
    source = '# (name, backend)\n_CONFIGS = [\n    ("a", BACKEND),\n    ("b", "fsdp", 3),\n    ("c", "megatron"),\n]\n'

    configs, problems = python_matrix(source, "tests/t.py", "_CONFIGS")

    assert [c.name for c in configs] == ["c"]
    assert [str(p) for p in problems] == [
        "tests/t.py:3: _CONFIGS[0]: is not a literal; write the values out (strings, numbers, booleans)",
        "tests/t.py:4: _CONFIGS[1]: has 3 values but the fields are (name, backend); make them agree"]


def test_a_missing_or_computed_matrix_is_a_problem_never_an_exception():
    assert [str(p) for p in python_matrix("X = 1\n", "t.py", "_CONFIGS")[1]] == [
        "t.py:1: _CONFIGS: no module-level `_CONFIGS = [...]`; add the matrix or fix the group's `matrix:`"]
    assert [str(p) for p in python_matrix("_CONFIGS = make()\n", "t.py", "_CONFIGS")[1]] == [
        "t.py:1: _CONFIGS: must be a literal list of tuples or dicts; the checker never runs test code"]
    assert [str(p) for p in python_matrix("_CONFIGS = [\n", "t.py", "_CONFIGS")[1]] == [
        "t.py:1: syntax: '[' was never closed; fix the file's syntax (the matrix is read without running it)"]
    assert [str(p) for p in python_matrix("_CONFIGS = [1]\n", "t.py", "_CONFIGS")[1]] == [
        "t.py:1: _CONFIGS[0]: must be a tuple or a dict, got int; write each configuration as a tuple or a dict"]


def test_rows_added_with_plus_equals_append_and_extend_at_module_level_are_read_in_order():
    source = textwrap.dedent("""\
        # (name, backend)
        _CONFIGS = [("a", "megatron")]
        _CONFIGS += [("b", "fsdp")]
        _CONFIGS.append(("c", "tilelang"))
        _CONFIGS.extend([("d", "megatron"), ("e", "fsdp")])
        _CONFIGS += ("f", "tilelang"),
        """)

    configs, problems = python_matrix(source, "tests/t.py", "_CONFIGS")

    assert problems == []
    assert [(c.name, c.line, c.field("backend")) for c in configs] == [
        ("a", 2, "megatron"), ("b", 3, "fsdp"), ("c", 4, "tilelang"), ("d", 5, "megatron"), ("e", 5, "fsdp"),
        ("f", 6, "tilelang")]


def test_a_change_of_the_matrix_the_checker_cannot_read_is_located_and_rows_it_may_drop_are_not_counted():
    source = textwrap.dedent("""\
        # (name, backend)
        _CONFIGS = [("a", "megatron")]
        _CONFIGS.insert(0, ("b", "fsdp"))
        _CONFIGS.append(("c", "tilelang"))
        del _CONFIGS[0]
        _CONFIGS[1:] = []
        _CONFIGS *= 2
        _CONFIGS.append(("d", "fsdp"))
        _CONFIGS += make_more()
        _CONFIGS.extend(MORE)
        if FAST:
            _CONFIGS.append(("e", "fsdp"))
        for backend in BACKENDS:
            _CONFIGS = []
        _CONFIGS.append(EXTRA)
        _CONFIGS.append(("f", "megatron"))
        """)

    configs, problems = python_matrix(source, "tests/t.py", "_CONFIGS")

    assert [c.name for c in configs] == ["f"]
    reads = ("the checker reads only literal `_CONFIGS = [...]`, `_CONFIGS += [...]`, `_CONFIGS.append(...)` and "
             "`_CONFIGS.extend([...])` at module level, so ")
    dropped, added = f"; {reads}rows before this line are not counted; write the rows out as one of those", \
        f"; {reads}its rows are not counted (they could only add coverage: not a failure); write them out as one " \
        "of those to count them"
    assert [(type(p).__name__, str(p)) for p in problems] == [
        ("Problem", f"tests/t.py:3: _CONFIGS: `.insert()`{dropped}"),
        ("Problem", f"tests/t.py:5: _CONFIGS: `del`{dropped}"),
        ("Problem", f"tests/t.py:6: _CONFIGS: an item or slice assignment{dropped}"),
        ("Problem", f"tests/t.py:7: _CONFIGS: `_CONFIGS *= 2`{dropped}"),
        ("Note", f"tests/t.py:9: _CONFIGS: `+=` of a value that is not a literal list{added}"),
        ("Note", f"tests/t.py:10: _CONFIGS: `.extend()` of a value that is not a literal list{added}"),
        ("Note", f"tests/t.py:12: _CONFIGS: an addition inside an `if` block{added}"),
        ("Problem", f"tests/t.py:14: _CONFIGS: a change inside a `for` block{dropped}"),
        ("Problem", "tests/t.py:15: _CONFIGS[0]: is not a literal; write the values out (strings, numbers, booleans)"),
    ]


def test_sorting_or_reversing_the_matrix_keeps_every_row():
    source = textwrap.dedent("""\
        # (name, backend)
        _CONFIGS = [("b", "fsdp"), ("a", "megatron")]
        _CONFIGS.sort()
        _CONFIGS.reverse()
        _CONFIGS.sort(key=lambda row: row[1])
        if FAST:
            _CONFIGS.sort()
        """)

    configs, problems = python_matrix(source, "tests/t.py", "_CONFIGS")

    assert problems == [] and [c.name for c in configs] == ["b", "a"]


def test_reassigning_the_matrix_from_a_computed_value_counts_none_of_the_rows_before():
    source = '# (name, backend)\n_CONFIGS = [("a", "megatron")]\n_CONFIGS = _CONFIGS + [("b", "fsdp")]\n'

    configs, problems = python_matrix(source, "tests/t.py", "_CONFIGS")

    assert configs == []
    assert [str(p) for p in problems] == [
        "tests/t.py:3: _CONFIGS: must be a literal list of tuples or dicts; the checker never runs test code"]


def test_group_comments_are_found_with_their_lines():
    assert declared_groups('"""doc"""\n# coverage-group: lora-moe\nX = 1\n  # coverage-group: indented\n') == [("lora-moe", 2)]


TEMPLATE = """\
<% set megatron_tests = [
    {'test_file': 'test_fp8.py', 'num_gpus': 2, 'use_fp8_rollout': '0'},
    {'test_file': 'test_fp8.py', 'num_gpus': 2, 'use_fp8_rollout': '1', 'enable_eval': '0'},
    {'test_file': 'test_other.py', 'num_gpus': 8},
] -%>
<% set jobs = {'e2e-megatron': {'label': 'run-ci-megatron', 'tests': megatron_tests}} -%>
jobs:
    env:
      ENABLE_EVAL: ${{ matrix.info.enable_eval || '1' }}
"""


def test_a_templates_entries_for_one_test_are_its_configurations_with_env_defaults_filled_in():
    configs, problems = template_matrix(TEMPLATE, ".github/workflows/pr-test.yml.j2", "tests/test_fp8.py",
                                         scan=FileScan("tests/test_fp8.py"), default_gpus=8)

    assert problems == []
    assert [(c.name, c.path, c.line, c.field("use_fp8_rollout"), c.field("enable_eval")) for c in configs] == [
        ("e2e-megatron use_fp8_rollout=0", ".github/workflows/pr-test.yml.j2", 2, "0", "1"),
        ("e2e-megatron enable_eval=0 use_fp8_rollout=1", ".github/workflows/pr-test.yml.j2", 3, "1", "0")]
    assert configs[0].field("job") == "e2e-megatron" and configs[0].field("num_gpus") == "2"


def test_a_test_the_template_never_runs_is_a_problem():
    _, problems = template_matrix(TEMPLATE, "t.j2", "tests/test_gone.py", scan=FileScan("tests/test_gone.py"), default_gpus=8)

    assert [str(p) for p in problems] == ["t.j2:1: test_file: no entry runs tests/test_gone.py; add one or drop it from the group"]


def test_two_rows_of_one_matrix_with_one_name_are_located():
    source = '# (name, tp)\n_CONFIGS = [\n    ("a", 1),\n    ("b", 2),\n    ("a", 4),\n]\n'

    configs, problems = python_matrix(source, "tests/t.py", "_CONFIGS")

    assert len(configs) == 3
    assert [str(p) for p in problems] == [
        "tests/t.py:5: a: another configuration of this test is named 'a' (line 3); give each a name of its own"]


def test_a_templates_boolean_and_falsy_values_are_named_and_matched_as_the_job_sees_them():
    """GitHub renders a YAML/Jinja boolean as ``true``/``false`` and ``|| 'd'`` replaces a falsy value by its
    default: coverage names and matches the configuration by what the job's environment gets, never ``True``."""
    template = """\\
<% set megatron_tests = [
    {'test_file': 'test_fp8.py', 'num_gpus': 2, 'use_fp8_rollout': True, 'enable_eval': False},
] -%>
<% set jobs = {'e2e-megatron': {'label': 'run-ci-megatron', 'tests': megatron_tests}} -%>
jobs:
    env:
      ENABLE_EVAL: ${{ matrix.info.enable_eval || '1' }}
"""
    configs, problems = template_matrix(template, "t.j2", "tests/test_fp8.py",
                                        scan=FileScan("tests/test_fp8.py"), default_gpus=8)

    assert problems == []
    [config] = configs
    assert config.name == "e2e-megatron enable_eval=false use_fp8_rollout=true"
    assert config.field("use_fp8_rollout") == "true" and config.field("enable_eval") == "1"


def test_an_entry_two_templates_give_different_env_has_each_templates_catalog_id(tmp_path):
    """Coverage names a configuration by its catalog test id: when the PR and nightly templates give one entry
    different environments, the catalog has a test per environment, and each template's entry is its own."""
    from pipelines.core.catalog import load_catalog

    nightly = ("<% set t = [{'test_file': 'test_moe.py', 'num_gpus': 8}] %>\n<% set jobs = {'n': {'tests': t}} %>\n"
               "on:\n  schedule:\n    - cron: '0 3 * * *'\nenv:\n  USE_DEEPEP: ${{ matrix.info.use_deepep || '0' }}\n")
    pr = nightly.replace("'n'", "'p'").replace("  schedule:\n    - cron: '0 3 * * *'\n", "  pull_request:\n") \
        .replace("|| '0'", "|| 'false'")
    names = {".github/workflows/nightly-test.yml.j2": nightly, ".github/workflows/pr-test.yml.j2": pr}
    repo = tmp_path / "repo"
    for rel, text in {**names, "tests/test_moe.py": ""}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    catalog_ids = {t.suite: t.id for t in load_catalog(repo).tests}
    got = {}
    for name, text in names.items():
        others = [(n, t) for n, t in names.items() if n != name]
        configs, problems = template_matrix(text, name, "tests/test_moe.py", scan=FileScan("tests/test_moe.py"),
                                            default_gpus=8, others=others)
        assert problems == []
        got.update({c.field("job"): c.test_id for c in configs})
    assert got == catalog_ids == {"n": "tests/test_moe.py", "p": "tests/test_moe.py::pr-test.yml.j2"}


def test_a_group_comment_that_is_not_the_name_alone_is_located():
    text = '"""doc"""\n# coverage-group: lora-moe\n#coverage-group:\n# coverage-group: a b\n  # coverage-group: x y\n'

    assert [(p.line, p.field) for p in unreadable_group_comments(text, "t.py")] == [(3, "coverage-group"),
                                                                                   (4, "coverage-group")]


def test_a_write_into_a_row_of_the_matrix_is_located_however_it_reaches_the_row():
    """`_CONFIGS[0]["backend"] = "tilelang"` makes the test run another configuration than the literal
    says: counted as written, a cell read covered while the test never ran it."""
    source = textwrap.dedent("""\
        _CONFIGS = [
            {"name": "a", "backend": "megatron", "layout": "shared"},
            {"name": "b", "backend": "tilelang", "layout": "per"},
        ]
        _CONFIGS[0]["backend"] = "tilelang"
        _CONFIGS[1].update(layout="shared")
        for _c in _CONFIGS:
            _c["backend"] = "fsdp"
        _CONFIGS[0]["layout"] += "-x"
        del _CONFIGS[1]["layout"]
        row = _CONFIGS[0]
        row.setdefault("extra", 1)
        _c.clear()
        for i, c in enumerate(_CONFIGS):
            if i:
                c |= {"backend": "fsdp"}
        [c.update(layout="per") for c in _CONFIGS[1:]]
        last = _CONFIGS.pop()
        _CONFIGS.append({"name": "z", "backend": "megatron", "layout": "per"})
        print(_CONFIGS[0].get("name"), len(_CONFIGS))
        for c in _CONFIGS:
            print(c["name"], c.get("backend"))
        row = {"name": "other"}
        row["backend"] = "fsdp"
        """)

    configs, problems = python_matrix(source, "tests/t.py", "_CONFIGS")

    assert [c.name for c in configs] == ["z"]
    dropped = ("; the checker reads only literal `_CONFIGS = [...]`, `_CONFIGS += [...]`, `_CONFIGS.append(...)` and "
               "`_CONFIGS.extend([...])` at module level, so rows before this line are not counted; write the rows "
               "out as one of those")
    assert [str(p).removesuffix(dropped) for p in problems] == [
        "tests/t.py:5: _CONFIGS: a change of one of its rows (`_CONFIGS[0]['backend'] = 'tilelang'`)",
        "tests/t.py:6: _CONFIGS: a change of one of its rows (`_CONFIGS[1].update(layout='shared')`)",
        "tests/t.py:8: _CONFIGS: a change of one of its rows (`_c['backend'] = 'fsdp'`) inside a `for` block",
        "tests/t.py:9: _CONFIGS: a change of one of its rows (`_CONFIGS[0]['layout'] += '-x'`)",
        "tests/t.py:10: _CONFIGS: a change of one of its rows (`del _CONFIGS[1]['layout']`)",
        "tests/t.py:12: _CONFIGS: a change of one of its rows (`row.setdefault('extra', 1)`)",
        "tests/t.py:13: _CONFIGS: a change of one of its rows (`_c.clear()`)",
        "tests/t.py:16: _CONFIGS: a change of one of its rows (`c |= {'backend': 'fsdp'}`) inside a `for` block",
        "tests/t.py:17: _CONFIGS: a change of one of its rows (`[c.update(layout='per') for c in _CONFIGS[1:]]`)",
        "tests/t.py:18: _CONFIGS: `.pop()`",
    ]
    assert all(str(p).endswith(dropped) for p in problems)


def test_reading_a_rows_fields_through_their_own_methods_is_no_change_and_growing_a_field_in_place_is():
    """`[c["name"].replace("-", "_") for c in _CONFIGS]` only reads the rows (a string method); a list
    field grown in place (`_CONFIGS[1]["args"].append(...)`) changes the configuration that row runs."""
    source = textwrap.dedent("""\
        _CONFIGS = [
            {"name": "a-b", "backend": "megatron", "args": []},
            {"name": "c-d", "backend": "fsdp", "args": []},
        ]
        IDS = [c["name"].replace("-", "_") for c in _CONFIGS]
        for c in _CONFIGS:
            print(c["name"].upper(), c["backend"].startswith("m"))
        FIRST = _CONFIGS[0]["name"].split("-")[0]
        """)

    configs, problems = python_matrix(source, "tests/t.py", "_CONFIGS")

    assert [c.name for c in configs] == ["a-b", "c-d"] and problems == []

    grown = source + '_CONFIGS[1]["args"].append("--tp=2")\n'
    configs, problems = python_matrix(grown, "tests/t.py", "_CONFIGS")

    assert configs == []
    assert [str(p).split(";")[0] for p in problems] == [
        "tests/t.py:9: _CONFIGS: a change of one of its rows (`_CONFIGS[1]['args'].append('--tp=2')`)"]
