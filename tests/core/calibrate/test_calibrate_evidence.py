"""Evidence CSV, drift and near-timeout lists say what changed and what is at risk."""

from __future__ import annotations

import csv
import dataclasses

from pipelines.core.calibrate import drift, evidence_rows, near_timeout, write_evidence_csv
from pipelines.core.model import Estimate, Sample
from tests.conftest import make_test


def est(current: int, proposed: int, used: int = 3, tid: str = "tests/e2e/test_a.py") -> Estimate:
    return Estimate(tid, "h200", current, proposed, used, "why", max_s=957.0, p90_s=957.0, median_s=957.0,
                    sources=("n1.log:6", "n2.log:9"))


def test_the_evidence_csv_has_one_row_per_test_with_its_numbers_and_sources(tmp_path):
    path = tmp_path / "out" / "evidence.csv"
    write_evidence_csv(path, [est(3600, 1300), est(600, 600, used=0, tid="tests/e2e/test_b.py")])
    rows = list(csv.DictReader(path.open()))
    assert rows == evidence_rows([est(3600, 1300), est(600, 600, used=0, tid="tests/e2e/test_b.py")])
    assert rows[0]["current_est_time"] == "3600" and rows[0]["proposed_est_time"] == "1300"
    assert rows[0]["delta"] == "-2300" and rows[0]["max_s"] == "957"
    assert rows[0]["sources"] == "n1.log:6\nn2.log:9" and rows[1]["samples_used"] == "0"
    assert [p.name for p in path.parent.iterdir()] == ["evidence.csv"]  # no temp file left behind


def test_the_samples_left_out_split_back_one_per_line_though_a_step_name_holds_a_semicolon(tmp_path):
    """GitHub names a step by its command (``Run cd test; python3 ...``): joined with ``; `` the left-out
    samples could not be told apart; one per line, as the sources are, they come back as written, and the
    report reading the evidence gets them whole."""
    from pipelines.core.calibrate.evidence import split_sources
    from pipelines.reporting.inputs import estimates_from_evidence

    left = ("logs.zip:3_Run cd test; python3 run_suite.py.txt:40: elapsed 1 s is far below the test's own history",
            "n3.log:2: elapsed 9000 s is past the ceiling")
    e = dataclasses.replace(est(600, 1300), outliers=left)
    path = tmp_path / "evidence.csv"
    write_evidence_csv(path, [e])
    [row] = csv.DictReader(path.open())
    assert split_sources(row["left_out"]) == left
    assert estimates_from_evidence(path.read_text())[0].outliers == left


def test_drift_needs_both_30_seconds_and_30_percent():
    cases = [est(100, 129), est(100, 131), est(1000, 1290), est(1000, 1300), est(3600, 1300), est(40, 10),
             est(600, 1200, used=0)]
    assert [(e.current, e.proposed) for e in drift(cases)] == [(100, 131), (1000, 1300), (3600, 1300), (40, 10)]


def sample(elapsed: float, started: str, **kw) -> Sample:
    return Sample(**{**dict(test_id="tests/e2e/test_a.py", hardware="h200", sha256="0" * 64, outcome="passed",
                            elapsed_s=elapsed, started_at=started), **kw})


def test_a_test_whose_last_run_used_over_90_percent_of_its_timeout_is_listed():
    t = make_test(est_time=1200)  # timeout max(1800, 1500) = 1800
    older_slow = sample(1750, "2026-12-01T00:00:00Z")
    newer_fast = sample(900, "2026-12-02T00:00:00Z")
    assert near_timeout([t], [newer_fast, older_slow], 1800, 1.25) == []
    hit = near_timeout([t], [older_slow, newer_fast, sample(1625, "2026-12-03T00:00:00Z"),
                             sample(5, "2026-12-04T00:00:00Z", outcome="infra_error")], 1800, 1.25)
    assert [str(h) for h in hit] == ["tests/e2e/test_a.py: last run passed after 1625 s of its 1800 s timeout (90%)"]


def test_a_stale_high_est_time_does_not_hide_a_run_close_to_the_floor_once_recalibrated():
    runs = [sample(1827, "2026-12-01T00:00:00Z")]
    assert near_timeout([make_test(est_time=3600)], runs, 1800, 1.25) == []  # timeout 4500
    assert len(near_timeout([make_test(est_time=1300)], runs, 1800, 1.25)) == 1  # timeout 1800


