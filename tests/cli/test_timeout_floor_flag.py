"""``--timeout-floor`` means the same in ``nightly plan``, ``nightly run`` and a run's Dagster config."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from pipelines.cli import build_parser, main
from pipelines.core.model import effective_timeout
from pipelines.defs.test_runs import TestRunsConfig as RunConfig

OUT_OF_RANGE = (("-5", "-5 is below 1 second"), ("0", "0 is below 1 second"),
                ("99999999999", "99999999999 is more than one day"),
                ("ten", "'ten' is not a whole number of seconds"))


@pytest.mark.parametrize(("value", "why"), OUT_OF_RANGE)
@pytest.mark.parametrize("command", ["plan", "run"])
def test_an_unusable_floor_is_refused_by_both_commands_alike(command, value, why, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path))
    extra = ["--list-only"] if command == "run" else []
    assert main([command, f"--timeout-floor={value}", *extra]) == 2
    err = capsys.readouterr().err
    assert f"--timeout-floor: {why}; give " in err
    assert "Traceback" not in err
    assert not (tmp_path / "dagster").exists()


def test_both_commands_document_the_flag_with_the_same_words():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    helps = {name: next(a.help for a in sub.choices[name]._actions if a.dest == "timeout_floor")
             for name in ("plan", "run")}
    assert helps["plan"] == helps["run"]
    assert "default: the repo's timeout.floor_s" in helps["plan"]


def test_a_floor_given_to_plan_and_to_run_gives_the_same_timeouts(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path))
    assert main(["plan", "--timeout-floor", "4321", "--json"]) == 0
    planned = {a["test_id"]: a["timeout_s"] for a in json.loads(capsys.readouterr().out)["assignments"]}
    assert planned and set(planned.values()) == {4321}  # the example's est_time x 1.25 is far below it
    assert main(["run", "--timeout-floor", "4321", "--list-only"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if any(t in line for t in planned)]
    assert rows and all(line.split()[-1] == "4321" for line in rows)


def test_a_run_config_floor_out_of_range_fails_with_the_same_reason():
    with pytest.raises(dg.Failure, match=r"timeout_floor_s: -5 is below 1 second; give a floor from 1 to 86400"):
        RunConfig(timeout_floor_s=-5).floor()
    assert RunConfig(timeout_floor_s=0).floor() is None  # 0: the repo's floor, as before
    assert RunConfig(timeout_floor_s=60).floor() == 60


def test_a_timeout_is_never_below_one_second_even_for_est_time_zero():
    assert effective_timeout(0, floor_s=0) == 1
    assert effective_timeout(100, floor_s=0) == 125
