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