def test_the_timeout_judged_is_the_one_the_proposal_gives_next_night():
    t = make_test(est_time=3600)
    runs = [sample(1700, "2026-12-01T00:00:00Z")]
    assert near_timeout([t], runs, 1800, 1.25) == []  # est 3600: 4500 s
    hit = near_timeout([t], runs, 1800, 1.25, estimates=[est(3600, 1000)])  # max(1800, 1250) = 1800 s
    assert [str(h) for h in hit] == ["tests/e2e/test_a.py: last run passed after 1700 s of its 1800 s timeout (94%)"]
    assert near_timeout([t], runs, 1800, 1.25, estimates=[est(3600, 1000, tid="tests/e2e/test_b.py")]) == []


def test_a_pass_past_the_timeout_its_file_gives_the_frameworks_runner_is_listed_though_calibration_raised_it():
    """The night ran with a calibrated est_time above the file's: the framework's own runner (PR CI) still
    kills the test at max(floor, 1.25 x the file's est_time) until the patch is merged."""
    t = make_test(est_time=4)  # the file: timeout max(1, 5) = 5 s
    runs = [sample(9.2, "2026-12-01T00:00:00Z")]
    hit = near_timeout([t], runs, 1, 1.25, estimates=[dataclasses.replace(est(4, 10), in_force=10)])  # 12 s
    assert [str(h) for h in hit] == [
        "tests/e2e/test_a.py: last run passed after 9.2 s of its 5 s timeout (184%), the one its file's est_time=4 "
        "gives the framework's own runner until the est_time patch is merged (the nights run with the calibrated 10)"]
    # no calibrated est_time in force (the night ran with the file's 4): the proposal alone would raise it
    assert str(near_timeout([t], runs, 1, 1.25, estimates=[est(4, 10)])[0]).endswith("until the est_time patch is merged")
    assert near_timeout([dataclasses.replace(t, fmt="template", est_source="default")], runs, 1, 1.25,
                        estimates=[est(4, 10)]) == []  # a template registers no timeout
    assert near_timeout([t], [sample(4.0, "2026-12-01T00:00:00Z")], 1, 1.25, estimates=[est(4, 10)]) == []


def test_the_framework_runner_kills_at_its_own_floor_not_the_one_the_night_ran_with():
    """`nightly run --timeout-floor 20` on a repo whose floor (the framework's timeout_per_file) is 60: the
    night's timeout is max(20, 1.25 x 24) = 30 s; the framework's runner gives the file's est_time=8
    max(60, 10) = 60 s, not 20 s, so an 18.2 s pass is near neither."""
    t = make_test(est_time=8)
    runs = [sample(18.2, "2026-12-01T00:00:00Z")]
    assert near_timeout([t], runs, 20, 1.25, estimates=[est(8, 24)], runner_floor=60) == []
    [hit] = near_timeout([t], runs, 20, 1.25, estimates=[est(8, 16)], runner_floor=60)  # max(20, 20) = 20 s
    assert str(hit) == "tests/e2e/test_a.py: last run passed after 18.2 s of its 20 s timeout (91%)"
    # the runner's floor is the night's unless given (`nightly calibrate`: one floor, the repo's)
    assert near_timeout([t], runs, 20, 1.25, estimates=[est(8, 24)])[0].file_est_time == 8


def test_a_night_run_with_extra_environment_is_never_the_last_run_near_the_timeout():
    """A failure-injection night (`nightly run --env MINIRL_HANG=...`) was killed at its timeout on purpose:
    the test's last plain run decides, as calibration leaves those nights out too (policies.plain)."""
    t = make_test(est_time=1300)  # timeout max(1800, 1625) = 1800
    runs = [sample(960, "2026-12-01T00:00:00Z"),
            sample(1800, "2026-12-02T00:00:00Z", outcome="timed_out", capped=True, env="MINIRL_HANG#1f2e3d4c5b6a")]
    assert near_timeout([t], runs, 1800, 1.25) == []
    slow = sample(1700, "2026-12-03T00:00:00Z")  # a plain night after it still counts
    assert [h.elapsed_s for h in near_timeout([t], [*runs, slow], 1800, 1.25)] == [1700]
    assert near_timeout([t], runs[1:], 1800, 1.25) == []  # only injected nights: no last run to judge


def test_every_near_timeout_line_gives_its_seconds_in_one_format():
    """`nightly calibrate` and `nightly run` said `after 10.022 s` where the page said `after 10 s`: one format
    for every run, to a tenth without a trailing .0 (whole seconds said "10 s of its 10 s timeout (95%)")."""
    from pipelines.core.calibrate.evidence import NearTimeout

    lines = [str(NearTimeout("tests/e2e/test_a.py", "h200", elapsed, 11, "passed", "2026-12-01T00:00:00Z"))
             for elapsed in (10.022, 10.0, 10.96, 9.5)]
    assert [line.split(" after ", 1)[1].split(" of ", 1)[0] for line in lines] == ["10 s", "10 s", "11 s", "9.5 s"]
