"""Bad-node detection from one night's attempts."""

from __future__ import annotations

from pipelines.core.health import avoid_nodes, detect_bad_nodes, report_lines
from pipelines.core.model import Attempt


def attempt(test: str, node: str, outcome: str = "passed", reason: str = "", exit_code: int | None = None) -> Attempt:
    return Attempt(test_id=test, outcome=outcome, elapsed_s=10.0, started_at="2026-12-01T00:00:00Z", node=node,
                   reason=reason, exit_code=exit_code)


def test_the_host_that_failed_12_of_12_tests_that_passed_elsewhere_is_named_with_evidence():
    night = [attempt(f"tests/test_{i}.py", "h200-c", "failed", "exit_code", 1) for i in range(12)]
    night += [attempt(f"tests/test_{i}.py", "h200-a" if i < 8 else "h200-b") for i in range(12)]  # the retries passed
    night += [attempt(f"tests/other_{i}.py", "h200-a") for i in range(10)] + [attempt("tests/flaky.py", "h200-b", "failed", "exit_code", 1)]
    [finding] = detect_bad_nodes(night)
    assert (finding.node, finding.rule, finding.failed, finding.total) == ("h200-c", "failure_rate", 12, 12)
    assert finding.evidence.startswith("12 of 12 attempts failed here (other nodes: 1 of 23); "
                                       "12 of these tests passed elsewhere the same night (h200-a: 8, h200-b: 4)")
    assert "e.g. tests/test_0.py (exit_code, exit 1)" in finding.evidence and "and 9 more" in finding.evidence
    assert avoid_nodes([finding]) == ("h200-c",)
    assert report_lines([finding]) == [f"- bad node h200-c: {finding.evidence}"]


def test_tests_that_fail_everywhere_do_not_blame_a_node():
    night = [attempt(f"tests/test_{i}.py", n, "failed", "exit_code", 1) for i in range(6) for n in ("h200-a",)]
    night += [attempt(f"tests/test_{i}.py", "h200-b", "failed", "exit_code", 1) for i in range(6)]
    night += [attempt(f"tests/ok_{i}.py", "h200-b") for i in range(6)]
    assert detect_bad_nodes(night) == []


def test_failures_that_never_passed_elsewhere_are_the_tests_own():
    night = [attempt(f"tests/new_{i}.py", "h200-a", "failed", "exit_code", 1) for i in range(5)]
    night += [attempt(f"tests/ok_{i}.py", "h200-b") for i in range(10)]
    assert detect_bad_nodes(night) == []


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
