"""Bad-node detection from one night's attempts."""

from __future__ import annotations

import dataclasses

from pipelines.core.health import (
    Thresholds,
    assess_nodes,
    avoid_nodes,
    detect_bad_nodes,
    judge_nodes,
    leave_out,
    passed_nodes,
    report_lines,
    retries_due,
    suspect_nodes,
)
from pipelines.core.model import Attempt, Sample

#: the one-night rules as they were before their chance: for the tests of what they count and show
WITHOUT_CHANCE = Thresholds(tonight_named_chance=1.0)


def attempt(test: str, node: str, outcome: str = "passed", reason: str = "", exit_code: int | None = None) -> Attempt:
    return Attempt(test_id=test, outcome=outcome, elapsed_s=10.0, started_at="2026-12-01T00:00:00Z", node=node,
                   reason=reason, exit_code=exit_code)


def test_the_host_that_failed_12_of_12_tests_that_passed_elsewhere_is_named_with_evidence():
    night = [attempt(f"tests/test_{i}.py", "h200-c", "failed", "exit_code", 1) for i in range(12)]
    night += [attempt(f"tests/test_{i}.py", "h200-a" if i < 8 else "h200-b") for i in range(12)]  # the retries passed
    night += [attempt(f"tests/other_{i}.py", "h200-a") for i in range(10)] + [attempt("tests/flaky.py", "h200-b", "failed", "exit_code", 1)]
    [finding] = detect_bad_nodes(night)
    assert (finding.node, finding.rule, finding.failed, finding.total) == ("h200-c", "failure_rate", 12, 12)
    assert finding.evidence.startswith(
        "12 of 12 attempts failed here (other nodes: 1 of 23); 12 of the pool's 13 failures here, 12 or more a "
        "chance of 1 in 42,653 for a healthy node with its 12 of the 35 attempts (1 in 14,218 for any of the "
        "pool's 3 nodes; named at 1 in 1,000); 12 of these tests passed elsewhere the same night (h200-a: 8, h200-b: 4)")
    assert "e.g. tests/test_0.py (exit_code, exit 1)" in finding.evidence and "and 9 more" in finding.evidence
    assert avoid_nodes([finding]) == ("h200-c",)
    assert report_lines([finding]) == [f"- bad node h200-c: {finding.evidence}"]


def test_tests_that_fail_everywhere_do_not_blame_a_node():
    night = [attempt(f"tests/test_{i}.py", n, "failed", "exit_code", 1) for i in range(6) for n in ("h200-a",)]
    night += [attempt(f"tests/test_{i}.py", "h200-b", "failed", "exit_code", 1) for i in range(6)]
    night += [attempt(f"tests/ok_{i}.py", "h200-b") for i in range(6)]
    assert detect_bad_nodes(night) == []


def test_failures_the_retry_repeats_on_another_node_are_the_tests_own():
    night = [attempt(f"tests/new_{i}.py", "h200-a", "failed", "exit_code", 1) for i in range(5)]
    night += [attempt(f"tests/ok_{i}.py", "h200-b") for i in range(10)]
    assert suspect_nodes(night) == ("h200-a",)  # 5 different tests on one node: retried elsewhere
    night += [attempt(f"tests/new_{i}.py", "h200-b", "failed", "exit_code", 1) for i in range(5)]  # the retries
    assert detect_bad_nodes(night) == [] and suspect_nodes(night) == ()


def test_one_gpu_unusable_attempt_is_enough_to_name_the_node():
    night = [attempt("tests/a.py", "h200-d", "infra_error", "gpu_unusable", 86), attempt("tests/a.py", "h200-a")]
    [finding] = detect_bad_nodes(night)
    assert (finding.node, finding.rule) == ("h200-d", "infra")
    assert finding.evidence.startswith("1 infra error(s) on this node (gpu_unusable x1); 1 of 1 attempts failed here")


def test_softer_infra_errors_need_two_on_the_same_node():
    one = [attempt("tests/a.py", "h200-a", "infra_error", "evicted"), attempt("tests/a.py", "h200-b")]
    assert detect_bad_nodes(one) == []
    two = one + [attempt("tests/b.py", "h200-a", "infra_error", "node_lost")]
    assert [f.evidence.split(";")[0] for f in detect_bad_nodes(two)] == ["2 infra error(s) on this node (evicted x1, node_lost x1)"]


