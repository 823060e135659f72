"""The morning-after report's sections, from a real-shaped night of the example.

Tonight (tests/reporting/nights.py): test_sft_math fails, test_lora_math hangs until its 60 s
timeout, test_grpo_math fails once then passes on retry; the image changed and everything runs
25 % slower than on the five nights before; last night test_backend_matrix failed.
"""

from __future__ import annotations

import json

import pytest

from pipelines.core.flaky import FlakyState, record, replay
from pipelines.core.model import Attempt, Test
from pipelines.core.report import build_report, markdown, night_rows, replaces_latest, table, to_json
from tests.reporting.nights import (
    BACKEND,
    ESTIMATES,
    FLOOR,
    GPU_SECONDS,
    GRPO,
    IMAGE_BEFORE,
    IMAGE_NOW,
    LORA,
    MAKESPAN,
    ROCM,
    SFT,
    SGLANG,
    SKIPPED,
    example_night,
    tid,
)


@pytest.fixture(scope="module")
def night(tmp_path_factory):
    return example_night(tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="module")
def report(night):
    return build_report(night.summary, night.previous, night.samples, night.tests, ESTIMATES,
                        log_tails=night.log_tails, uncovered=["test_backend_matrix.py: megatron x lora"],
                        timeout_floor_s=FLOOR)


def test_counts_every_selected_test_once_by_its_final_outcome(report):
    assert dict(report.counts) == {"passed": 7, "failed": 1, "timed_out": 1, "unplanned": 1, "skipped": 1}
    assert report.verdict == "FAILED: 2 test(s) failed"


def test_each_failure_is_classified_with_its_log_tail_and_a_link_to_the_full_log(report, night):
    by_id = {f.test_id: f for f in report.failures}
    assert list(by_id) == [tid(GRPO), tid(SFT), tid(LORA)]
    sft, lora, grpo = by_id[tid(SFT)], by_id[tid(LORA)], by_id[tid(GRPO)]
    assert (sft.classification, sft.new) == ("test failure (exit 1)", True)
    assert sft.log_tail.endswith("test_sft_math: failing on purpose because MINIRL_FAIL names it")
    assert sft.log_path.endswith("megatron_test_sft_math.py.attempt1.log") and sft.log_path in night.log_tails
    assert (lora.outcome, lora.classification) == ("timed_out", f"hang: killed at its {FLOOR} s timeout")
    assert "hanging on purpose" in lora.log_tail
    assert (grpo.outcome, grpo.attempts) == ("passed", 2)
    assert grpo.classification == "flaky: failed on attempt 1, passed on attempt 2"
    assert grpo.log_path.endswith("attempt1.log"), "the failed attempt's log is the one worth reading"


def test_a_clean_local_night_has_no_infra_outcomes_or_bad_nodes(report):
    assert (report.infra, report.bad_nodes) == ((), ())


def test_the_test_that_passed_on_retry_is_flaky_with_tonights_run_as_evidence(report, night):
    states = {s.test_id: s for s in report.flaky}
    grpo = states[tid(GRPO)]
    assert grpo.state == "flaky"
    assert [e.run_id for e in grpo.evidence] == [night.summary["run_id"]]


def test_gpu_hours_used_and_not_used_over_the_nights_makespan(report):
    u = report.usage
    # a record from before the night kept its pools: the GPUs its attempts' slots show, and it says so
    assert (u.gpus, u.makespan_s) == (8, MAKESPAN)
    assert u.source == ("inferred from the GPU slots used (the night's record does not say its pools' size: "
                        "written before it was kept)")
    assert u.used_gpu_h == pytest.approx(GPU_SECONDS / 3600)
    assert u.unused_gpu_h == pytest.approx((8 * MAKESPAN - GPU_SECONDS) / 3600)
    assert (u.gpu_wait_s, u.gpu_waits) == (None, 0)  # its attempts did not record their waits for GPUs
    assert dict(report.makespan) == {"predicted": 120.0, "predicted median": 118.0, "predicted p90": 131.0,
                                     "actual": MAKESPAN, "lower bound": 104.0,
                                     "lower bound (actual durations)": GPU_SECONDS / 8}  # 844 GPU-s on 8 GPUs


def test_gpu_capacity_is_the_pools_the_night_recorded_not_the_slots_it_used(night):
    """Three pools' worth of GPUs, only one node's slots used: capacity and idle hours are the pools'."""
    summary = {**night.summary, "pools": {"h200": {"nodes": 4, "gpus_per_node": 8}, "b200": {"nodes": 1, "gpus_per_node": 4}}}
    u = build_report(summary, tests=night.tests).usage
    assert (u.gpus, u.source) == (36, "the night's pools: h200 4 x 8, b200 1 x 4")
    assert u.unused_gpu_h == pytest.approx((36 * MAKESPAN - GPU_SECONDS) / 3600)
    assert dict(build_report(summary, tests=night.tests).makespan)["lower bound (actual durations)"] == 60.0


