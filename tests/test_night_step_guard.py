"""Two nights' calibrations in a row: the step guard judges from the est_time in force (the last
calibration's), and a held proposal keeps that estimate, never the registered one."""

from __future__ import annotations

import csv
import io
import json

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

    second = _night_ran(tmp_path, assets, 2, 8.43)
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
