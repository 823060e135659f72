"""Two nights' calibrations in a row: the step guard judges from the est_time in force (the last
calibration's), and a held proposal keeps that estimate, never the registered one."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

from pipelines.core.history import FileHistoryStore
from pipelines.core.model import Sample
from pipelines.night import Night, NightSettings
from tests.support.assets import copied_example

DP8 = "tests/e2e/megatron/test_dp8_chat.py"


def _night_ran(tmp_path, assets, run: int, elapsed: float) -> Night:
    """A fresh Night (as each night is) after dp8 passed in ``elapsed`` s, its sample stored."""
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets), run_id=f"run{run}")
    dp8 = night.registered.by_id()[DP8]
    FileHistoryStore(tmp_path / "home" / "history.sqlite").append([Sample(
        test_id=DP8, hardware=dp8.hardware, sha256=dp8.sha256, outcome="passed", elapsed_s=elapsed,
        started_at=f"2026-12-0{run}T01:00:00+00:00", run_id=f"run{run}", source=f"run{run}.log")])
    return night


def _stored(night: Night) -> int:
    return json.loads(night.state.get(night.calibration_keys()["estimates"]))[DP8]["est_time"]


def test_a_held_proposal_keeps_the_calibrated_est_time_in_force_not_the_registered_one(tmp_path):
    _, assets = copied_example(tmp_path)
    first = _night_ran(tmp_path, assets, 1, 6.6)
    assert first.registered.by_id()[DP8].est_time == 3
    first.calibrate()
    assert _stored(first) == 10  # x3.3 from the registered 3: within max_step_factor x4

    second = _night_ran(tmp_path, assets, 2, 8.6)  # 9 s as the runner logs it: 12 s, the 20 s bucket
    (e,) = [e for e in second.calibrate()[0] if e.test_id == DP8]
    # 20 s is x2 from the 10 in force (applied), or held with 10 kept: never back to 3
    assert e.proposed == 20 and e.held is None, e.reason
    assert _stored(second) == 20
    assert Night(NightSettings(home=tmp_path / "home", assets_dir=assets)).catalog.by_id()[DP8].est_time == 20

    third = _night_ran(tmp_path, assets, 3, 70)  # 90 s is x4.5 from the 20 in force: held, and 20 stays
    (e,) = [e for e in third.calibrate()[0] if e.test_id == DP8]
    assert (e.current, e.in_force, e.proposed, e.held) == (3, 20, 20, 90)
    assert "moves the calibrated est_time in force 20 s by x4.5" in e.reason
    assert _stored(third) == 20
    (row,) = [r for r in csv.DictReader(io.StringIO(third.state.get(third.calibration_keys()["evidence"])))
              if r["test_id"] == DP8]
    assert (row["current_est_time"], row["in_force_est_time"], row["proposed_est_time"], row["held_est_time"]) == (
        "3", "20", "20", "90")


def test_a_corrupt_estimates_file_does_not_stop_the_calibration_that_writes_it_again(tmp_path):
    _, assets = copied_example(tmp_path)
    night = _night_ran(tmp_path, assets, 1, 6.6)
    night.state.put(night.calibration_keys()["estimates"], "{half a file")
    night.calibrate()  # judged from the registered 3 s: x3.3 applies
    assert _stored(night) == 10


GRPO = "tests/e2e/megatron/test_grpo_math.py"  # registered est_time 30 s


def _calibrated_down(tmp_path, assets, in_force: int, runs: list[tuple[float, str, float]]) -> Night:
    """A night after the last calibration put GRPO's est_time at ``in_force`` s; ``runs``: its history
    as (days ago, outcome, elapsed)."""
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets), run_id="run9")
    grpo = night.registered.by_id()[GRPO]
    night.state.put(night.calibration_keys()["estimates"], json.dumps(
        {GRPO: {"est_time": in_force, "sha256": grpo.sha256, "hardware": grpo.hardware}}))
    assert night.catalog.by_id()[GRPO].est_time == in_force
    now = datetime.now(UTC)
    FileHistoryStore(tmp_path / "home" / "history.sqlite").append([Sample(
        test_id=GRPO, hardware=grpo.hardware, sha256=grpo.sha256, outcome=outcome, elapsed_s=elapsed,
        capped=outcome == "timed_out", started_at=(now - timedelta(days=ago)).isoformat(), run_id=f"r{i}",
        source=f"r{i}.log") for i, (ago, outcome, elapsed) in enumerate(runs)])
    return night


def _planned(tmp_path, assets) -> int:
    return Night(NightSettings(home=tmp_path / "home", assets_dir=assets)).catalog.by_id()[GRPO].est_time


def test_an_est_time_in_force_without_a_pass_in_the_window_goes_back_to_the_registered_one(tmp_path):
    """Calibrated down to 10 s by passes now older than p90's 21 days, and killed at the timeout every
    night since: the estimates entry is dropped and the next night plans the registered 30 s."""
    _, assets = copied_example(tmp_path)
    repos = assets / "repos.yaml"
    repos.write_text(repos.read_text().replace("calibration: {policy: bucket125}", "calibration: {policy: p90}"))
    night = _calibrated_down(tmp_path, assets, 10, [(40 + i, "passed", 8) for i in range(5)]
                             + [(i, "timed_out", 60) for i in (1, 2, 3)])
    (e,) = [e for e in night.calibrate()[0] if e.test_id == GRPO]
    assert (e.proposed, e.in_force) == (30, None), e.reason
    assert "no passing sample in the last 21 days; back to the registered est_time 30 s" in e.reason
    assert GRPO not in json.loads(night.state.get(night.calibration_keys()["estimates"]))
    assert _planned(tmp_path, assets) == 30


def test_a_timeout_kill_releases_a_held_est_time_in_force_below_the_registered_one(tmp_path):
    """In force 5 s; passes of 20 s proposed 30 s, held (x6); then the timeout killed it: the next
    night plans the registered 30 s, a step from 5 the guard does not hold."""
    _, assets = copied_example(tmp_path)
    night = _calibrated_down(tmp_path, assets, 5, [(4, "passed", 20), (3, "passed", 20), (1, "timed_out", 60)])
    (e,) = [e for e in night.calibrate()[0] if e.test_id == GRPO]
    assert (e.proposed, e.held, e.in_force) == (30, None, None), e.reason
    assert "the newest run was killed at the timeout after 60 s" in e.reason
    assert json.loads(night.state.get(night.calibration_keys()["estimates"]))[GRPO]["est_time"] == 30
    assert _planned(tmp_path, assets) == 30