def test_infra_errors_that_are_not_the_nodes_fault_are_ignored():
    night = [attempt(f"tests/{i}.py", "h200-a", "infra_error", r) for i, r in enumerate(("deleted", "preempted", "unschedulable"))]
    assert detect_bad_nodes(night + [attempt("tests/x.py", "h200-b")]) == []


def test_a_single_node_night_has_nothing_to_compare_against():
    night = [attempt(f"tests/{i}.py", "h200-a", "failed", "exit_code", 1) for i in range(10)]
    assert detect_bad_nodes(night) == []


def test_attempts_without_a_node_and_skips_are_not_counted():
    night = [attempt("tests/a.py", "", "failed"), attempt("tests/b.py", "h200-a", "skipped")]
    assert detect_bad_nodes(night) == []


def test_the_802_host_is_named_by_the_contrast_alone_when_no_test_ran_twice():
    """ci-facts: 12 tests failed on one host and 23 others passed on another; no test ran on both."""
    night = [attempt(f"tests/test_{i}.py", "h200-c", "failed", "CUDA error 802", 1) for i in range(12)]
    night += [attempt(f"tests/other_{i}.py", "h200-a") for i in range(23)]
    [finding] = detect_bad_nodes(night)
    assert (finding.node, finding.rule, finding.failed, finding.total) == ("h200-c", "contrast", 12, 12)
    assert finding.evidence.startswith("12 of 12 attempts failed here (other nodes: 0 of 23); 12 of the pool's 12 "
                                       "failures here, 12 or more a chance of 1 in 379,002 for a healthy node")
    assert "12 different tests failed here while the other nodes almost never failed" in finding.evidence


def test_three_against_three_is_a_suspect_until_the_retries_pass_elsewhere():
    """The reviewer's night: three 8-GPU tests per node, every one on node 1 failed with 802."""
    night = [attempt(f"tests/test_f_node{i}.py", "local-h200-1", "failed", "CUDA error 802", 1) for i in (2, 4, 6)]
    night += [attempt(f"tests/test_f_node{i}.py", "local-h200-0") for i in (1, 3, 5)]
    assert detect_bad_nodes(night) == []  # three tests against three: not enough to name a node on its own
    assert suspect_nodes(night) == ("local-h200-1",)
    assert avoid_nodes([], suspect_nodes(night)) == ("local-h200-1",)
    night += [attempt(f"tests/test_f_node{i}.py", "local-h200-0") for i in (2, 4, 6)]  # the retries passed
    # passing elsewhere is what a flaky test does too: 3 failures of 3 here against 0 of 6 (the retries carry no
    # retry_of here, so they count as first attempts) is 1 in 27 for a healthy node, 1 in 14 for either: a suspect, retried from, never named (named, it laid flaky failures at it)
    [held] = judge_nodes(night)[1]
    assert detect_bad_nodes(night) == [] and held.node == "local-h200-1"
    assert ("3 of the pool's 3 failures here, 3 or more a chance of 1 in 27 for a healthy node with its 3 of the 9 "
            "attempts (1 in 14 for any of the pool's 2 nodes; suspect, not named, above 1 in 1,000)") in held.evidence
    [finding] = detect_bad_nodes(night, limits=WITHOUT_CHANCE)  # as the rule named it before it weighed the chance
    assert (finding.node, finding.rule) == ("local-h200-1", "failure_rate")
    assert "3 of these tests passed elsewhere the same night (local-h200-0: 3)" in finding.evidence


def test_recent_history_on_other_nodes_names_the_node_without_a_retry():
    night = [attempt(f"tests/t{i}.py", "n1", "failed", "CUDA error 802", 1) for i in range(3)]
    night += [attempt(f"tests/u{i}.py", "n0") for i in range(3)]
    samples = [Sample(f"tests/t{i}.py", "h200", "x", "passed", 10.0, f"2026-11-0{d}T00:00:00Z", node="n0",
                      run_id=f"r{d}") for i in range(3) for d in (1, 2)]
    assert detect_bad_nodes(night, history=passed_nodes(samples)) == []  # 3 of 3 against 0 of 3: 1 in 4 for either
    # which passes count, as the rule weighs them where the chance is small enough to name
    [finding] = detect_bad_nodes(night, history=passed_nodes(samples), limits=WITHOUT_CHANCE)
    assert "3 passed on other nodes in their recent history (n0: 3)" in finding.evidence
    same_node = passed_nodes([Sample("tests/t0.py", "h200", "x", "passed", 1.0, "2026-11-01", node="n1", run_id="r1"),
                              Sample("tests/t1.py", "h200", "x", "passed", 1.0, "2026-11-01", node="n1", run_id="r1")])
    assert detect_bad_nodes(night, history=same_node, limits=WITHOUT_CHANCE) == []  # passing on this very node before says nothing


