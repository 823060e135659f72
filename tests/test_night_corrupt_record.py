"""A run's record cut short (a full disk, a killed write) is named at the line JSON stopped at, with
the intact copy the night wrote beside it to restore it from: a past night cannot be run again."""

from __future__ import annotations

import json

import pytest

from pipelines.core.model import CatalogError
from pipelines.night import Night, NightSettings

RUN = "0f3c9a2e-77b1-4d0a-9e21-5c1d2b3a4f60"
NIGHT = "2026-12-04T165637Z-0f3c9a2e"  # as Night names it: started when, and its run id's first 8 characters
ATTEMPT = {"test_id": "tests/e2e/test_a.py", "outcome": "passed", "elapsed_s": 3.0,
           "started_at": "2026-12-04T16:57:00+00:00"}


def cut_short(text: str) -> tuple[str, int]:
    """The record cut inside a string on a line past the first, and that line."""
    at = text.index('"started_at"') + 5
    return text[:at], text[:at].count("\n") + 1


@pytest.fixture
def night(tmp_path, monkeypatch):
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    (tmp_path / "fw" / "tests").mkdir(parents=True)
    night = Night(NightSettings(repo=str(tmp_path / "fw")), run_id=RUN)
    night.write_summary({"night": NIGHT, "run_id": RUN, "repo": "fw", "attempts": [ATTEMPT], "status": "passed"})
    return night


def test_a_run_record_cut_short_names_its_line_and_the_intact_night_copy_to_restore_it_from(night):
    key = f"runs/{RUN}.json"
    text, line = cut_short(night.state.get(key))
    night.state.put(key, text)
    with pytest.raises(CatalogError) as err:
        night.recorded_repo(RUN)  # the calibration after the night reads the run's repo from it
    said = str(err.value)
    assert line > 1 and said.startswith(f"{night.state.uri(key)}:{line}: summary: corrupt night record (Unterminated")
    assert (f"the same record is intact as {night.state.uri(f'nights/{NIGHT}.json')}: copy that over this file "
            f"to restore it (deleting this file instead loses run {RUN}'s record)") in said, said
    assert "the next run writes a new one" not in said


def test_with_every_copy_cut_short_it_says_so_and_what_deleting_loses(night):
    for key in (f"runs/{RUN}.json", f"nights/{NIGHT}.json", "nights/latest.json"):
        night.state.put(key, cut_short(night.state.get(key))[0])
    with pytest.raises(CatalogError) as err:
        night.summary(RUN)
    said = str(err.value)
    assert f"no intact copy of it was found (checked {night.state.uri(f'nights/{NIGHT}.json')}, " in said, said
    assert said.endswith(f"move it aside, keeping it for recovery: that loses run {RUN}'s record")


def test_a_latest_json_cut_short_is_only_a_copy_of_the_newest_night(night):
    night.state.put("nights/latest.json", cut_short(night.state.get("nights/latest.json"))[0])
    with pytest.raises(CatalogError) as err:
        night.summary()
    assert (f"it is only a copy of the newest night's record, which is intact as "
            f"{night.state.uri(f'nights/{NIGHT}.json')}: copy that over it") in str(err.value)
    assert json.loads(night.state.get(f"nights/{NIGHT}.json"))["run_id"] == RUN
