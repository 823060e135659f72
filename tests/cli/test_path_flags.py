"""An empty path flag (``--home=``, ``--repo "$UNSET"``) is refused, never read as the current folder."""

from __future__ import annotations

import argparse
import os

import pytest

from pipelines.cli import build_parser, main

#: flags that name a folder, a file or a repo (a name or a checkout path)
PATH_FLAGS = ("--home", "--repo", "--store", "--out", "--screenshot", "--groups", "--gantt", "--evidence", "--patch")


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(argv prefix, parser) of every command and subcommand."""
    if prefix:
        yield prefix, parser
    for action in (a for a in parser._actions if isinstance(a, argparse._SubParsersAction)):
        for name, child in action.choices.items():
            yield from _commands(child, (*prefix, name))


CASES = [(argv, flag) for argv, parser in _commands(build_parser())
         for flag in PATH_FLAGS if flag in parser._option_string_actions]


def test_the_path_flags_of_every_command_are_checked():
    assert {" ".join(argv) for argv, flag in CASES if flag == "--home"} >= {"run", "report", "ui", "history import"}
    assert {" ".join(argv) for argv, flag in CASES if flag == "--repo"} >= {"run", "catalog", "plan", "coverage"}


@pytest.mark.parametrize(("argv", "flag"), CASES, ids=[f"{' '.join(a)} {f}" for a, f in CASES])
def test_an_empty_path_flag_is_a_usage_error_naming_it(argv, flag, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*argv, f"{flag}=", *(["x.log"] if argv == ("history", "import") else [])])
    assert exc.value.code == 2
    assert f"argument {flag}: empty path" in capsys.readouterr().err


def test_run_with_an_empty_home_writes_nothing_into_the_current_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    with pytest.raises(SystemExit) as exc:
        main(["run", "--list-only", "--home="])
    assert exc.value.code == 2
    assert "nightly run: error: argument --home: empty path" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