def test_one_broken_test_failing_three_times_on_a_node_is_not_a_bad_node():
    night = [attempt("tests/broken.py", "n1", "failed", "exit_code", 1) for _ in range(3)]
    night += [attempt(f"tests/ok_{i}.py", "n0") for i in range(30)] + [attempt("tests/broken.py", "n0")]
    assert detect_bad_nodes(night, history={"tests/broken.py": {"n0"}}) == []
    assert suspect_nodes(night) == ()


def test_a_night_where_everything_fails_everywhere_blames_no_node():
    night = [attempt(f"tests/t{i}.py", n, "failed", "exit_code", 1) for i in range(12) for n in ("n0", "n1", "n2")]
    history = {f"tests/t{i}.py": {"n0", "n1", "n2"} for i in range(12)}
    assert detect_bad_nodes(night, history=history) == [] and suspect_nodes(night) == ()


def test_each_failure_on_an_avoided_node_is_retried_once_including_those_before_it_was_found():
    night = [attempt("a", "n1", "failed"), attempt("b", "n0", "failed"), attempt("c", "n1", "timed_out"),
             attempt("d", "n1"), attempt("e", "n1", "infra_error", "evicted")]
    assert [a.test_id for a in retries_due(night, {"n1"})] == ["a", "c"]
    assert [a.test_id for a in retries_due(night, {"n1"}, retried={"a"})] == ["c"]
    assert retries_due(night + [attempt("a", "n0")], {"n1"}, retried={"c"}) == []  # a's last attempt passed
    assert retries_due(night, ()) == []


def test_passed_nodes_keeps_each_tests_newest_runs_and_leaves_tonight_out():
    old = [Sample("t", "h200", "x", "passed", 1.0, f"2026-10-{d:02d}T00:00:00Z", node=f"n{d}", run_id=f"r{d}")
           for d in range(1, 21)]
    tonight = Sample("t", "h200", "x", "passed", 1.0, "2026-10-30T00:00:00Z", node="tonight", run_id="now")
    failed = Sample("u", "h200", "x", "failed", 1.0, "2026-10-01T00:00:00Z", node="n1", run_id="r1")
    assert passed_nodes([*old, tonight, failed], runs=3, exclude_run="now") == {"t": frozenset({"n18", "n19", "n20"})}


def test_a_rocm_only_regression_on_a_one_node_pool_does_not_name_its_healthy_node():
    """Three mi300 tests broken by a ROCm-only change on the one mi300 node; the h200 nodes pass
    theirs. Comparing with the h200 nodes named the mi300 node bad by contrast (3 of 4 vs 0 of 12)."""
    night = [attempt(f"tests/rocm_{i}.py", "mi300-0", "failed", "exit_code", 1) for i in range(3)]
    night += [attempt("tests/rocm_ok.py", "mi300-0")]
    night += [attempt(f"tests/cuda_{i}.py", f"h200-{i % 2}") for i in range(12)]
    pools = {a.test_id: "mi300" if a.node.startswith("mi300") else "h200" for a in night}
    assert detect_bad_nodes(night, pools=pools) == [] and suspect_nodes(night, pools=pools) == ()
    stamped = [dataclasses.replace(a, details={"pool": pools[a.test_id]}) for a in night]  # as run_plan leaves them
    assert detect_bad_nodes(stamped) == [] and suspect_nodes(stamped) == ()
    assert suspect_nodes(night) == ("mi300-0",)  # without pools: one pool, as before


