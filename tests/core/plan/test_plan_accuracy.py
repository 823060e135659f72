"""The prediction error over recent nights: what the report shows next to tonight's prediction."""

from __future__ import annotations

import math

import pytest

from pipelines.core.model import Assignment, Plan
from pipelines.core.plan.accuracy import (
    NightPrediction,
    error_lines,
    night_record,
    prediction_error,
    record_from_json,
    record_to_json,
)


def night(name: str, median: float, p90: float, actual: float, *tests: tuple[str, float, float]) -> NightPrediction:
    return NightPrediction(name, median, p90, actual, tests)


def test_the_makespan_error_is_signed_and_absolute_relative_to_the_actual():
    e = prediction_error([night("2026-11-01", 110, 130, 100), night("2026-11-02", 90, 95, 100)])
    assert e.nights == 2
    assert e.makespan_bias == pytest.approx(0.0)
    assert e.makespan_error == pytest.approx(0.1)
    assert e.within_p90 == 1


def test_only_the_most_recent_nights_with_a_prediction_count():
    records = [night("2026-11-03", 100, 120, 100), night("2026-11-01", 300, 320, 100),
               night("2026-11-02", 0, 0, 100), night("2026-11-04", 150, 160, 100)]
    e = prediction_error(records, recent=2)
    assert (e.nights, e.makespan_bias) == (2, pytest.approx(0.25))


def test_per_test_errors_rank_the_worst_predicted_tests_first():
    e = prediction_error([
        night("2026-11-01", 100, 120, 100, ("good", 100, 100), ("bad", 100, 200)),
        night("2026-11-02", 100, 120, 100, ("good", 110, 100), ("bad", 100, 50)),
    ])
    assert e.tests == 2
    assert [(tid, n) for tid, _err, n in e.worst] == [("bad", 2), ("good", 2)]
    assert e.worst[0][1] == pytest.approx(1.0)  # off by a factor 2 both nights
    # median of |log ratio| over all four runs: between good's 0 and 10%, and bad's factor 2
    assert e.test_error == pytest.approx(math.exp((math.log(1.1) + math.log(2)) / 2) - 1)


def test_no_night_with_a_prediction_says_so():
    assert error_lines(prediction_error([night("2026-11-01", 0, 0, 100)])) == [
        "prediction error: no night with a prediction yet"]


def test_the_report_lines_name_the_error_the_p90_cover_and_the_worst_tests():
    lines = error_lines(prediction_error([night("2026-11-01", 120, 130, 100, ("a", 50, 100))]))
    assert lines == [
        "prediction error over the last 1 night(s): makespan off by 20% on average (long by 20%), within the p90 on 1/1",
        "per test: typical error 100% over 1 test(s); worst: a 100% (1 run)",
    ]


def test_a_night_record_takes_the_plans_predictions_and_the_passed_tests_elapsed():
    plan = Plan((Assignment("a", "h200", 0, 0.0, 80.0, 8, 1800), Assignment("b", "h200", 0, 80.0, 120.0, 4, 1800)),
                120.0, 80.0, predicted_median_s=90.0, predicted_p90_s=120.0,
                expected=(("a", 80.0, 110.0, "history"), ("b", 40.0, 50.0, "fallback")))
    rec = night_record("2026-11-05", plan, 95.0, {"a": 85.0, "b": 30.0, "unknown": 10.0})
    # each test's source; b's 40 s x 4 GPUs of the 800 planned GPU-seconds were est_time / 1.25
    assert rec == NightPrediction("2026-11-05", 90.0, 120.0, 95.0, (("a", 80.0, 85.0), ("b", 40.0, 30.0)),
                                  (("a", "history"), ("b", "fallback")), 0.2)


def test_a_record_survives_the_night_summary_round_trip():
    rec = night("2026-11-01", 90.5, 120.0, 95.0, ("a", 80.0, 85.5))
    assert record_from_json(record_to_json(rec), "summary.json:1") == rec


def test_a_damaged_summary_entry_is_located_and_says_how_to_fix_it():
    entry = record_to_json(night("2026-11-01", 90, 120, 95, ("a", 80, 85)))
    entry["tests"][0]["actual_s"] = "soon"
    with pytest.raises(ValueError, match=r"^summary.json:1: prediction.tests\[0\].actual_s: 'soon' is not a number "
                                         r"of seconds >= 0; rewrite the night's summary"):
        record_from_json(entry, "summary.json:1")
    with pytest.raises(ValueError, match=r"summary.json:1: prediction.predicted_median_s: None is not a number"):
        record_from_json({"night": "x", "actual_s": 1, "predicted_p90_s": 1}, "summary.json:1")