def test_the_gantt_has_every_attempt_on_its_node_from_the_first_start(report):
    bars = {(b.test_id, b.attempt): b for b in report.gantt}
    assert len(bars) == 10 and {b.node for b in bars.values()} == {"local-h200-0"}
    assert (bars[(tid(GRPO), 1)].start_s, bars[(tid(GRPO), 1)].outcome) == (0.0, "failed")
    assert (bars[(tid(GRPO), 2)].start_s, bars[(tid(GRPO), 2)].elapsed_s) == (5.0, 28.0)
    assert (bars[(tid(SGLANG), 1)].start_s, bars[(tid(SGLANG), 1)].gpus) == (87.0, 8)


def test_durations_are_shown_against_the_est_time_the_night_ran_with(report):
    rows = {r.test_id: r for r in report.rows}
    assert (rows[tid(SGLANG)].elapsed_s, rows[tid(SGLANG)].est_time) == (41.0, 12)
    assert (rows[tid(GRPO)].attempts, rows[tid(SKIPPED)].outcome, rows[tid(ROCM)].outcome) == (2, "skipped", "unplanned")


def test_drift_and_near_timeout_come_from_history(report):
    assert [(e.test_id, e.current, e.proposed) for e in report.drift] == [(tid(SGLANG), 12, 60)]
    assert [(n.test_id, n.elapsed_s, n.timeout_s) for n in report.near_timeout] == [(tid(LORA), 60.0, FLOOR)]


def test_trends_cover_the_last_nights_of_every_test_that_ran(report):
    trends = {t.test_id: t for t in report.trends}
    sglang = trends[tid(SGLANG)]
    assert [p.elapsed_s for p in sglang.points] == [32.8] * 5 + [41.0]
    assert sglang.change == pytest.approx(1.25)
    assert [p.outcome for p in trends[tid(LORA)].points][-2:] == ["passed", "timed_out"]
    assert tid(ROCM) not in trends


def test_what_changed_since_last_night_with_a_before_after_comparison_of_the_new_image(report, night):
    c = report.changes
    assert c.previous == night.previous[-1]["night"]
    assert c.new_failures == (tid(SFT), tid(LORA))
    assert (c.fixed, c.still_failing) == ((tid(BACKEND),), ())
    assert c.est_time == ((tid(GRPO), 40, 30),)
    assert c.environment == (("image_digest (h200)", IMAGE_BEFORE, IMAGE_NOW),)
    k = c.comparison
    assert (k.common, k.passed_before, k.passed_after) == (10, 8, 7)
    assert k.median_ratio == pytest.approx(1.25)


def test_uncovered_cells_and_notes_are_carried_as_given(report):
    assert report.uncovered == ("test_backend_matrix.py: megatron x lora",)
    assert report.notes == ("1 test skipped (disabled)",)
    assert dict(report.environment) == {"image_digest (h200)": IMAGE_NOW, "driver (h200)": "550.54.15",
                                        "spec (h200)": "sha256:d52e60f2e650"}


def test_a_quarantined_failure_is_excused_and_still_listed(night):
    doc = record(None, tid(SFT), "add", "alice", "issue #7", "2026-11-02T00:00:00+00:00")
    states = replay(night.samples, overrides=doc)
    r = build_report(night.summary, night.previous, night.samples, night.tests, states=states)
    assert r.excused == (tid(SFT),)
    assert r.verdict == "FAILED: 1 test(s) failed, 1 quarantined failure(s) excused"
    sft = next(f for f in r.failures if f.test_id == tid(SFT))
    assert sft.classification == "test failure (exit 1); quarantined, does not fail the night"



def test_a_quarantine_that_ended_as_the_night_started_is_no_known_flakiness(night):
    """The test file changed since it was quarantined: the night judged it afresh and its failure
    counts (the verdict's quarantine_ended), so it is a new failure, not 'already quarantined'."""
    from pipelines.core.flaky import night_verdict
    from pipelines.core.report import attempts_of

    held = {tid(SFT): FlakyState(tid(SFT), "quarantined", since="run-2026-11-02T150000Z", sha256="old")}
    failed = list(night_verdict(attempts_of(night.summary), {}).failed)
    recorded = {**night.summary, "verdict": {"ok": False, "failed": failed, "excused_quarantined": [], "infra": [],
                                             "bad_nodes": [], "interrupted": [], "quarantine_ended": [tid(SFT)]}}
    r = build_report(recorded, night.previous, night.samples, night.tests, at_start=held)
    sft = next(f for f in r.failures if f.test_id == tid(SFT))
    assert (sft.classification, sft.new, sft.state_going_in) == ("test failure (exit 1)", True, "")
    r = build_report({**recorded, "verdict": {**recorded["verdict"], "quarantine_ended": []}}, night.previous,
                     night.samples, night.tests, at_start=held)
    sft = next(f for f in r.failures if f.test_id == tid(SFT))
    assert (sft.classification, sft.new, sft.state_going_in) == (
        "test failure (exit 1); already quarantined going into the night (since run-2026-11-02T150000Z), "
        "not a new regression", False, "quarantined")

def attempt(test: str, outcome: str, node: str, reason: str = "") -> dict:
    return {"test_id": test, "outcome": outcome, "elapsed_s": 30.0, "started_at": "2026-11-06T15:00:00+00:00",
            "node": node, "reason": reason, "attempt": 1, "gpu_slots": [0]}


