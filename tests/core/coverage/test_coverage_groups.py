"""assets/coverage.yaml: groups are read per repo, and every mistake is located and explained."""

from __future__ import annotations

import textwrap

import pytest

from pipelines.core.coverage.groups import load_groups, parse_groups
from pipelines.core.coverage.model import Dimension
from pipelines.core.model import CatalogError
from tests.conftest import PROJECT_ROOT

VALID = """\
repos:
  minirl:
    groups:
      - name: lora
        tests: [tests/a.py, tests/b.py]
        dimensions:
          backend: [megatron, tilelang]
          layout:
            fields: [shared_outer, virtual_experts]
            values: {shared: [true, true], per-expert: [false, false]}
          world: {field: num_gpus, values: [2, 4]}
        require: [[backend, layout], [backend, world]]
  other:
    groups: []
"""


def errors(text: str) -> list[str]:
    with pytest.raises(CatalogError) as caught:
        parse_groups(textwrap.dedent(text), "coverage.yaml", "minirl")
    return [str(p) for p in caught.value.problems]


def test_a_repos_groups_are_read_with_their_dimensions_and_origin():
    (group,) = parse_groups(VALID, "coverage.yaml", "minirl")

    assert (group.name, group.tests, group.origin, group.matrix, group.strength) == (
        "lora", ("tests/a.py", "tests/b.py"), "coverage.yaml:4", "_CONFIGS", 2)
    assert group.dimensions == (
        Dimension("backend", ("backend",), (("megatron", ("megatron",)), ("tilelang", ("tilelang",)))),
        Dimension("layout", ("shared_outer", "virtual_experts"), (("shared", ("true", "true")), ("per-expert", ("false", "false")))),
        Dimension("world", ("num_gpus",), (("2", ("2",)), ("4", ("4",)))),
    )
    assert group.require == (("backend", "layout"), ("backend", "world"))
    assert parse_groups(VALID, "coverage.yaml", "unknown-repo") == ()


def test_the_projects_own_file_is_valid_and_declares_the_example_pair():
    (group,) = load_groups(PROJECT_ROOT / "assets" / "coverage.yaml", "minirl")

    assert group.name == "lora-moe-diagonals" and len(group.tests) == 2


def test_an_absent_file_declares_no_groups(tmp_path):
    assert load_groups(tmp_path / "coverage.yaml", "minirl") == ()


def test_a_groups_path_that_cannot_be_read_is_located_with_the_fix(tmp_path):
    with pytest.raises(CatalogError) as err:
        load_groups(tmp_path, "minirl")
    assert str(err.value) == f"{tmp_path}:1: file: cannot be read (Is a directory); check the path and its permissions"


def test_every_mistake_is_reported_at_once_with_its_line():
    assert errors("""\
        repos:
          minirl:
            groups:
              - name: lora
                tests: []
                dimensions:
                  backend: megatron
                  world: [2, 4]
                require: [[world, nope]]
              - name: two
                tests: [tests/a.py]
                dimensions: {layout: {field: x, fields: [a, b]}}
                strength: 0
        """) == [
        "coverage.yaml:5: repos.minirl.groups[0].tests: required: a list of repo-relative test paths inside the repo (tests/...py)",
        "coverage.yaml:7: repos.minirl.groups[0].dimensions.backend.values: must be a list of values, or a mapping "
        "label -> value (a list of values when the dimension reads several fields), got 'megatron'",
        "coverage.yaml:9: repos.minirl.groups[0].require: unknown dimension(s) ['nope']; declared: ['world']",
        "coverage.yaml:12: repos.minirl.groups[1].dimensions.layout: give exactly one of `field: NAME` or "
        "`fields: [A, B]` (the tuple positions it reads)",
        "coverage.yaml:13: repos.minirl.groups[1].strength: must be >= 1 (2: all pairs), got 0",
    ]


def test_a_combined_value_must_give_one_value_per_field():
    assert errors("""\
        repos:
          minirl:
            groups:
              - name: lora
                tests: [tests/a.py]
                dimensions:
                  layout:
                    fields: [a, b]
                    values: {shared: [true]}
        """) == [
        "coverage.yaml:9: repos.minirl.groups[0].dimensions.layout.values.shared: must be 2 scalar value(s), "
        "one per field, got [True]"]


def test_two_groups_with_one_name_and_bad_yaml_are_refused():
    assert errors("""\
        repos:
          minirl:
            groups:
              - {name: a, tests: [t.py], dimensions: {x: [1, 2]}}
              - {name: a, tests: [u.py], dimensions: {x: [1, 2]}}
        """) == ["coverage.yaml:5: repos.minirl.groups: two groups are named 'a'; rename one"]
    assert errors("repos: [\n") == [
        "coverage.yaml:2: yaml: expected the node content, but found '<stream end>'; fix the YAML syntax"]


