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
    assert launch_reason({"dagster/backfill": "tkvmoeei"}) == "backfill tkvmoeei"
    assert launch_reason({}) == "launched from the UI or Dagster's command line"


@pytest.mark.slow
def test_the_calibration_run_judges_near_timeout_with_the_floor_the_night_it_follows_ran_with(tmp_path):
    """`nightly run --timeout-floor 10` (minirl's own floor: 60 s): the calibration run that follows it has no
    override, and judges with the 10 the night's record keeps: its check, its metadata and its report agree."""
    from pipelines.core.model import Sample
    from pipelines.definitions import build_definitions
    from pipelines.defs.keys import TAG_SOURCE_RUN
    from pipelines.night import Night, NightSettings

    assets, home = example_assets(tmp_path / "assets"), tmp_path / "home"
    sft = "tests/e2e/fsdp/test_fsdp_sft_chat.py"  # est_time=8: max(10, 10) = 10 s (tonight: a calibrated 24, 30 s)
    night = Night(NightSettings(home=home, assets_dir=assets))
    night.history.append([Sample(sft, "h200", "", "passed", 9.5, "2026-11-06T15:00:00+00:00", run_id="r1")])
    record = json.dumps({"night": "2026-12-01T150000Z-r1", "run_id": "r1", "repo": "minirl", "selected": [sft], "timeout_floor_s": 10,
                         "attempts": [{"test_id": sft, "outcome": "passed", "elapsed_s": 9.5, "timeout_s": 30,
                                       "started_at": "2026-11-06T15:00:00+00:00"}]})
    for key in ("runs/r1.json", "nights/2026-12-01T150000Z-r1.json"):
        night.state.put(key, record)
    defs = build_definitions(nightly=NightlyResource(home=str(home), assets_dir=str(assets)))
    with dg.instance_for_test() as instance:
        run = defs.resolve_job_def("calibration").execute_in_process(instance=instance, tags={TAG_SOURCE_RUN: "r1"})
    check = next(ev for ev in run.get_asset_check_evaluations() if ev.check_name == "no_test_near_timeout")
    assert not check.passed and "9.5 s of its 10 s timeout (95%)" in check.metadata["tests"].value
    [calibrated] = run.asset_materializations_for_node("calibrated_estimates")
    assert calibrated.metadata["near_timeout"].value == 1
    assert "of its 10 s timeout" in (home / "reports" / "2026-12-01T150000Z-r1.html").read_text()  # not only tonight's 30 s


def test_a_quarantined_failure_the_nights_verdict_does_not_excuse_fails_its_check_when_the_night_ends(capsys):
    """On a bad node a quarantined test's failure fails the night (pipelines.core.flaky.night_verdict): its
    result as the attempt ends says so only pending the verdict, and the run reports it again once known."""
    from pipelines.core.model import Attempt, Test
    from pipelines.core.runset import RunSelection
    from pipelines.defs.test_runs import _dagster_events, _Reporter
    from pipelines.execute import Finished, NightDone

    q = Attempt("tests/q.py", "failed", 5.0, "t", node="n0", exit_code=1, reason="test failure (exit 1)")
    ok = Attempt("tests/ok.py", "failed", 5.0, "t", node="n1", exit_code=1, reason="test failure (exit 1)")
    tests = {t: Test(t, t, "cuda", "", 1, 10) for t in ("tests/q.py", "tests/ok.py")}
    summary = {"predicted_makespan_s": 1.0, "actual_makespan_s": 1.0,
               "verdict": {"ok": False, "failed": ["tests/q.py"], "excused_quarantined": ["tests/ok.py"],
                           "infra": [], "bad_nodes": ["n0"], "interrupted": []}}
    night = SimpleNamespace(night="n", run_id="r", state=SimpleNamespace(uri=lambda key: key))
    with dg.instance_for_test() as instance:  # the step's instance: where each check finds its materialization
        context = SimpleNamespace(log=SimpleNamespace(info=lambda m: None, warning=lambda m: None),
                                  instance=instance, run=SimpleNamespace(run_id="r"))
        events = [Finished(a, tests[a.test_id], quarantined=True) for a in (q, ok)] + [NightDone(summary)]
        checks = [e for e in _dagster_events(_Reporter(context, night, RunSelection(), tests), iter(events))
                  if isinstance(e, dg.AssetCheckEvaluation)]
    said = [(c.partition, c.severity, c.description) for c in checks]
    assert [(p, s) for p, s, _ in said] == [("tests/q.py", dg.AssetCheckSeverity.WARN),
                                           ("tests/ok.py", dg.AssetCheckSeverity.WARN),
                                           ("tests/q.py", dg.AssetCheckSeverity.ERROR)], said
    assert all("does not fail the night unless its node turns out bad" in d for _, _, d in said[:2])
    assert said[2][2].endswith("not excused by the night's verdict (its node n0 was bad): it fails the night")