def test_infra_outcomes_and_bad_nodes_are_reported_and_never_excused():
    attempts = [attempt("tests/a.py", "infra_error", "h200-c", "gpu_unusable")]
    attempts += [attempt(f"tests/t{i}.py", "passed", "h200-a") for i in range(3)]
    summary = {"night": "n", "selected": ["tests/a.py", "tests/t0.py", "tests/t1.py", "tests/t2.py"], "attempts": attempts}
    r = build_report(summary, states={"tests/a.py": FlakyState("tests/a.py", "quarantined")})
    [infra] = r.infra
    assert infra.classification == "infra: gpu_unusable on bad node h200-c"
    assert [n.node for n in r.bad_nodes] == ["h200-c"]
    assert r.verdict == "FAILED: 1 infra error(s), bad node(s) h200-c"


def test_a_summary_with_only_the_oldest_fields_still_reports():
    summary = {"night": "n1", "attempts": [{"test_id": "t", "outcome": "passed", "elapsed_s": 3.0, "started_at": ""}]}
    r = build_report(summary)
    assert (r.counts, r.gantt, r.usage, r.changes, r.makespan) == ((("passed", 1),), (), None, None, ())
    assert r.verdict == "OK: every test passed"
    assert json.loads(to_json(r))["counts"] == [["passed", 1]]


def test_a_night_that_launched_nothing_is_not_every_test_passed():
    """A record of a pick of disabled tests only (written before such runs were refused)."""
    summary = {"night": "n", "selected": [], "skipped": ["tests/e2e/test_multinode.py"], "attempts": [],
               "verdict": {"ok": True, "failed": [], "excused_quarantined": [], "infra": [], "bad_nodes": [],
                           "interrupted": []}}
    assert build_report(summary).verdict == "NOTHING RAN: 1 skipped"
    unplanned = {**summary, "selected": ["tests/a.py"], "unplanned": ["tests/a.py"]}
    assert build_report(unplanned).verdict == "NOTHING RAN: 1 skipped, 1 unplanned"


def test_a_night_with_problems_is_not_ok_even_when_every_launched_test_passed():
    """A test file whose registration does not load drops out of the night: the verdict says so on every path."""
    passed = {"night": "n", "selected": ["tests/a.py"], "attempts": [attempt("tests/a.py", "passed", "h200-a")],
              "verdict": {"ok": True, "failed": [], "excused_quarantined": [], "infra": [], "bad_nodes": [],
                          "interrupted": []}}
    problem = "catalog problem: tests/b.py:4: est_time: must be a literal"
    r = build_report({**passed, "problems": [problem, "unplanned: tests/c.py: no pool runs hardware 'mi300'"]})
    assert r.verdict == "PROBLEMS: 1 catalog problem(s), 1 test(s) no pool runs; every launched test passed"
    assert f"problem: {problem}" in r.notes
    failed = {**passed, "verdict": {**passed["verdict"], "ok": False, "failed": ["tests/a.py"]}}
    assert build_report({**failed, "problems": [problem]}).verdict == "FAILED: 1 test(s) failed; 1 catalog problem(s)"
    assert build_report(passed).verdict == "OK: every test passed", "a record without problems"


def test_a_selected_test_without_an_attempt_is_no_pass_in_a_record_without_a_verdict():
    """A damaged or cut-short record (attempts lost): never "every test passed"."""
    summary = {"night": "n", "selected": ["tests/a.py", "tests/b.py", "tests/c.py"], "unplanned": ["tests/c.py"],
               "attempts": [attempt("tests/a.py", "passed", "h200-a")]}
    r = build_report(summary)
    assert r.verdict == "FAILED: 1 interrupted"
    assert dict(r.counts)["not_run"] == 1


def test_the_table_and_markdown_still_render_the_rows(night):
    tests = [t for t in night.tests if t.id in (tid(SFT), tid(GRPO))]
    attempts = [Attempt(**{**a, "gpu_slots": tuple(a["gpu_slots"])}) for a in night.summary["attempts"]]
    rows = night_rows(tests, [], attempts, [])
    lines = {line.split()[0]: line.split()[1:3] for line in table(rows).splitlines()[2:]}
    assert lines == {tid(SFT): ["failed", "2.0"], tid(GRPO): ["passed", "(x2)"]}
    assert f"- `{tid(SFT)}`: failed: exit code 1" in markdown("Night", rows, None, 128.0)


def test_an_interrupted_attempt_is_listed_with_the_infrastructure_and_fails_the_night():
    summary = {"night": "n", "selected": ["tests/a.py"], "interrupted": True,
               "attempts": [attempt("tests/a.py", "interrupted", "h200-a")]}
    r = build_report(summary, states={"tests/a.py": FlakyState("tests/a.py", "quarantined")})
    assert [(f.test_id, f.classification) for f in r.infra] == \
        [("tests/a.py", "interrupted: the run was stopped before this attempt ended")]
    assert r.verdict == "FAILED: 1 interrupted"