def test_a_test_path_outside_the_repo_is_refused():
    assert errors("""\
        repos:
          minirl:
            groups:
              - {name: a, tests: [tests/../../secret.py], dimensions: {x: [1, 2]}}
        """) == ["coverage.yaml:4: repos.minirl.groups[0].tests: required: a list of repo-relative test paths "
                 "inside the repo (tests/...py)"]


def test_a_misspelt_or_misplaced_key_is_located_not_ignored():
    assert errors("""\
        repos:
          minirl:
            group: []
            groups:
              - name: tri
                tests: [tests/a.py]
                dimensions:
                  a: [0, 1]
                  b: {field: b, value: [0, 1]}
                strenght: 3
        """) == [
        "coverage.yaml:3: repos.minirl.group: unknown key; did you mean 'groups'? the keys here are groups",
        "coverage.yaml:9: repos.minirl.groups[0].dimensions.b.value: unknown key; did you mean 'values'? "
        "the keys here are field, fields, values",
        "coverage.yaml:9: repos.minirl.groups[0].dimensions.b.values: must be a list of values, or a mapping label -> "
        "value (a list of values when the dimension reads several fields), got None",
        "coverage.yaml:10: repos.minirl.groups[0].strenght: unknown key; did you mean 'strength'? the keys here "
        "are name, tests, matrix, fields, dimensions, strength, require",
    ]
    assert errors("repo:\n  minirl: {groups: []}\n") == [
        "coverage.yaml:1: repo: unknown key; did you mean 'repos'? the keys here are repos"]


def test_a_file_that_is_not_a_mapping_is_refused():
    assert errors("- minirl\n") == [
        "coverage.yaml:1: repos: the file must be a mapping `repos: {NAME: {groups: [...]}}`, got a list; see docs/coverage.md"]


def test_a_key_given_twice_is_refused_where_yaml_would_keep_the_last():
    assert errors("""\
        repos:
          minirl:
            groups:
              - {name: a, tests: [t.py], dimensions: {x: [1, 2]}, strength: 1, strength: 2}
          minirl: {groups: []}
        """) == [
        "coverage.yaml:4: strength: is given twice (also on line 4); YAML would keep only this one, keep one",
        "coverage.yaml:5: minirl: is given twice (also on line 2); YAML would keep only this one, keep one",
    ]


def test_a_merged_key_may_be_overridden():
    a, b = parse_groups(textwrap.dedent("""\
        repos:
          minirl:
            groups:
              - &base {name: a, tests: [t.py], dimensions: {x: [1, 2], y: [1, 2]}, strength: 2}
              - {<<: *base, name: b, strength: 1}
        """), "coverage.yaml", "minirl")

    assert (a.strength, b.name, b.strength, b.tests) == (2, "b", 1, ("t.py",))


def test_a_misspelt_repo_name_is_refused_when_the_checked_repo_has_no_groups():
    text = "repos:\n  other: {groups: []}\n  minirll: {groups: []}\n"
    with pytest.raises(CatalogError) as caught:
        parse_groups(text, "coverage.yaml", "minirl", known={"minirl", "other"})
    assert [str(p) for p in caught.value.problems] == [
        "coverage.yaml:3: repos.minirll: 'minirll' is not a repo in repos.yaml (known: minirl, other) and 'minirl' "
        "has no groups here; did you mean 'minirl'? fix the name (an unconfigured checkout goes by its folder name)"]
    # the unconfigured checkout itself, by its folder name, reads its groups
    assert parse_groups(text, "coverage.yaml", "minirll", known={"minirl", "other"}) == ()


def test_an_unconfigured_checkout_s_groups_do_not_break_checking_another_repo():
    text = "repos:\n  minirl: {groups: []}\n  somefolder: {groups: []}\n"
    assert parse_groups(text, "coverage.yaml", "minirl", known={"minirl"}) == ()


def test_a_test_listed_twice_is_located():
    assert errors("""\
        repos:
          minirl:
            groups:
              - {name: a, tests: [tests/t.py, ./tests/t.py, tests/u.py], dimensions: {x: [1, 2]}}
        """) == ["coverage.yaml:4: repos.minirl.groups[0].tests: tests/t.py is listed twice; list each test once"]


def test_values_are_read_as_written_words_and_numbers_by_value():
    text = VALID.replace("world: {field: num_gpus, values: [2, 4]}",
                         "world: {field: num_gpus, values: [2.0, 4]}\n          offload: [on, Off, yes, True]\n"
                         "          lr: [1e-5, 3.0e-6, 2E+3]")
    (group,) = parse_groups(text, "coverage.yaml", "minirl")

    labels = {d.name: d.labels for d in group.dimensions}
    assert labels["world"] == ("2", "4")
    assert labels["offload"] == ("on", "Off", "yes", "true")
    assert labels["lr"] == ("1e-05", "3e-06", "2000")