def test_recorded_predictions_keep_whole_nights_of_the_deployment_without_extra_env_and_name_damaged_entries():
    from pipelines.core.plan.accuracy import recorded_predictions

    entry = record_to_json(night("2026-11-01", 90, 120, 95))
    summaries = [
        {"night": "2026-11-01", "deployment": "local", "status": "finished", "prediction": entry},
        {"night": "2026-11-02", "deployment": "k8s", "prediction": {**entry, "night": "2026-11-02"}},
        {"night": "2026-11-03", "deployment": "local", "status": "running", "prediction": entry},
        {"night": "2026-11-04", "deployment": "local", "interrupted": True, "prediction": entry},
        {"night": "2026-11-05", "deployment": "local", "prediction": ["not", "an", "object"]},
        {"night": "2026-11-06", "deployment": "local", "prediction": {**entry, "tests": 7}},
        {"night": "2026-11-07", "deployment": "local"},  # recorded before predictions were kept
        # failure injection (nightly run --env MINIRL_HANG=...): no evidence of what the plan predicted
        {"night": "2026-11-08", "deployment": "local", "env": "MINIRL_HANG#3f2a9c1b0d4e",
         "prediction": {**entry, "night": "2026-11-08"}},
    ]
    records, problems = recorded_predictions(summaries, "local")
    assert [r.night for r in records] == ["2026-11-01"]
    assert [p.split(": ")[:2] for p in problems] == [["nights/2026-11-05.json:1", "prediction"],
                                                     ["nights/2026-11-06.json:1", "prediction.tests"]]
    assert all(p.endswith("; left out of the prediction error") for p in problems)
    assert [r.night for r in recorded_predictions(summaries, None)[0]] == ["2026-11-01", "2026-11-02"]


def test_a_caller_that_knows_the_file_gives_each_damaged_field_its_own_place():
    from pipelines.core.plan.accuracy import recorded_predictions

    entry = record_to_json(night("2026-11-01", 90, 120, 95, ("a", 80, 85)))
    entry["tests"][0]["predicted_s"] = -1
    asked = []

    def locate(summary):
        return lambda path: asked.append(path) or f"s3://b/n/nights/{summary['night']}.json:{len(path) * 10}"

    _, problems = recorded_predictions([{"night": "2026-11-01", "prediction": entry}], locate=locate)
    assert asked == [("prediction", "tests", 0, "predicted_s")]
    assert problems[0].startswith("s3://b/n/nights/2026-11-01.json:40: prediction.tests[0].predicted_s: -1 is not")


def test_predictions_from_est_time_are_left_out_and_said_so():
    """Night 1 of the example: every test new (est_time / 1.25), 64 s predicted against 28 s; it once kept
    the makespan error at 72 % for two weeks, and one fallback prediction topped the per-test list at 306 %."""
    first = NightPrediction("2026-11-01", 64.0, 90.0, 28.0, (("a", 20.0, 5.0), ("b", 10.0, 9.0)),
                            (("a", "fallback"), ("b", "fallback")), 1.0)
    second = NightPrediction("2026-11-02", 30.0, 36.0, 28.0, (("a", 5.5, 5.0), ("b", 9.0, 9.0)),
                             (("a", "history"), ("b", "timeouts")), 0.0)
    e = prediction_error([first, second])
    assert (e.nights, e.left_out, e.fallback_tests, e.tests) == (1, 1, 2, 2)
    assert e.makespan_bias == pytest.approx(2 / 28)
    assert e.worst[0] == ("a", pytest.approx(0.1), 1)  # not the 300 % of the est_time guess
    assert error_lines(e) == [
        "prediction error over the last 1 night(s): makespan off by 7% on average (long by 7%), within the p90 on "
        "1/1; 1 night(s) left out: planned mostly on est_time / 1.25 (more than half of their GPU-seconds from tests "
        "without a passing run yet), which measures est_time's padding, not the prediction",
        "per test: typical error 5% over 2 test(s); worst: a 10% (1 run), b 0% (1 run); 2 prediction(s) from "
        "est_time / 1.25 left out"]
    assert error_lines(prediction_error([first]))[0].startswith(
        "prediction error: no night planned from history yet; 1 night(s) left out: planned mostly on est_time / 1.25")
    # a record from before the sources were kept counts as it did
    old = record_from_json({k: v for k, v in record_to_json(first).items() if k != "fallback_share"}
                           | {"tests": [{"test_id": "a", "predicted_s": 20.0, "actual_s": 5.0}]}, "n.json:1")
    assert (prediction_error([old]).nights, prediction_error([old]).tests) == (1, 1)
    assert record_from_json(record_to_json(second), "n.json:1") == second