def test_tonights_attempts_that_used_most_of_their_timeout_are_near_timeout_without_history():
    summary = {"night": "n", "selected": ["tests/a.py", "tests/b.py"],
               "attempts": [{**attempt("tests/a.py", "passed", "n0"), "elapsed_s": 19.0, "timeout_s": 20},
                            {**attempt("tests/b.py", "passed", "n0"), "elapsed_s": 10.0, "timeout_s": 20}]}
    [near] = build_report(summary).near_timeout
    assert (near.test_id, near.elapsed_s, near.timeout_s, near.outcome) == ("tests/a.py", 19.0, 20, "passed")


def test_an_injected_hang_of_a_night_run_with_extra_environment_is_not_near_timeout():
    """`--env MINIRL_HANG=...` kills a test at its timeout on purpose: the page must not call it near its
    timeout, as calibration's near-timeout list and the night's check do not."""
    summary = {"night": "n", "selected": ["tests/a.py"], "env": "MINIRL_HANG#1f2e3d4c5b6a",
               "attempts": [{**attempt("tests/a.py", "timed_out", "n0"), "elapsed_s": 20.0, "timeout_s": 20}]}
    assert build_report(summary).near_timeout == ()
    assert len(build_report({**summary, "env": ""}).near_timeout) == 1


def test_the_verdict_is_the_one_the_night_recorded_not_one_recomputed_from_a_later_quarantine(night):
    """The night exited 1 with two failures; a quarantine added the next morning must not turn its
    report green after the fact (nor a release turn an excused night red)."""
    from pipelines.core.flaky import night_verdict
    from pipelines.core.report import attempts_of

    before = build_report(night.summary, night.previous, night.samples, night.tests)
    failed = list(night_verdict(attempts_of(night.summary), {}).failed)
    recorded = {**night.summary, "verdict": {"ok": False, "failed": failed, "excused_quarantined": [], "infra": [],
                                             "bad_nodes": [], "interrupted": []}}
    later = replay(night.samples, overrides=record(None, tid(SFT), "add", "alice", "issue #7",
                                                    "2026-11-07T09:00:00+00:00"))
    r = build_report(recorded, night.previous, night.samples, night.tests, states=later)
    assert r.verdict == before.verdict == "FAILED: 2 test(s) failed" and r.excused == ()
    sft = next(f for f in r.failures if f.test_id == tid(SFT))
    assert sft.classification == "test failure (exit 1)", "a failure the verdict counted is said to be excused"
    excused = {**recorded, "verdict": {**recorded["verdict"], "ok": True, "failed": [], "excused_quarantined": failed}}
    r = build_report(excused, night.previous, night.samples, night.tests, states={})
    assert r.verdict == "OK: 2 quarantined failure(s) excused" and r.excused == tuple(failed)
    sft = next(f for f in r.failures if f.test_id == tid(SFT))
    assert sft.classification == "test failure (exit 1); quarantined, does not fail the night"


def test_failures_on_a_bad_node_that_passed_elsewhere_on_retry_are_the_nodes_not_flaky():
    """Error 802 on one node: three tests fail there and pass on retry elsewhere. Flaky replay
    leaves such failures out; the page must not point at the tests either."""
    def at(test, outcome, node, n):
        return {**attempt(test, outcome, node), "attempt": n, "exit_code": 1 if outcome == "failed" else 0}

    attempts = [at(f"tests/t{i}.py", "failed", "bad", 1) for i in range(3)]
    attempts += [at(f"tests/t{i}.py", "passed", "good", 2) for i in range(3)]
    attempts += [at(f"tests/u{i}.py", "passed", "good", 1) for i in range(40)]  # 3 of 3 against 0 of 40: named
    summary = {"night": "n", "selected": sorted({a["test_id"] for a in attempts}), "attempts": attempts}
    r = build_report(summary, states={})
    assert [n.node for n in r.bad_nodes] == ["bad"]
    assert {f.classification for f in r.failures} == {"bad node bad: failed there on attempt 1, passed on attempt 2 on good"}


def test_near_timeout_judges_the_last_run_against_the_timeout_the_proposal_brings():
    """est_time 3600 proposed down to 1000: next night's timeout is max(1800, 1250) = 1800, and a
    1700 s run is 94 % of it; against the old 4500 s it would look safe."""
    from pipelines.core.model import Estimate, Sample

    t = Test("tests/a.py", "tests/a.py", "cuda", "stage-c-4-gpu-h200", 4, 3600, hardware="h200")
    run = attempt("tests/a.py", "passed", "n0")
    summary = {"night": "n", "run_id": "r6", "selected": [t.id],  # tonight is the 1700 s run of history
               "attempts": [{**run, "elapsed_s": 1700.0, "timeout_s": 4500}]}
    samples = [Sample(t.id, "h200", "", "passed", e, f"2026-11-0{d}T15:00:00+00:00", run_id=f"r{d}")
               for d, e in ((4, 1000.0), (5, 1000.0), (6, 1700.0))]
    proposal = Estimate(t.id, "h200", 3600, 1000, 3, "median")
    [near] = build_report(summary, (), samples, [t], [proposal], timeout_floor_s=1800).near_timeout
    assert (near.test_id, near.elapsed_s, near.timeout_s) == ("tests/a.py", 1700.0, 1800)


