"""A state folder that cannot be written stops `nightly run` and `nightly ui` at once: exit 2 with
what to do (not a traceback and exit 1, which means a test failed)."""

from __future__ import annotations

import pytest

from pipelines.cli import main

SAYS = "must be writable (set NIGHTLY_HOME or --home to a writable folder)"


@pytest.fixture
def unwritable(tmp_path):
    """A home under a plain file: unwritable for root too (ENOTDIR), like NIGHTLY_HOME=/dev/null/home."""
    (tmp_path / "afile").write_text("")
    return tmp_path / "afile" / "home"


@pytest.mark.parametrize("argv", [["run"], ["run", "--list-only"], ["ui", "--print-command"]])
def test_an_unwritable_nightly_home_is_exit_2_before_any_work(unwritable, monkeypatch, capsys, argv):
    monkeypatch.setenv("NIGHTLY_HOME", str(unwritable))
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "", "nothing planned or printed first"
    assert err == (f"nightly {argv[0]}: error:\n{unwritable}: cannot be written (Not a directory); "
                   f"the state folder {unwritable} {SAYS}\n")


def test_an_unwritable_home_flag_is_exit_2(unwritable, capsys):
    assert main(["run", "--home", str(unwritable)]) == 2
    assert capsys.readouterr().err.rstrip().endswith(SAYS)


def test_a_writable_home_is_created_and_left_clean(tmp_path, capsys, monkeypatch):
    home = tmp_path / "new" / "home"
    for name in ("DAGSTER_HOME", "NIGHTLY_HOME"):  # the command points both at the home: restored after
        monkeypatch.setenv(name, "")
    assert main(["ui", "--home", str(home), "--print-command"]) == 0
    assert sorted(p.name for p in home.iterdir()) == ["dagster"], "the probe file is removed"
