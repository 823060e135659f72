"""The estimates file a calibration wrote: a bad entry is left out with where it is, the rest is used."""

from __future__ import annotations

import json

import pytest

from pipelines.night import checked_estimates

SHA = "0" * 64


def _check(data: dict):
    text = json.dumps(data, indent=1)
    return checked_estimates(data, text, "est.json")


def test_well_formed_entries_are_kept_as_written():
    good, bad = _check({"t": {"est_time": 120, "sha256": SHA, "hardware": "h200"}})
    assert good == {"t": {"est_time": 120, "sha256": SHA, "hardware": "h200"}} and bad == []


@pytest.mark.parametrize(("est", "shown"), [(True, "True"), (-1, "-1"), (10**12, "1000000000000"),
                                            (None, "None"), (1.5, "1.5")])
def test_an_est_time_that_cannot_set_a_timeout_is_left_out(est, shown):
    good, bad = _check({"ok": {"est_time": 60.0, "sha256": SHA}, "t": {"est_time": est, "sha256": SHA}})
    assert good == {"ok": {"est_time": 60, "sha256": SHA}}
    assert [str(p) for p in bad] == [f"est.json:7: estimates['t'].est_time: expected whole seconds from 0 to 86400, "
                                     f"got {shown}; the test plans with its registered est_time; the next calibration "
                                     "rewrites the entry (or delete the file)"]


def test_an_entry_without_a_file_digest_is_left_out():
    good, bad = _check({"t": {"est_time": 60}})
    assert good == {}
    assert str(bad[0]).startswith("est.json:2: estimates['t'].sha256: expected the test file's sha256 as text, got None")


@pytest.mark.parametrize(("hardware", "shown"), [(5, "5"), (None, "None"), (["h200"], "['h200']")])
def test_a_hardware_that_is_not_text_is_left_out_with_where_it_is(hardware, shown):
    """It was ignored without a word (it matches no test's hardware): the same located warning as any bad entry."""
    good, bad = _check({"ok": {"est_time": 60, "sha256": SHA, "hardware": "h200"},
                        "t": {"est_time": 60, "sha256": SHA, "hardware": hardware}})
    assert good == {"ok": {"est_time": 60, "sha256": SHA, "hardware": "h200"}}
    assert [str(p) for p in bad] == [f"est.json:10: estimates['t'].hardware: expected the suite's hardware as text "
                                     f"(e.g. h200), got {shown}; the test plans with its registered est_time; the "
                                     "next calibration rewrites the entry (or delete the file)"]


def test_a_cut_off_estimates_file_is_named_at_the_line_where_its_json_breaks(tmp_path):
    """A file cut short (a full disk, a killed writer) breaks far from line 1: the error says where."""
    from pipelines.core.model import CatalogError
    from pipelines.night import Night, NightSettings
    from tests.support.assets import example_assets

    night = Night(NightSettings(home=tmp_path / "home", assets_dir=example_assets(tmp_path / "assets")))
    key = night.calibration_keys()["estimates"]
    text = json.dumps({f"tests/t{i}.py": {"est_time": 60, "sha256": SHA} for i in range(5)}, indent=1)
    night.state.put(key, text[:120])
    with pytest.raises(CatalogError) as exc:
        night.catalog  # noqa: B018 - loading it reads the estimates
    [problem] = exc.value.problems
    assert problem.line == text[:120].count("\n") + 1 > 1 and problem.field == "estimates"