def test_near_timeout_also_judges_the_file_est_time_the_framework_runner_kills_at_after_a_calibrated_night():
    """The file says 1440 (timeout 1800 under the framework's runner); the night ran with a calibrated 2000
    (timeout 2500) and the test passed at 1700 s: PR CI would be at 94 % of its timeout. The record keeps
    the est_time the night ran with; near timeout must still judge the catalog's registered one."""
    from pipelines.core.model import Estimate, Sample

    t = Test("tests/a.py", "tests/a.py", "cuda", "stage-c-4-gpu-h200", 4, 1440, hardware="h200")
    run = {**attempt("tests/a.py", "passed", "n0"), "elapsed_s": 1700.0, "timeout_s": 2500}
    summary = {"night": "n", "run_id": "r6", "selected": [t.id], "est_time": {t.id: 2000}, "attempts": [run]}
    samples = [Sample(t.id, "h200", "", "passed", 1700.0, "2026-11-06T15:00:00+00:00", run_id="r6")]
    proposal = Estimate(t.id, "h200", 1440, 2200, 1, "bucket125", in_force=2000)
    [near] = build_report(summary, (), samples, [t], [proposal], timeout_floor_s=1800).near_timeout
    assert (near.timeout_s, near.file_est_time, near.in_force_est_time) == (1800, 1440, 2000)
    assert str(near).endswith("until the est_time patch is merged (the nights run with the calibrated 2000)")


def test_near_timeout_is_judged_with_the_floor_the_night_ran_with_as_its_record_keeps_it():
    """`nightly run --timeout-floor 20` on a repo whose floor is 60: the record keeps 20, and the report judges
    with it (an older record, without it, with the repo's floor it is given). The night ran with a calibrated
    est_time 24 (timeout 30); the proposal brings it down to 16: next night's timeout is max(20, 20) = 20 s."""
    from pipelines.core.model import Estimate, Sample

    t = Test("tests/a.py", "tests/a.py", "cuda", "stage-c-4-gpu-h200", 4, 8, hardware="h200")
    run = {**attempt("tests/a.py", "passed", "n0"), "elapsed_s": 18.2, "timeout_s": 30}
    summary = {"night": "n", "run_id": "r6", "selected": [t.id], "est_time": {t.id: 24}, "attempts": [run],
               "timeout_floor_s": 20}
    samples = [Sample(t.id, "h200", "", "passed", 18.2, "2026-11-06T15:00:00+00:00", run_id="r6")]
    proposal = Estimate(t.id, "h200", 8, 16, 3, "bucket125", in_force=24)
    [near] = build_report(summary, (), samples, [t], [proposal], timeout_floor_s=60).near_timeout
    # the framework's runner gives the file's est_time=8 max(60, 10) = 60 s: not the timeout judged
    assert (near.timeout_s, near.file_est_time) == (20, 0)
    older = {k: v for k, v in summary.items() if k != "timeout_floor_s"}
    assert build_report(older, (), samples, [t], [proposal], timeout_floor_s=60).near_timeout == ()


def test_a_night_faster_than_predicted_shows_the_plans_bound_as_the_plans_and_the_bound_of_its_own_durations():
    """The plan's lower bound is from predicted durations (109.7 s): a night whose tests ran faster ends
    below it (107.6 s). The bound of the night's own durations, max(longest attempt, GPU-seconds / GPUs),
    never exceeds what it took."""
    from pipelines.core.report import makespan_label

    def ran(test: str, at: int, elapsed: float, slots: list[int]) -> dict:
        return {**attempt(test, "passed", "n0"), "elapsed_s": elapsed, "gpu_slots": slots,
                "started_at": f"2026-11-06T15:00:{at:02d}+00:00"}

    attempts = [ran("tests/a.py", 0, 100.0, [0, 1, 2, 3]), ran("tests/b.py", 0, 50.0, [4, 5, 6, 7]),
                ran("tests/c.py", 50, 57.0, [4, 5, 6, 7])]
    summary = {"night": "n", "selected": ["tests/a.py", "tests/b.py", "tests/c.py"], "attempts": attempts,
               "predicted_makespan_s": 112.0, "lower_bound_s": 109.7, "actual_makespan_s": 107.6}
    makespan = dict(build_report(summary).makespan)
    assert makespan == {"predicted": 112.0, "actual": 107.6, "lower bound": 109.7,
                        "lower bound (actual durations)": 103.5}  # (400 + 200 + 228) GPU-s / 8 GPUs
    assert [makespan_label(k) for k in makespan] == [
        "predicted makespan", "actual makespan", "plan's lower bound (from predicted durations)",
        "lower bound from the night's actual durations"]
    # GPUs only guessed (an attempt without its slots), or a night that did not end: no bound from them
    guessed = {**summary, "attempts": [*attempts[:2], {**attempts[2], "gpu_slots": []}]}
    assert "lower bound (actual durations)" not in dict(build_report(guessed).makespan)
    assert "lower bound (actual durations)" not in dict(build_report({**summary, "status": "running"}).makespan)