def test_history_passes_count_only_on_other_nodes_of_the_pool_seen_tonight():
    """The tests passed last week on a k8s node since replaced: that says nothing about tonight's nodes."""
    night = [attempt(f"tests/t{i}.py", "n1", "failed", "CUDA error 802", 1) for i in range(3)]
    night += [attempt(f"tests/u{i}.py", "n0") for i in range(3)]
    pools = {a.test_id: "h200" for a in night}
    gone = {f"tests/t{i}.py": {"n-replaced"} for i in range(3)}
    assert detect_bad_nodes(night, history=gone, pools=pools, limits=WITHOUT_CHANCE) == []
    assert suspect_nodes(night, history=gone, pools=pools) == ("n1",)  # still avoided, and its failures retried
    other_pool = {f"tests/t{i}.py": {"m0"} for i in range(3)}
    night_m = night + [attempt("tests/m.py", "m0")]
    assert detect_bad_nodes(night_m, history=other_pool, pools={**pools, "tests/m.py": "mi300"}, limits=WITHOUT_CHANCE) == []
    [finding] = detect_bad_nodes(night, history={f"tests/t{i}.py": {"n0"} for i in range(3)}, pools=pools,
                                 limits=WITHOUT_CHANCE)
    assert finding.rule == "failure_rate" and "recent history (n0: 3)" in finding.evidence


def _try(test: str, node: str, outcome: str, attempt: int = 1, retry_of: str = "") -> Attempt:
    details = {"pool": "h200", **({"retry_of": retry_of} if retry_of else {})}
    return Attempt(test, outcome, 1.0, "2026-12-01T00:00:00+00:00", attempt=attempt, node=node, details=details)  # type: ignore[arg-type]


def test_a_suspect_whose_failures_passed_on_retry_is_named_though_a_failing_retry_shrank_the_gap():
    """The reviewer's CUDA-802 night: node B failed 3 of 4, node A 1 of 4 (a test that fails anyway),
    so B was suspect and its failures were retried on A: two passed, one (an OOM) failed there too.
    Counting every attempt, B (3 of 4) against A (2 of 7) was under the gap and cleared the node, and
    its two failures became the tests' "passed on retry"."""
    night = [_try("t_flaky", "B", "passed"), _try("t_always", "A", "failed"), _try("t_n1", "B", "failed"),
             _try("t_n2", "A", "passed"), _try("t_n3", "B", "failed"), _try("t_n4", "A", "passed"),
             _try("t_oom", "B", "failed"), _try("t_retry", "A", "passed")]
    assert assess_nodes(night) == ([], ("B",))
    half = night + [_try("t_n1", "A", "passed", 2, "B"), _try("t_oom", "A", "failed", 2, "B")]
    assert assess_nodes(half) == ([], ("B",))  # still avoided while t_n3 waits for its retry
    night += [_try("t_n1", "A", "passed", 2, "B"), _try("t_n3", "A", "passed", 2, "B"),
              _try("t_oom", "A", "failed", 2, "B")]
    assert assess_nodes(night) == ([], ("B",))  # 2 of 3 against 1 of 4: 1 in 3 for either node, never named
    [finding], suspects = assess_nodes(night, limits=WITHOUT_CHANCE)  # what the rule counts when it names
    assert (finding.node, finding.rule, suspects) == ("B", "failure_rate", ())
    # the counts the rule judged: first attempts, t_oom (failing on A too) left out
    assert (finding.failed, finding.total, finding.rest_failed, finding.rest_total) == (2, 3, 1, 4)
    assert finding.evidence.startswith(
        "2 of 3 attempts failed here (other nodes: 1 of 4; first attempts only, not counted: 3 retries and "
        "the attempts of 1 test(s) failing on another node too (t_oom)); 2 of the pool's 3 failures here")
    assert "; 2 of these tests passed elsewhere the same night (A: 2)" in finding.evidence
    # history keeps no retry_of: a later attempt elsewhere of a test that failed here is the retry
    plain = [dataclasses.replace(a, details={"pool": "h200"}) for a in night]
    assert [f.node for f in detect_bad_nodes(plain, limits=WITHOUT_CHANCE)] == ["B"]


