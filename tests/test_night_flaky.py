"""The night's flaky states are of its own repo's tests: every repo's nights share one history store."""

from __future__ import annotations

from pipelines.core.model import Sample
from pipelines.night import Night, NightSettings
from tests.support.assets import copied_example


def _flaky_runs(test_id: str) -> list[Sample]:
    """Three nights where the test failed and then passed on retry: quarantined by the default rules."""
    out = []
    for day in (1, 2, 3):
        for attempt, outcome in ((1, "failed"), (2, "passed")):
            out.append(Sample(test_id, "h200", "0" * 64, outcome, 10.0, f"2026-11-0{day}T01:0{attempt}:00Z",
                              node="h200-a", run_id=f"run-{day}", attempt=attempt))
    return out


def test_another_repos_flaky_test_is_not_in_this_repos_states(tmp_path):
    _, assets = copied_example(tmp_path)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets))
    mine = night.catalog.tests[0].id
    night.history.append([*_flaky_runs(mine), *_flaky_runs("test/registered/of_another_repo.py")])
    states = night.flaky_states()
    assert states[mine].state == "quarantined"
    assert "test/registered/of_another_repo.py" not in states