def test_a_cpu_test_in_the_night_keeps_the_bound_of_its_actual_durations():
    """A 0-GPU test never has GPU slots: it neither hides the bound nor adds GPU-seconds to it, whether its
    GPUs come from the night's plan (the end-of-night line has no catalog) or from the catalog."""
    from pipelines.core.report import actual_lower_bound

    def ran(test: str, elapsed: float, slots: list[int]) -> dict:
        return {**attempt(test, "passed", "n0"), "elapsed_s": elapsed, "gpu_slots": slots,
                "started_at": "2026-11-06T15:00:00+00:00"}

    summary = {"night": "n", "selected": ["tests/a.py", "tests/cpu.py"], "actual_makespan_s": 100.0,
               "attempts": [ran("tests/a.py", 100.0, [0, 1, 2, 3]), ran("tests/cpu.py", 120.0, [])],
               "plan": [{"test_id": "tests/a.py", "gpus": 4}, {"test_id": "tests/cpu.py", "gpus": 0}],
               "pools": {"h200": {"nodes": 1, "gpus_per_node": 8}}}
    # max(longest attempt 120 s, 400 GPU-s / 8): the CPU test's time counts, its GPU-seconds do not
    assert dict(build_report(summary).makespan)["lower bound (actual durations)"] == 120.0
    assert actual_lower_bound(summary) == 120.0
    assert build_report(summary).usage.used_gpu_h == pytest.approx(400 / 3600)
    cpu = Test("tests/cpu.py", "tests/cpu.py", "cpu", "cpu-nightly", 0, 2)
    older = {k: v for k, v in summary.items() if k != "plan"}  # the catalog says it needs no GPU
    assert dict(build_report(older, tests=[cpu]).makespan)["lower bound (actual durations)"] == 120.0
    # a test needing GPUs whose attempt kept no slots still withholds it
    assert actual_lower_bound({**summary, "plan": [{"test_id": "tests/a.py", "gpus": 4}]}) is None


def test_a_partial_records_span_is_not_called_the_nights_actual_makespan():
    summary = {"night": "n", "status": "running", "selected": ["tests/a.py", "tests/b.py"], "actual_makespan_s": 6.6,
               "attempts": [attempt("tests/a.py", "passed", "h200-a")],
               "verdict": {"ok": False, "failed": [], "unfinished": ["tests/b.py"], "interrupted": ["tests/b.py"]}}
    r = build_report(summary)
    assert dict(r.makespan) == {"so far (the run had not ended)": 6.6}
    assert r.verdict.startswith("INCOMPLETE: 1 test(s) had not finished")


def test_a_proposal_held_for_acceptance_is_on_the_page_not_hidden_as_no_change():
    from pipelines.core.model import Estimate
    from pipelines.reporting.html import render_html

    summary = {"night": "n", "selected": ["tests/a.py"], "attempts": [attempt("tests/a.py", "passed", "h200-a")]}
    held = Estimate("tests/a.py", "h200", 10, 10, 1, "bucket125 ...; held for acceptance", held=1300)
    r = build_report(summary, estimates=[held])
    assert [(e.test_id, e.current, e.held) for e in r.held] == [("tests/a.py", 10, 1300)]
    assert "tests/a.py: est_time 10 s &rarr; 1300 s held for acceptance" in render_html(r)


A, B, C = "tests/e2e/test_a.py", "tests/e2e/test_b.py", "tests/e2e/test_c.py"
WHOLE = {"cadence": "nightly", "labels": [], "suites": [], "pools": [], "tests": []}


def _night(n: int, outcomes: dict[str, str], selected=None, cadence="nightly", selection=None) -> dict:
    at = f"2026-12-0{n}T15:00:00+00:00"
    out = {"night": f"n{n}", "run_id": f"r{n}", "cadence": cadence, "selected": list(selected or outcomes),
           "attempts": [{"test_id": t, "outcome": o, "elapsed_s": 5.0, "started_at": at, "attempt": 1, "node": "n0",
                         "gpu_slots": [0], "exit_code": 0 if o == "passed" else 1} for t, o in outcomes.items()]}
    return {**out, "selection": selection} if selection else out


def test_a_night_that_selected_fewer_tests_neither_removes_nor_forgets_the_others():
    full = _night(1, {A: "failed", B: "passed", C: "failed"})
    part = _night(2, {B: "passed"})
    r = build_report(part, [full])
    c = r.changes
    assert (c.new_failures, c.still_failing, c.fixed, c.added, c.removed) == ((), (), (), (), ())
    assert c.still_failing_not_run == (A, C)
    assert r.verdict == "OK: every test passed; 2 earlier failure(s) not run tonight"


def test_each_test_is_compared_with_the_last_night_that_ran_it_past_an_interrupted_night():
    failed = _night(1, {A: "failed", B: "passed"})
    interrupted = _night(2, {B: "interrupted"}, selected=[A, B])  # A never started: not_run
    again = _night(3, {A: "failed", B: "passed"})
    c = build_report(again, [failed, interrupted]).changes
    assert (c.new_failures, c.still_failing, c.still_failing_not_run) == ((), (A,), ())
    fixed = build_report(_night(3, {A: "passed", B: "passed"}), [failed, interrupted]).changes
    assert (fixed.fixed, fixed.new_failures) == ((A,), ())


