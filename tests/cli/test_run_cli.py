"""`nightly run`: the plan is shown first, bad input stops the night before any test starts."""

from __future__ import annotations

from pipelines.cli import main


def test_list_only_prints_the_plan_and_starts_nothing(tmp_path, capsys):
    assert main(["run", "--home", str(tmp_path), "--list-only"]) == 0
    out = capsys.readouterr().out
    assert "plan: 9 tests, predicted makespan" in out
    assert "skip  tests/e2e/megatron/test_multinode_sft.py" in out
    assert "not planned: no pool runs its hardware" in out
    assert not (tmp_path / "dagster").exists() and not (tmp_path / "logs").exists()


def test_a_corrupt_history_store_stops_the_night_with_what_to_do(tmp_path, capsys):
    (tmp_path / "history.sqlite").write_text("not a database")
    assert main(["run", "--home", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'history.sqlite'}: history store is unreadable" in err
    assert "nightly history import" in err
    assert not (tmp_path / "logs").exists()
    assert (tmp_path / "history.sqlite").read_text() == "not a database"


def test_an_unknown_suite_names_the_registered_ones(tmp_path, capsys):
    assert main(["run", "--home", str(tmp_path), "--suite", "stage-z-3-gpu-h200", "--list-only"]) == 2
    assert "unknown suite(s) stage-z-3-gpu-h200; registered suites: stage-b-2-gpu-h200" in capsys.readouterr().err


def test_a_malformed_env_pair_is_rejected(tmp_path, capsys):
    try:
        main(["run", "--home", str(tmp_path), "--env", "NOEQUALS", "--list-only"])
    except SystemExit as exc:
        assert "--env 'NOEQUALS': expected KEY=VALUE" in str(exc)
    else:
        raise AssertionError("accepted an --env without '='")
