"""test_passed: one rule for the result a run reports inline and for the check run on its own."""

from __future__ import annotations

import json
from types import SimpleNamespace

import dagster as dg
import pytest

from pipelines.defs.metadata import check_verdict
from pipelines.defs.resources import NightlyResource
from pipelines.defs.test_runs import _excused
from tests.support.assets import example_assets

T = "tests/e2e/lora/test_lora_math.py"


@pytest.mark.parametrize("outcome, quarantined, passed, severity, kind", [
    ("passed", False, True, dg.AssetCheckSeverity.ERROR, "test"),
    ("failed", False, False, dg.AssetCheckSeverity.ERROR, "test"),
    ("timed_out", True, False, dg.AssetCheckSeverity.WARN, "quarantined"),
    ("infra_error", False, False, dg.AssetCheckSeverity.WARN, "infra"),
    ("interrupted", True, False, dg.AssetCheckSeverity.WARN, "infra"),
])
def test_failures_fail_infra_and_excused_failures_warn(outcome, quarantined, passed, severity, kind):
    ok, sev, description, k = check_verdict(outcome, "", quarantined)
    assert (ok, sev, k) == (passed, severity, kind)
    assert ("quarantined as flaky" in description) == (kind == "quarantined")


def test_the_check_run_alone_reads_whether_the_night_excused_the_failure_from_its_record(tmp_path):
    home = tmp_path / "home"
    nightly = NightlyResource(home=str(home), assets_dir=str(example_assets(tmp_path / "assets")))
    (home / "runs").mkdir(parents=True)
    (home / "runs" / "r1.json").write_text(json.dumps({"verdict": {"ok": True, "failed": [], "excused_quarantined": [T]}}))
    (home / "runs" / "r2.json").write_text(json.dumps({"verdict": {"ok": False, "failed": [T], "excused_quarantined": []}}))
    assert _excused(nightly, SimpleNamespace(run_id="r1"), T)
    assert not _excused(nightly, SimpleNamespace(run_id="r2"), T)
    assert not _excused(nightly, SimpleNamespace(run_id="gone"), T), "no record: the plain rule"


def test_a_run_no_schedule_sensor_or_cli_named_says_how_it_was_launched():
    from pipelines.defs.tags import launch_reason

    assert launch_reason({"dagster/parent_run_id": "abc"}) == "re-execution of run abc"
    # a UI re-execution copies the parent's tags: its reason says both
    assert launch_reason({"dagster/parent_run_id": "abc", "nightly/reason": "schedule nightly_schedule"}) == \
        "re-execution of run abc (schedule nightly_schedule)"
    assert launch_reason({"dagster/backfill": "tkvmoeei"}) == "backfill tkvmoeei (UI)"
    assert launch_reason({}) == "launched from the UI or Dagster's command line"
