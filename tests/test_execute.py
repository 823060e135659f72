"""The night's record as pipelines.execute writes it."""

from __future__ import annotations

import json

from pipelines.core.runset import RunSelection, RunSet
from pipelines.execute import night_summary
from pipelines.launch.dispatch import DispatchResult
from pipelines.night import Night, NightSettings
from pipelines.reporting.inputs import parse_summary
from tests.support.assets import example_assets


def test_the_record_keeps_the_timeout_floor_the_night_ran_with(tmp_path):
    """Near timeout is judged with it afterwards (the report, the calibration run), not the repo's."""
    assets = example_assets(tmp_path / "assets")
    for floor, kept in ((20, 20), (None, 60)):  # --timeout-floor 20; none: minirl's own 60 s
        night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, timeout_floor_s=floor))
        summary = night_summary(night, RunSet(run=(), skipped=()), RunSelection(cadence="nightly"), night.plan([]),
                                DispatchResult(), [], [])
        assert parse_summary("n.json", json.dumps(summary))["timeout_floor_s"] == kept