def test_recent_passes_added_run_by_run_says_what_passed_nodes_says_of_the_same_runs():
    """The replay's incremental evidence must equal passed_nodes of the runs so far, at every run,
    including ties in start time, runs without a pass and a test missing from some runs."""
    import random

    from pipelines.core.health import RecentPasses

    rng = random.Random(11)
    runs = []
    for r in range(40):
        when = f"2026-{1 + r // 28:02d}-{1 + r % 28:02d}T01:00:00Z" if r % 7 else "2026-01-05T01:00:00Z"  # ties
        runs.append([Sample(f"t{k}", "h200", "x", rng.choice(["passed", "passed", "failed", "timed_out"]), 1.0,
                            when, node=f"n{rng.randrange(6)}", run_id=f"r{r}", attempt=a)
                     for k in range(8) if rng.random() < 0.8 for a in (1, 2) if a == 1 or rng.random() < 0.3])
    for keep in (1, 3, 14):
        recent, seen = RecentPasses(keep), []
        for run in [*runs, []]:
            got, want = recent.nodes(), passed_nodes(seen, runs=keep)
            assert (got, got.runs, got.unpassed) == (want, want.runs, want.unpassed)
            recent.add_run(run)
            seen += run


def test_a_bad_nodes_counts_and_tests_are_the_ones_its_rule_judged():
    """The reviewer's night: local-h200-1 broken, test_lora_math failing everywhere (on node 1, then on
    its retry on node 0). The finding said "3 of 3 attempts failed here (other nodes: 1 of 5)" and
    listed test_lora_math, while the rule counts first attempts and leaves out a test failing elsewhere too."""
    night = [_try("t_sft", "local-h200-1", "failed"), _try("t_grpo", "local-h200-1", "failed"),
             _try("t_lora", "local-h200-1", "failed"), _try("t_dp8", "local-h200-0", "passed"),
             _try("t_fsdp", "local-h200-0", "passed"),
             _try("t_sft", "local-h200-0", "passed", 2, "local-h200-1"),
             _try("t_grpo", "local-h200-0", "passed", 2, "local-h200-1"),
             _try("t_lora", "local-h200-0", "failed", 2, "local-h200-1")]
    assert suspect_nodes(night) == ("local-h200-1",)  # 2 of 2 against 0 of 2: 1 in 2 for either node
    [finding] = detect_bad_nodes(night, limits=WITHOUT_CHANCE)  # the counts it shows when it names
    assert (finding.node, finding.rule, finding.tests) == ("local-h200-1", "failure_rate", ("t_sft", "t_grpo"))
    assert (finding.failed, finding.total, finding.rest_failed, finding.rest_total) == (2, 2, 0, 2)
    assert finding.evidence.startswith(
        "2 of 2 attempts failed here (other nodes: 0 of 2; first attempts only, not counted: 3 retries and "
        "the attempts of 1 test(s) failing on another node too (t_lora)); 2 of the pool's 2 failures here")
    assert "; 2 of these tests passed elsewhere the same night (local-h200-0: 2)" in finding.evidence


def _one_a_night(nights: int, tests=("t/a.py", "t/b.py", "t/c.py", "t/d.py")) -> list[Sample]:
    """The reviewer's 12 nights: n1 is broken, and each night a different one of three tests lands
    on it and fails (CUDA error 802); everything else passes on n0."""
    out = []
    for night in range(nights):
        victim = tests[night % 3]
        for i, t in enumerate(tests):
            node = "n1" if t == victim else "n0"
            out.append(Sample(t, "h200", "sha-" + t, "failed" if node == "n1" else "passed", 1.0,
                              f"2026-12-{night + 1:02d}T01:00:0{i}Z", node=node, run_id=f"run{night}"))
    return out