def test_picks_are_never_diffed_as_added_or_removed_tests():
    first = _night(1, {A: "passed"}, cadence="picked", selection={**WHOLE, "cadence": ""})
    second = _night(2, {B: "failed"}, cadence="picked", selection={**WHOLE, "cadence": ""})
    c = build_report(second, [first]).changes
    assert (c.added, c.removed, c.new_failures, c.still_failing_not_run) == ((), (), (B,), ())


def test_added_and_removed_come_from_two_records_that_each_cover_their_whole_cadence():
    before = _night(1, {A: "passed", B: "failed"}, selection=WHOLE)
    narrowed = _night(2, {A: "passed"}, selection={**WHOLE, "labels": ["short"]})  # says nothing of the others
    tonight = _night(3, {A: "passed", C: "passed"}, selection=WHOLE)
    c = build_report(tonight, [before, narrowed]).changes
    assert (c.added, c.removed) == ((C,), (B,))
    assert c.still_failing_not_run == ()  # B is gone, not still failing
    assert build_report(narrowed, [before]).changes.removed == ()


def test_a_removed_failing_test_is_not_still_failing_on_the_nights_after_its_removal():
    """A failing test deleted (or renamed) is removed on the first night without it, and not listed
    as still failing (not run tonight) on the nights after, a narrowed one included."""
    before = _night(1, {A: "failed", B: "passed"}, selection=WHOLE)
    gone = _night(2, {C: "failed", B: "passed"}, selection=WHOLE)
    assert build_report(gone, [before]).changes.removed == (A,)
    again = build_report(_night(3, {C: "failed", B: "passed"}, selection=WHOLE), [before, gone]).changes
    assert (again.removed, again.still_failing_not_run) == ((), ())
    narrowed = _night(3, {B: "passed"}, selection={**WHOLE, "labels": ["short"]})
    assert build_report(narrowed, [before, gone]).changes.still_failing_not_run == (C,)


def test_a_weekly_failure_is_still_failing_on_a_nightly_night_that_leaves_its_test_out():
    """The nightly cadence leaves out long tests: its records do not list them, which says nothing
    of whether they are still registered; a whole weekly night without the test does."""
    weekly = _night(1, {A: "failed", B: "passed"}, cadence="weekly", selection={**WHOLE, "cadence": "weekly"})
    nightly = _night(2, {B: "passed"}, selection=WHOLE)
    assert build_report(_night(3, {B: "passed"}, selection=WHOLE), [weekly, nightly]).changes.still_failing_not_run == (A,)
    weekly_without = _night(3, {B: "passed"}, cadence="weekly", selection={**WHOLE, "cadence": "weekly"})
    assert build_report(_night(4, {B: "passed"}, selection=WHOLE),
                        [weekly, nightly, weekly_without]).changes.still_failing_not_run == ()


def test_a_night_under_another_extra_environment_is_named_as_a_change_and_no_test_is_compared_with_it():
    """A failure injected with --env one night: the plain night after it does not call the test
    fixed, and the injected night after a plain one does not call it new; the environment line names
    the variables (and their hash), never the values."""
    from pipelines.core.model import env_digest

    inject = env_digest([("MINIRL_FAIL", "test_a")])
    plain, injected = _night(1, {A: "passed", B: "failed"}), {**_night(2, {A: "failed", B: "passed"}), "env": inject}
    c = build_report(_night(3, {A: "passed", B: "failed"}), [plain, injected]).changes
    assert (c.fixed, c.new_failures, c.still_failing) == ((), (), (B,))
    assert c.environment == (("extra environment", inject, "-"),) and inject.startswith("MINIRL_FAIL#")
    again = build_report({**_night(4, {A: "failed", B: "passed"}), "env": inject}, [plain, injected]).changes
    assert (again.new_failures, again.still_failing, again.fixed) == ((), (A,), ())
    assert again.environment == ()


def test_an_interrupted_nights_verdict_counts_the_tests_that_never_started_and_its_span_is_not_the_nights():
    summary = {"night": "n", "selected": [A, B, C, "tests/e2e/test_d.py"], "interrupted": True,
               "status": "interrupted", "actual_makespan_s": 12.5,
               "attempts": [attempt(A, "passed", "n0"), attempt(B, "interrupted", "n0")],
               "verdict": {"ok": False, "failed": [], "excused_quarantined": [], "infra": [], "bad_nodes": [],
                           "interrupted": [B]}}
    r = build_report(summary)
    assert r.verdict == "FAILED: 1 interrupted, 2 never started"
    assert dict(r.makespan) == {"until interrupted": 12.5}
    assert dict(build_report({**summary, "interrupted": False, "status": "finished"}).makespan)["actual"] == 12.5


def _predicted(summary: dict, median, p90: float, actual: float, **extra) -> dict:
    """``summary`` with the ``prediction`` entry `nightly run` records (pipelines/execute.py)."""
    return {**summary, **extra, "prediction": {
        "night": summary["night"], "predicted_median_s": median, "predicted_p90_s": p90, "actual_s": actual,
        "tests": [{"test_id": tid(SGLANG), "predicted_s": 30.0, "actual_s": 41.0}]}}


