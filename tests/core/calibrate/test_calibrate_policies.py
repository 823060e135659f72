"""Policies turn passing durations of the current file into est_time, and ignore everything else."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipelines.core.calibrate import POLICIES, bucket_round, calibrate, estimates_by_id
from pipelines.core.model import Sample
from tests.conftest import make_test

NOW = datetime(2026, 12, 20, tzinfo=UTC)
SHA = "0" * 64


def s(elapsed: float, days_ago: float = 1, **kw) -> Sample:
    base = dict(test_id="tests/e2e/test_a.py", hardware="h200", sha256=SHA, outcome="passed", elapsed_s=elapsed,
                started_at=(NOW - timedelta(days=days_ago)).isoformat(), source=f"night.log:{int(elapsed)}")
    return Sample(**{**base, **kw})


def one(samples, policy="bucket125", params=None, **test_kw):
    return calibrate([make_test(**test_kw)], samples, policy, params, now=NOW)[0]


def test_bucket125_reproduces_the_framework_m_recalibration():
    assert one([s(957), s(962), s(966)], est_time=3600).proposed == 1300
    assert one([s(568)], est_time=1800).proposed == 800


@pytest.mark.parametrize(("elapsed", "expected"), [(160, 200), (152, 190), (131, 170), (8, 10), (0.5, 10)])
def test_bucket125_rounds_to_ten_seconds_up_to_200(elapsed, expected):
    assert one([s(elapsed)], est_time=2 * expected).proposed == expected


@pytest.mark.parametrize(("elapsed", "expected"), [(8.209, 10), (152.1, 190), (152.6, 200), (160.4, 200), (1040.4, 1300)])
def test_bucket125_takes_the_elapsed_in_whole_seconds_as_framework_ms_runner_logs_it(elapsed, expected):
    """One run, one est_time, whether a night measured it (8.209 s) or it was imported from the framework's
    log (`elapsed=8`): 8 x 1.25 = 10 s, where 8.209 x 1.25 = 10.26 went up to 11 and so to the 20 s bucket."""
    e = one([s(elapsed)], est_time=2 * expected)
    assert e.proposed == expected
    assert one([s(round(elapsed))], est_time=2 * expected).proposed == expected
    assert f"max {elapsed:g} s ({round(elapsed)} s as the runner logs it) x 1.25" in e.reason


def test_bucket_edges_200_stays_and_201_goes_to_300():
    assert bucket_round(200) == 200
    assert bucket_round(201) == 300
    assert bucket_round(1208) == 1300
    assert one([s(161)]).proposed == 300  # ceil(201.25) = 202 -> 300


def test_p90_uses_the_newest_15_within_21_days_and_needs_3():
    old = [s(5000, days_ago=30)]  # outside the window
    older = [s(3000, days_ago=10 + i / 10) for i in range(5)]  # within the window but not among the newest 15
    newest = [s(100 + i, days_ago=1 + i / 100) for i in range(15)]
    e = one(old + older + newest, "p90", est_time=300)
    assert e.samples_used == 15
    assert e.proposed == 113  # nearest rank: 14th of 100..114
    assert e.max_s == 114 and e.median_s == 107
    assert "(1 older than 21 days; 5 beyond the newest 15)" in e.reason


@pytest.mark.parametrize("policy", ["p90", "median"])
def test_samples_without_a_start_time_count_in_stored_order_and_are_not_called_old(policy):
    """Logs without the GitHub timestamp prefix (which import reads) give samples no start time;
    the window must not drop them as if they were old."""
    undated = [s(600 + i, started_at="", source=f"plain.log:{i}") for i in range(20)]
    e = one(undated, policy, est_time=1800)
    assert e.samples_used == 15 and e.sources == tuple(f"plain.log:{i}" for i in range(5, 20))  # the last 15 stored
    assert e.proposed == (618 if policy == "p90" else 612)
    assert "older than" not in e.reason and "within" not in e.reason
    assert "(5 beyond the newest 15; 15 without a start time, used as the oldest)" in e.reason
    dated = [s(100 + i, days_ago=1 + i / 100) for i in range(3)]
    mixed = one(undated[:2] + dated, policy, est_time=1800)
    assert mixed.samples_used == 5 and mixed.sources[:2] == ("plain.log:0", "plain.log:1")


def test_p90_with_two_samples_keeps_est_time_and_says_why():
    e = one([s(100), s(110)], "p90", est_time=600)
    assert (e.proposed, e.samples_used) == (600, 0)
    assert e.reason.startswith("too few samples: 2 passed of the current file, p90 needs 3; keeps est_time")


def test_median_takes_the_middle_and_rounds_up():
    assert one([s(100), s(120.2), s(500)], "median", est_time=300).proposed == 121


def test_policy_parameters_override_defaults_and_unknown_ones_are_errors():
    assert one([s(100), s(200)], "p90", {"min_samples": 2}).proposed == 200
    with pytest.raises(ValueError, match="calibration: windw_days: not a parameter of policy 'p90'; known: "):
        one([s(100)], "p90", {"windw_days": 3})
    with pytest.raises(ValueError, match="calibration: policy: unknown policy 'p95'; use one of bucket125, p90"):
        one([s(100)], "p95")


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_ignores_failed_timed_out_infra_interrupted_and_capped_samples(policy):
    noise = [s(9000, outcome="failed"), s(9000, outcome="timed_out", capped=True), s(9000, outcome="infra_error"),
             s(9000, capped=True), s(9000, outcome="interrupted")]
    clean = [s(100), s(100), s(100)]
    e = one(clean + noise, policy)
    assert e.proposed == one(clean, policy).proposed
    assert e.samples_used == 3 and e.max_s == 100
    assert "5 failed/timed-out/infra samples ignored" in e.reason


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_counts_other_file_revisions_as_stale_and_does_not_use_them(policy):
    e = one([s(100), s(100), s(100), s(5000, sha256="f" * 64), s(5000, sha256="e" * 64)], policy)
    assert e.max_s == 100 and e.stale_samples == 2
    assert "2 stale (other file revision)" in e.reason
    only_stale = one([s(5000, sha256="f" * 64)] * 3, policy, est_time=700)
    assert (only_stale.proposed, only_stale.samples_used, only_stale.stale_samples) == (700, 0, 3)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_keeps_estimates_per_hardware(policy):
    h200 = make_test(id="tests/e2e/test_m.py::cuda-h200", hardware="h200", est_time=50)
    h100 = make_test(id="tests/e2e/test_m.py::cuda-h100", hardware="h100", est_time=50)
    samples = [s(100, test_id=h200.id)] * 3 + [s(240, test_id=h200.id, hardware="h100")] * 3 + \
              [s(250, test_id=h100.id, hardware="h100")] * 3
    a, b = calibrate([h200, h100], samples, policy, now=NOW)
    assert (a.max_s, b.max_s) == (100, 250)


def test_a_test_without_samples_keeps_its_est_time_and_is_absent_for_the_planner():
    t = make_test(id="tests/e2e/test_b.py", est_time=900)
    a, b = calibrate([make_test(), t], [s(568)], now=NOW)
    assert (b.proposed, b.samples_used, b.reason[:15]) == (900, 0, "too few samples")
    assert estimates_by_id([a, b]) == {"tests/e2e/test_a.py": 800}
    assert a.sources == ("night.log:568",) and a.delta == 200


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_raise_on_timeout_lifts_a_test_whose_newest_run_was_killed(policy):
    killed = s(750, days_ago=0.5, outcome="timed_out", capped=True, source="n9.log:4")
    e = one([killed], policy, {"raise_on_timeout": True}, est_time=600)
    assert (e.proposed, e.samples_used, e.sources) == (1000, 1, ("n9.log:4",))  # ceil(937.5) -> 1000
    assert e.reason.startswith("raised: the newest run timed out after 750 s, so 1.25 x that = 938 s, rounded up "
                               f"to 1000 s; no {policy} proposal without it (0 passed of the current file, needs")
    assert "keeps est_time" not in e.reason
    assert one([killed], policy, est_time=600).proposed == 600  # off by default
    passed_after = s(700, days_ago=0.1)
    assert one([killed, passed_after] * 3, policy, {"raise_on_timeout": True}).reason.startswith(policy)


def test_a_template_test_killed_by_the_first_night_s_limit_is_raised_without_the_opt_in():
    killed = s(2250, days_ago=0.5, outcome="timed_out", capped=True, source="n1.log:7")
    e = one([killed], est_time=1800, fmt="template", est_source="default")
    assert (e.proposed, e.samples_used) == (2900, 1)  # bucket(ceil(2812.5)): the next limit is 3625 s
    assert e.reason.startswith("raised: the newest run timed out after 2250 s, so 1.25 x that = 2813 s, rounded up "
                               "to 2900 s; no bucket125 proposal without it (0 passed of the current file, needs 1)")
    assert "too few samples" not in e.reason  # it used one sample: the kill
    assert one([killed], est_time=1800).proposed == 1800, "a registry test keeps its own est_time (opt-in)"


def test_a_placeholder_est_time_killed_every_night_is_raised_past_the_step_guard_with_one_reason():
    """The raise is 1.25x a run the timeout killed: bounded by that kill, so the step guard (there
    against poisoned numbers) must not hold it, or the test is killed at 1800 s night after night."""
    killed = [s(1800, days_ago=d, outcome="timed_out", capped=True, source=f"n{d}.log:4") for d in (3, 2, 1)]
    e = one(killed, "p90", {"raise_on_timeout": True}, est_time=300)
    assert (e.proposed, e.held, e.samples_used) == (2300, None, 1)  # x7.67, past max_step_factor 4
    assert e.reason.startswith("raised: the newest run timed out after 1800 s, so 1.25 x that = 2250 s, rounded up "
                               "to 2300 s; no p90 proposal without it (0 passed of the current file, needs 3)")
    assert "keeps est_time" not in e.reason and "held" not in e.reason
    lowered = one([s(100, days_ago=d) for d in (3, 2, 1)], "p90", {"raise_on_timeout": True}, est_time=3000)
    assert (lowered.proposed, lowered.held) == (3000, 100), "a large step down is still held"


#: a night run with extra environment (``--env``), as its samples keep it
ENV = "CUDA_LAUNCH_BLOCKING#3f2a9c1b0d4e"


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_ignores_samples_of_nights_with_extra_environment_and_counts_them(policy):
    """One --env night (debugging, failure injection) ran 4x slower: it must not move est_time for good."""
    plain = [s(100, days_ago=4), s(102, days_ago=3), s(101, days_ago=2)]
    slow = s(400, days_ago=1, env=ENV)
    e = one([*plain, slow, s(9000, days_ago=1, env=ENV, outcome="failed")], policy, est_time=150)
    assert (e.proposed, e.samples_used, e.max_s) == (one(plain, policy, est_time=150).proposed, 3, 102)
    assert "(2 from nights with extra environment ignored)" in e.reason
    only_env = one([slow] * 3, policy, est_time=150)
    assert (only_env.proposed, only_env.samples_used) == (150, 0)
    assert only_env.reason.startswith("too few samples: 0 passed of the current file")


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_timeout_kill_on_a_night_with_extra_environment_raises_nothing(policy):
    """MINIRL_HANG makes a test hang until its timeout kills it: that says nothing of the test's length."""
    hang = s(750, days_ago=0.5, outcome="timed_out", capped=True, env="MINIRL_HANG#0123456789ab")
    e = one([hang], policy, {"raise_on_timeout": True}, est_time=600)
    assert (e.proposed, e.samples_used) == (600, 0) and "raised" not in e.reason
    assert "1 from nights with extra environment ignored" in e.reason
    plain_kill = s(750, days_ago=0.5, outcome="timed_out", capped=True)
    assert one([plain_kill, hang], policy, {"raise_on_timeout": True}, est_time=600).proposed == 1000