def test_a_node_failing_one_test_a_night_is_named_across_nights_and_its_victims_are_never_flaky():
    from pipelines.core.flaky import FlakyRules, FlakyState, night_verdict, replay

    samples = _one_a_night(12)
    states = replay(samples, FlakyRules())
    assert {t: (s.state, s.evidence) for t, s in states.items()} == {t: ("healthy", ()) for t in
                                                                     ("t/a.py", "t/b.py", "t/c.py", "t/d.py")}
    tonight = [attempt("t/a.py", "n1", "failed", "exit_code", 1)] + [attempt(t, "n0") for t in ("t/b.py", "t/c.py", "t/d.py")]
    history = passed_nodes(samples)
    [finding] = detect_bad_nodes(tonight, history=history)
    assert (finding.node, finding.rule, finding.tests) == ("n1", "history", ("t/a.py", "t/b.py", "t/c.py"))
    assert finding.evidence.startswith("3 different tests failed here in 13 of the last 13 runs (tonight and the 12 "
                                       "before it), each passing on another node and failing on no other node; 13 of "
                                       "the pool's 13 failures")
    # a quarantine (made before this rule, or by hand) never excuses a failure on the node
    v = night_verdict(tonight, {"t/a.py": FlakyState("t/a.py", "quarantined")}, history)
    assert (v.ok, v.failed, v.excused, v.bad_nodes) == (False, ("t/a.py",), (), ("n1",))
    # two nights are not enough: two different tests in two runs
    assert detect_bad_nodes(tonight, history=passed_nodes(_one_a_night(1))) == []
    # the other node, failing nothing of the kind, is not named; nor is n1 on a night it failed nothing
    assert detect_bad_nodes([attempt(t, "n0") for t in ("t/a.py", "t/b.py")] + [attempt("t/c.py", "n1")],
                            history=history) == []


def test_a_test_flaky_on_every_node_is_the_tests_and_names_no_node():
    """Failures spread over both nodes are the test's: quarantined, and no node is blamed for them."""
    from pipelines.core.flaky import FlakyRules, replay

    samples = []
    for night in range(12):
        for i, t in enumerate(("t/flaky.py", "t/ok.py", "t/ok2.py")):
            node = f"n{night % 2}" if t == "t/flaky.py" else f"n{(night + 1) % 2}"
            failed = t == "t/flaky.py" and night % 3 != 2
            samples.append(Sample(t, "h200", "sha", "failed" if failed else "passed", 1.0,
                                  f"2026-12-{night + 1:02d}T01:00:0{i}Z", node=node, run_id=f"run{night}"))
    assert replay(samples, FlakyRules())["t/flaky.py"].state == "quarantined"
    tonight = [attempt("t/flaky.py", "n1", "failed"), attempt("t/ok.py", "n0"), attempt("t/ok2.py", "n0")]
    assert assess_nodes(tonight, history=passed_nodes(samples)) == ([], ())


def _earlier_nights(nights: int = 6) -> list[Sample]:
    """Six nights where t_always failed every night (on both nodes) and every other test passed on n0."""
    out = []
    for d in range(1, nights + 1):
        out += [Sample("always", "h200", "x", "failed", 1.0, f"2026-12-0{d}T01:00:00Z", node=f"n{d % 2}", run_id=f"r{d}")]
        out += [Sample(t, "h200", "x", "passed", 1.0, f"2026-12-0{d}T01:00:01Z", node="n0", run_id=f"r{d}")
                for t in ("flip", "ok", "q", "node1", "node2", "node3")]
    return out


def test_a_broken_or_quarantined_test_counts_in_no_node_failure_rate():
    """The reviewer's night 7: n1 failed q and node3 (both passed on n0 recently) while t_always,
    failing every night for a week, failed on n0: rates 2/3 vs 1/4 were under the gap, n1 was not
    even suspect and its failures were blamed on the tests."""
    history = passed_nodes(_earlier_nights())
    night = [attempt("always", "n0", "failed"), attempt("flip", "n1"), attempt("ok", "n0"), attempt("q", "n1", "failed"),
             attempt("node1", "n0"), attempt("node3", "n1", "failed"), attempt("node2", "n0")]
    assert suspect_nodes(night, history=history) == ("n1",)  # 2 of 3 against 0 of 3: 1 in 3 for either node
    [finding] = detect_bad_nodes(night, history=history, limits=WITHOUT_CHANCE)  # the counts it shows when it names
    assert (finding.node, finding.rule, finding.tests) == ("n1", "failure_rate", ("q", "node3"))
    assert (finding.failed, finding.total, finding.rest_failed, finding.rest_total) == (2, 3, 0, 3)
    assert "not counted: 1 test(s) failing in each of their recent runs (always)" in finding.evidence
    # night 6: the broken test and a quarantined one failing on the healthy node made it suspect (2 retries)
    night6 = [attempt("always", "n0", "failed"), attempt("flip", "n0", "failed"), attempt("ok", "n1"),
              attempt("node1", "n0"), attempt("node2", "n1"), attempt("node3", "n1")]
    assert assess_nodes(night6, history=history, unreliable={"flip"}) == ([], ())
    assert assess_nodes(night6, history=leave_out(history, {"flip"})) == ([], ())
    # a test that failed in only two runs is not yet broken: it still counts, and hides the node as before
    assert detect_bad_nodes(night, history=passed_nodes(_earlier_nights(2)), limits=WITHOUT_CHANCE) == []
    assert suspect_nodes(night, history=passed_nodes(_earlier_nights(2))) == ()