def test_the_prediction_error_over_the_repos_recent_whole_nights_on_this_deployment_is_shown(night):
    from pipelines.reporting.html import render_html

    previous = [_predicted(night.previous[0], 110.0, 130.0, 100.0),
                _predicted(night.previous[1], 90.0, 95.0, 100.0, deployment="k8s"),  # other pools: left out
                _predicted(night.previous[2], 500.0, 600.0, 100.0, status="interrupted", interrupted=True),  # partial
                _predicted(night.previous[3], "soon", 95.0, 100.0),  # damaged: named, left out
                night.previous[4]]  # an older record without a prediction
    r = build_report(_predicted(night.summary, 100.0, 120.0, 128.0), previous, night.samples, night.tests)
    # +10 % on the first night, -21.9 % tonight (128 s over the p90 of 120 s)
    e = r.prediction_error
    assert (e.nights, e.within_p90, e.tests) == (2, 1, 1)
    assert (e.makespan_bias, e.makespan_error) == (pytest.approx(-0.059375), pytest.approx(0.159375))
    assert r.prediction == (
        "prediction error over the last 2 night(s): makespan off by 16% on average (short by 6%), within the p90 on 1/2",
        f"per test: typical error 37% over 1 test(s); worst: {tid(SGLANG)} 37% (2 runs)")
    assert ("nights/2026-11-04T150000Z.json:1: prediction.predicted_median_s: 'soon' is not a number of seconds >= 0; "
            "rewrite the night's summary or drop its prediction entry; left out of the prediction error") in r.notes
    assert json.loads(to_json(r))["prediction_error"]["nights"] == 2
    assert f'<p class="prediction">{r.prediction[0]}</p>' in render_html(r)


def test_without_a_recorded_prediction_the_report_says_so(report):
    assert report.prediction == ("prediction error: no night with a prediction yet",)


def test_an_infra_error_whose_retry_passed_is_listed_with_the_infrastructure():
    """An eviction, a lost node, an unusable GPU: the retry's pass keeps the night green, but the
    infra error is there to see (it used to leave only `attempts: 2` in the row)."""
    attempts = [attempt("tests/a.py", "infra_error", "h200-c", "evicted"),
                {**attempt("tests/a.py", "passed", "h200-a"), "attempt": 2},
                attempt("tests/b.py", "passed", "h200-a")]
    summary = {"night": "n", "selected": ["tests/a.py", "tests/b.py"], "attempts": attempts,
               "verdict": {"ok": True, "failed": [], "excused_quarantined": [], "infra": [], "bad_nodes": [],
                           "interrupted": []}}
    r = build_report(summary)
    assert (r.verdict, r.failures) == ("OK: every test passed", ())
    [infra] = r.infra
    assert (infra.test_id, infra.outcome, infra.node, infra.reason) == ("tests/a.py", "infra_error", "h200-c", "evicted")
    assert infra.classification == "infra: evicted on h200-c on attempt 1; passed on attempt 2 on h200-a"


def test_the_page_names_a_retried_infra_errors_node_once():
    """The infra line of a retried eviction already says where each attempt ran; the page does not
    append the node a second time (it read "... passed on attempt 2 on h200-a on h200-c")."""
    from pipelines.reporting.html import render_html

    attempts = [attempt("tests/a.py", "infra_error", "h200-c", "evicted"),
                {**attempt("tests/a.py", "passed", "h200-a"), "attempt": 2},
                attempt("tests/b.py", "infra_error", "h200-d", "node_lost")]
    summary = {"night": "n", "selected": ["tests/a.py", "tests/b.py"], "attempts": attempts}
    page = render_html(build_report(summary))
    assert "infra: evicted on h200-c on attempt 1; passed on attempt 2 on h200-a</p>" in page.replace(" &middot;", "</p>")
    assert "on h200-a on h200-c" not in page
    assert " on h200-d" in page  # a last attempt's infra line still names its node


def test_only_a_night_that_started_later_keeps_latest_json_from_a_record():
    older, newer = {"night": "2026-12-04T165637Z-a6314ba1"}, {"night": "2026-12-04T170002Z-0b7c1d2e"}
    assert not replaces_latest(newer, older)  # a run that outlived its worker, writing late
    assert replaces_latest(older, newer) and replaces_latest(newer, newer)  # the newest, and a night's own rewrite
    same_second = {"night": "2026-12-04T170002Z-ffffffff"}
    assert replaces_latest(newer, same_second) and replaces_latest(same_second, newer)  # not ordered: as before
    assert replaces_latest(None, older) and replaces_latest({"night": "n1"}, older) and replaces_latest(newer, {})


def test_a_night_whose_every_input_failed_draws_each_blocked_test_at_zero():
    """With no launch at all, the earliest input failure was time zero and the next one, known half a second
    later, was drawn at 0.45 s though nothing ran: a never-launched attempt is drawn at 0."""
    from pipelines.core.report import _gantt

    blocked = [Attempt(f"tests/e2e/test_{i}.py", "infra_error", 0.0, f"2026-12-06T01:00:00.{i * 450:03d}+00:00",
                       reason="input not available", details={"stage": "inputs"}) for i in range(2)]
    bars, span = _gantt(blocked, {})
    assert [b.start_s for b in bars] == [0.0, 0.0] and span == 0.0