def test_the_est_time_in_force_is_neither_kept_nor_released_by_nights_with_extra_environment():
    t = make_test(est_time=600)

    def in_force(samples, params=None):
        return calibrate([t], samples, "p90", {"min_samples": 3, **(params or {})}, now=NOW,
                         in_force={(t.id, t.hardware): 300})[0]

    # passes only on --env nights: no passing evidence for the value in force, so it is released
    kept_by_env = in_force([s(250, days_ago=1, env=ENV)])
    assert kept_by_env.in_force is None and "released the calibrated est_time 300 s in force" in kept_by_env.reason
    # a plain pass keeps it; an --env night's timeout kill below the registered value does not release it
    kill = s(330, days_ago=0.5, outcome="timed_out", capped=True, env="MINIRL_HANG#0123456789ab")
    held = in_force([s(250, days_ago=1), kill])
    assert (held.in_force, held.proposed) == (300, 300) and "released" not in held.reason


def test_a_0_s_raw_value_is_in_the_first_bucket():
    """A sub-second pass is logged as elapsed=0: its bucket is 10 s, never an est_time of 0."""
    from pipelines.core.calibrate import bucket_round

    assert [bucket_round(x) for x in (0, 1, 10, 11, 200, 201)] == [10, 10, 10, 20, 200, 300]