def _one_a_night_even(nights: int) -> list[Sample]:
    """Two nodes with the same share of attempts: n1 fails one test a night (a different one of three,
    each passing on n0 the other nights) and passes another; n0 passes two."""
    tests, out = ("t/a.py", "t/b.py", "t/c.py", "t/d.py"), []
    for night in range(nights):
        victim = tests[night % 3]
        on_n1 = [victim, "t/d.py"]
        for i, t in enumerate(tests):
            node = "n1" if t in on_n1 else "n0"
            out.append(Sample(t, "h200", "sha-" + t, "failed" if t == victim and node == "n1" else "passed", 1.0,
                              f"2026-12-{night + 1:02d}T01:00:0{i}Z", node=node, run_id=f"run{night}"))
    return out


def test_on_two_even_nodes_a_node_failing_one_test_a_night_is_suspect_from_its_6th_night_and_named_from_its_11th():
    """The binomial rule on its smallest case: every lone failure on n1 with half the attempts is 1 in 2**k
    for a healthy node, times 2 nodes: 1 in 32 (suspect, <= 1 in 20) at 6, not at 5 (1 in 16); 1 in 1,024
    (named, <= 1 in 1,000) at 11, not at 10 (1 in 512)."""
    from pipelines.core.flaky import FlakyState, night_verdict

    seen = {}
    for nights in range(2, 13):
        samples = _one_a_night_even(nights)
        tonight = [s for s in samples if s.run_id == f"run{nights - 1}"]
        history = passed_nodes(samples, exclude_run=f"run{nights - 1}")
        atts = [attempt(s.test_id, s.node, s.outcome) for s in tonight]
        named, suspects = judge_nodes(atts, history=history)
        seen[nights] = ([f.rule for f in named], [f.rule for f in suspects])
        if nights == 6:  # a suspect's failure is never excused by a quarantine, and it is not named
            victim = next(a.test_id for a in atts if a.outcome == "failed")
            v = night_verdict(atts, {victim: FlakyState(victim, "quarantined")}, history)
            assert (v.failed, v.excused, v.bad_nodes) == ((victim,), (), ())
            assert detect_bad_nodes(atts, history=history) == []
            assert "suspect, not named" in suspects[0].evidence
    assert seen == {**{n: ([], []) for n in range(2, 6)}, **{n: ([], ["history_suspect"]) for n in range(6, 11)},
                    11: (["history"], []), 12: (["history"], [])}


def test_flaky_tests_failing_now_and_then_on_both_nodes_name_neither():
    """A flaky-only pool the count rule named: n1 had 3 different tests fail in 3 runs, n0 one, all
    passing elsewhere (3 against 1 passed its ratio). With even shares that is 4 lone failures of which
    3 on n1: 5 in 16 for a healthy node, nothing to name or even suspect."""
    samples = []
    fails = {0: ("t/a.py", "n1"), 1: ("t/b.py", "n1"), 2: ("t/d.py", "n0")}
    for night in range(3):
        for i, t in enumerate(("t/a.py", "t/b.py", "t/c.py", "t/d.py")):
            node = "n1" if (i + night) % 2 else "n0"
            if night in fails and fails[night][0] == t:
                node = fails[night][1]
            failed = fails.get(night) == (t, node)
            samples.append(Sample(t, "h200", "sha", "failed" if failed else "passed", 1.0,
                                  f"2026-12-{night + 1:02d}T01:00:0{i}Z", node=node, run_id=f"run{night}"))
    tonight = [attempt("t/c.py", "n1", "failed"), attempt("t/a.py", "n0"), attempt("t/b.py", "n0"), attempt("t/d.py", "n1")]
    assert judge_nodes(tonight, history=passed_nodes(samples)) == ([], [])


