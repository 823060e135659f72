"""The lines `nightly run` ends with name the UI as `nightly ui`, the command every install has
(`nix run`, `result/bin/nightly`, the images have no Makefile, so `make ui` meant nothing there),
with `--home` when the night kept its state somewhere `nightly ui` would not look by default."""

from __future__ import annotations

import ast
from types import SimpleNamespace

from pipelines.cli.run import _print_calibration, ui_command
from tests.conftest import PROJECT_ROOT


def test_the_default_state_folder_needs_no_home_flag(tmp_path, monkeypatch):
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "state"))
    assert ui_command(tmp_path / "state") == "`nightly ui`"


def test_another_state_folder_is_named_so_the_ui_opens_the_same_instance(tmp_path, monkeypatch):
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "state"))
    assert ui_command(tmp_path / "my night") == f"`nightly ui --home '{tmp_path / 'my night'}'`"


def test_a_failed_calibration_points_at_the_ui_command(capsys):
    _print_calibration(SimpleNamespace(success=False, run_id="r-1"), None, "`nightly ui`")
    out = capsys.readouterr().out
    assert "its step's error is in `nightly ui` -> Runs" in out and "make ui" not in out


def test_no_message_of_the_run_command_names_make_ui():
    """Every string the module prints (its docstrings aside) is free of the Makefile-only command."""
    tree = ast.parse((PROJECT_ROOT / "pipelines/cli/run.py").read_text())
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.FunctionDef)) and n.body and isinstance(n.body[0], ast.Expr)
    }
    said = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]
    assert [s for s in said if "make ui" in s] == []