def test_the_binomial_tail_is_exact_on_small_counts_and_never_overflows_on_large_ones():
    """The cross-night rule's chance: the exact sum on small counts; a pool with thousands of lone
    failures in its window (comb(n, i) past a float's range) gives a tiny chance, not an OverflowError."""
    import math

    import pytest

    from pipelines.core.health import _tail

    for n, k, s in ((10, 8, 0.5), (13, 13, 0.25), (7, 3, 0.3), (5, 0, 0.4), (4, 5, 0.5)):
        exact = sum(math.comb(n, i) * s ** i * (1 - s) ** (n - i) for i in range(k, n + 1)) if k > 0 else 1.0
        assert _tail(n, k, s) == pytest.approx(exact, rel=1e-12)
    assert 0.0 < _tail(2000, 1500, 0.5) < 1e-100
    assert _tail(3000, 10, 0.5) == pytest.approx(1.0)


def test_two_flaky_failures_on_one_node_of_a_handful_make_it_suspect_never_bad():
    """bench/nodes.py, flaky tests only: two tests failed on one of 4 nodes out of its 4 attempts, the
    retries passed elsewhere (as a flaky test's do), and the node was named bad in 18-25 of 25 fleets;
    it was cordoned and the tests' failures were laid at it. 2 of 4 against 1 of 20 is 1 in 3 for any
    of the 4 nodes: a suspect, avoided and retried from, not named."""
    night = [attempt(f"t/flaky_{i}.py", "n1", "failed") for i in range(2)] + [attempt("t/ok.py", "n1"), attempt("t/ok2.py", "n1")]
    night += [attempt(f"t/u{i}.py", f"n{2 + i % 3}") for i in range(19)] + [attempt("t/other.py", "n2", "failed")]
    night += [Attempt(f"t/flaky_{i}.py", "passed", 1.0, "2026-12-01T00:00:01Z", 2, node="n0", details={"retry_of": "n1"})
              for i in range(2)]
    findings, suspects = judge_nodes(night)
    assert [f.node for f in findings] == [] and [f.node for f in suspects] == ["n1"]
    [held] = suspects
    assert ("2 of the pool's 3 failures here, 2 or more a chance of 1 in 13 for a healthy node with its 4 of the 24 "
            "attempts (1 in 3 for any of the pool's 5 nodes; suspect, not named, above 1 in 1,000)") in held.evidence
    # as many failures again here, each a test that passed elsewhere: 3 of 3 against 0 of 40, named
    night = [attempt(f"t/f{i}.py", "n1", "failed") for i in range(3)] + [attempt(f"t/u{i}.py", "n0") for i in range(40)]
    night += [Attempt(f"t/f{i}.py", "passed", 1.0, "2026-12-01T00:00:01Z", 2, node="n0", details={"retry_of": "n1"})
              for i in range(3)]
    [finding] = detect_bad_nodes(night)
    assert (finding.node, finding.rule) == ("n1", "failure_rate")
    assert "(1 in 1,472 for any of the pool's 2 nodes; named at 1 in 1,000)" in finding.evidence


def test_without_the_chance_every_suspect_is_judged_as_before_and_a_chance_is_never_above_one():
    """The chance for any of the pool's nodes is the one node's times their count: past 1 for a weak suspect
    (0.26 x 4), which the old rule named and `tonight_named_chance=1` (bench/nodes.py's "(old)" column)
    then never judged; and the evidence said the one node's chance as that product over the count."""
    night = [attempt("t/a.py", "A", "failed"), attempt("t/b.py", "A", "failed"), attempt("t/c.py", "A")]
    night += [Attempt(f"t/{x}.py", "passed", 1.0, "2026-12-01T00:00:01Z", 2, node="C", details={"retry_of": "A"})
              for x in ("a", "b")]
    night += [attempt("t/d.py", "B", "failed"), attempt("t/e.py", "B")]
    night += [attempt(f"t/{x}.py", n) for n in ("C", "D") for x in ("f", "g")]
    [finding] = detect_bad_nodes(night, limits=WITHOUT_CHANCE)
    assert (finding.node, finding.rule) == ("A", "failure_rate")
    findings, [held] = judge_nodes(night)
    assert findings == [] and held.node == "A"
    assert ("2 of the pool's 3 failures here, 2 or more a chance of 1 in 4 for a healthy node with its 3 of the 9 "
            "attempts (1 in 1 for any of the pool's 4 nodes; suspect, not named, above 1 in 1,000)") in held.evidence
