"""The dispatch loop: plan order, GPU limits, infra retries on another node, final outcomes."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

from pipelines.core.model import Attempt, Pool
from pipelines.core.plan import make_plan
from pipelines.core.specs import PoolSpec
from pipelines.launch.base import LaunchRequest
from pipelines.launch.dispatch import run_plan
from tests.conftest import make_test

POOL = PoolSpec("h200", nodes=1, gpus_per_node=8)


class ScriptedLauncher:
    """Returns scripted outcomes per (test, attempt) and records GPU use over time."""

    name = "scripted"

    def __init__(self, outcomes=None, seconds=0.05):
        self.outcomes = outcomes or {}
        self.seconds = seconds
        self.requests: list[LaunchRequest] = []
        self.in_use = 0
        self.peak = 0
        self.lock = threading.Lock()

    def launch(self, request, on_log=None):
        with self.lock:
            self.requests.append(request)
            self.in_use += len(request.gpu_slots)
            self.peak = max(self.peak, self.in_use)
        time.sleep(self.seconds)
        with self.lock:
            self.in_use -= len(request.gpu_slots)
        outcome, reason, extra = self.outcomes.get((request.test.id, request.attempt), ("passed", "", {}))
        node = f"node-{request.attempt}"
        return Attempt(request.test.id, outcome, self.seconds, "2026-12-03T00:00:00+00:00", request.attempt,
                       node=node, gpu_slots=request.gpu_slots, reason=reason, details=extra)


def _factory(tests):
    by_id = {t.id: t for t in tests}

    def make(a, node, slots, attempt, avoid):
        return LaunchRequest(test=by_id[a.test_id], repo_path=Path("."), timeout_s=a.timeout_s,
                             log_path=Path("/dev/null"), attempt=attempt, pool=a.pool, node=node,
                             gpu_slots=slots, avoid_nodes=avoid)
    return make


def _tests():
    return [make_test(id=f"t{i}", path=f"tests/t{i}.py", gpus=g, est_time=e)
            for i, (g, e) in enumerate([(8, 100), (4, 60), (4, 50), (2, 40), (6, 30), (2, 20)])]


def test_every_test_runs_once_in_plan_order_and_the_pool_is_never_oversubscribed():
    tests = _tests()
    plan = make_plan(tests, [POOL])
    launcher = ScriptedLauncher()
    result = run_plan(plan, [Pool("h200", 1, 8)], launcher, _factory(tests))
    assert sorted(a.test_id for a in result.attempts) == sorted(t.id for t in tests)
    assert launcher.peak <= 8
    assert launcher.requests[0].test.id == plan.ordered()[0].test_id
    assert result.makespan_s > 0


def test_an_infra_error_is_retried_avoiding_the_failed_node_and_a_test_failure_is_not():
    tests = _tests()[:2]
    outcomes = {("t0", 1): ("infra_error", "gpu_unusable", {}), ("t1", 1): ("failed", "exit 1", {})}
    launcher = ScriptedLauncher(outcomes)
    result = run_plan(make_plan(tests, [POOL]), [Pool("h200", 1, 8)], launcher, _factory(tests), max_infra_retries=2)
    final = result.final()
    assert final["t0"].outcome == "passed" and final["t0"].attempt == 2
    retry = [r for r in launcher.requests if r.test.id == "t0" and r.attempt == 2][0]
    assert retry.avoid_nodes == ("node-1",)
    assert final["t1"].outcome == "failed" and [r.attempt for r in launcher.requests if r.test.id == "t1"] == [1]


def test_an_infra_error_marked_not_retriable_is_final():
    tests = _tests()[:1]
    outcomes = {("t0", 1): ("infra_error", "unschedulable", {"retriable": "false"})}
    launcher = ScriptedLauncher(outcomes)
    result = run_plan(make_plan(tests, [POOL]), [Pool("h200", 1, 8)], launcher, _factory(tests), max_infra_retries=2)
    assert [a.attempt for a in result.attempts] == [1]
    assert result.final()["t0"].reason == "unschedulable"


def test_retries_stop_at_the_limit():
    tests = _tests()[:1]
    outcomes = {("t0", n): ("infra_error", "node_lost", {}) for n in (1, 2, 3, 4)}
    result = run_plan(make_plan(tests, [POOL]), [Pool("h200", 1, 8)], ScriptedLauncher(outcomes), _factory(tests),
                      max_infra_retries=2)
    assert [a.attempt for a in result.attempts] == [1, 2, 3]


def test_nodes_found_bad_during_the_night_are_avoided_by_later_attempts():
    tests = _tests()[:2]
    launcher = ScriptedLauncher()
    run_plan(make_plan(tests, [POOL]), [Pool("h200", 1, 8)], launcher, _factory(tests), avoid_nodes=lambda: ("bad-7",))
    assert all(r.avoid_nodes == ("bad-7",) for r in launcher.requests)


def test_a_launcher_crash_is_raised_not_swallowed():
    tests = _tests()[:1]

    class Broken(ScriptedLauncher):
        def launch(self, request, on_log=None):
            raise RuntimeError("launcher bug")

    try:
        run_plan(make_plan(tests, [POOL]), [Pool("h200", 1, 8)], Broken(), _factory(tests))
    except RuntimeError as exc:
        assert "launcher bug" in str(exc)
    else:
        raise AssertionError("the crash was swallowed")


def test_after_an_error_no_new_test_starts_and_running_tests_are_waited_for():
    tests = _tests()[:3]  # 8 GPUs, then two 4-GPU tests side by side
    finished: list[str] = []

    class Slow(ScriptedLauncher):
        def launch(self, request, on_log=None):
            attempt = super().launch(request, on_log)
            finished.append(request.test.id)
            return attempt

    def on_finish(attempt):
        if attempt.test_id == "t0":
            raise RuntimeError("history store down")

    launcher = Slow(seconds=0.3)
    try:
        run_plan(make_plan(tests, [POOL]), [Pool("h200", 1, 8)], launcher, _factory(tests), on_finish=on_finish)
    except RuntimeError as exc:
        assert "history store down" in str(exc)
    else:
        raise AssertionError("the error was swallowed")
    started = [r.test.id for r in launcher.requests]
    assert started == ["t0"], "a test started after the error"
    assert finished == ["t0"]


class TwoNodeLauncher(ScriptedLauncher):
    """Node n1 fails every test it runs (CUDA error 802); n0 passes; an avoided node is never used."""

    def launch(self, request, on_log=None):
        with self.lock:
            self.requests.append(request)
        time.sleep(self.seconds)
        node = "n1" if request.node == 1 and "n1" not in request.avoid_nodes else "n0"
        outcome = "failed" if node == "n1" else "passed"
        return Attempt(request.test.id, outcome, self.seconds, "2026-12-03T00:00:00+00:00", request.attempt,
                       node=node, gpu_slots=request.gpu_slots, exit_code=1 if node == "n1" else 0,
                       reason="CUDA error 802" if node == "n1" else "")


class BrokenNodeFirst(TwoNodeLauncher):
    """As TwoNodeLauncher, but a first attempt on n0 starts only once n1 has failed twice: n1 gets two tests
    whatever the threads' scheduling (a busy machine let n0 run all the others while n1 ran one)."""

    def __init__(self, seconds):
        super().__init__(seconds=seconds)
        self.n1_failed_twice = threading.Event()
        self.n1_failures = 0

    def launch(self, request, on_log=None):
        on_n1 = request.node == 1 and "n1" not in request.avoid_nodes
        if not on_n1 and request.attempt == 1:
            assert self.n1_failed_twice.wait(60), "n1 never ran two tests"
        attempt = super().launch(request, on_log)
        if on_n1:
            with self.lock:
                self.n1_failures += 1
                if self.n1_failures >= 2:
                    self.n1_failed_twice.set()
        return attempt


def _night_on_two_nodes(nodes: int):
    tests = [make_test(id=f"t{i}", path=f"tests/t{i}.py", gpus=8, est_time=10) for i in range(6)]
    pool = PoolSpec("h200", nodes=nodes, gpus_per_node=8)
    launcher = BrokenNodeFirst(seconds=0.02) if nodes == 2 else TwoNodeLauncher(seconds=0.02)
    attempts = []

    def bad():  # what the night's callback says: n1 once two of its attempts failed
        return ("n1",) if sum(a.node == "n1" and a.outcome == "failed" for a in list(attempts)) >= 2 else ()

    result = run_plan(make_plan(tests, [pool]), [Pool("h200", nodes, 8)], launcher, _factory(tests),
                      on_finish=attempts.append, avoid_nodes=bad)
    return result, launcher


def test_each_failure_on_a_node_found_bad_is_retried_once_elsewhere_even_from_before_it_was_found():
    result, launcher = _night_on_two_nodes(2)
    failed = [a for a in result.attempts if a.outcome == "failed"]
    assert len(failed) >= 2 and all(a.node == "n1" and a.attempt == 1 for a in failed)
    retries = [a for a in result.attempts if a.attempt == 2]
    assert sorted(a.test_id for a in retries) == sorted(a.test_id for a in failed)  # the first failure too
    assert all(a.outcome == "passed" and a.node == "n0" and a.details["retry_of"] == "n1" for a in retries)
    assert all(r.avoid_nodes[0] == "n1" for r in launcher.requests if r.attempt == 2)
    assert {a.outcome for a in result.final().values()} == {"passed"} and len(result.final()) == 6


def test_a_one_node_pool_has_nowhere_to_retry_and_its_failures_stand():
    class OneNode(TwoNodeLauncher):
        def launch(self, request, on_log=None):
            return super().launch(dataclasses.replace(request, node=1, avoid_nodes=()), on_log)

    tests = [make_test(id=f"t{i}", path=f"tests/t{i}.py", gpus=8, est_time=10) for i in range(3)]
    result = run_plan(make_plan(tests, [POOL]), [Pool("h200", 1, 8)], OneNode(seconds=0.01), _factory(tests),
                      avoid_nodes=lambda: ("n1",))
    assert [a.attempt for a in result.attempts] == [1, 1, 1]
    assert {a.outcome for a in result.final().values()} == {"failed"}


def test_retries_elsewhere_wait_for_freed_gpus_so_the_pool_is_never_oversubscribed():
    """Reviewer's night: eight 8-GPU tests on 2x8 GPUs, n1 fails everything; the retries once
    reused GPUs already handed to another test (32 GPUs requested at once)."""

    class Counting(TwoNodeLauncher):
        def launch(self, request, on_log=None):
            with self.lock:
                self.in_use += len(request.gpu_slots)
                self.peak = max(self.peak, self.in_use)
            try:
                return super().launch(request, on_log)
            finally:
                with self.lock:
                    self.in_use -= len(request.gpu_slots)

    tests = [make_test(id=f"t{i}", path=f"tests/t{i}.py", gpus=8, est_time=10) for i in range(8)]
    launcher = Counting(seconds=0.05)
    attempts: list[Attempt] = []

    def bad():
        return ("n1",) if sum(a.node == "n1" and a.outcome == "failed" for a in list(attempts)) >= 2 else ()

    result = run_plan(make_plan(tests, [PoolSpec("h200", 2, 8)]), [Pool("h200", 2, 8)], launcher, _factory(tests),
                      on_finish=attempts.append, avoid_nodes=bad)
    assert launcher.peak <= 16
    assert {a.outcome for a in result.final().values()} == {"passed"} and len(result.final()) == 8
    retries = [a for a in result.attempts if a.attempt == 2]
    assert retries and all(a.node == "n0" and a.details["retry_of"] == "n1" for a in retries)
    assert {a.details["pool"] for a in result.attempts} == {"h200"}  # bad nodes are judged within their pool


class LoggingLauncher(ScriptedLauncher):
    """Passes every test (exit 0) after writing the scripted log text to the attempt's log."""

    def __init__(self, logs: dict[str, str]):
        super().__init__(seconds=0.0)
        self.logs = logs

    def launch(self, request, on_log=None):
        request.log_path.write_text(self.logs[request.test.id])
        attempt = super().launch(request, on_log)
        return dataclasses.replace(attempt, log_path=str(request.log_path), exit_code=0)


def _logged_night(tmp_path, logs: dict[str, str]):
    tests = [make_test(id=tid, path=f"tests/{tid}.py", gpus=1, est_time=10) for tid in logs]
    make = _factory(tests)

    def with_log(a, node, slots, attempt, avoid):
        return dataclasses.replace(make(a, node, slots, attempt, avoid), log_path=tmp_path / f"{a.test_id}.log")

    return run_plan(make_plan(tests, [POOL]), [Pool("h200", 1, 8)], LoggingLauncher(logs), with_log).final()


def test_a_test_that_exits_0_but_reports_a_failed_configuration_is_failed(tmp_path):
    final = _logged_night(tmp_path, {
        "matrix": "config megatron-tp2: passed\nconfig fsdp-tp1: failed\n",
        "early": "[minirl] config dense-tp1: failed\n" + "step ok\n" * 5000 + "config moe-tp2: passed\n",
        "green": "config megatron-tp2: passed\nconfig fsdp-tp1: passed\n",
        "plain": "no configurations here\n",
    })
    assert final["matrix"].outcome == "failed" and final["matrix"].reason == "config fsdp-tp1 reported failed"
    assert final["matrix"].details["configs"] == "megatron-tp2=passed,fsdp-tp1=failed"
    # a failure reported far before the log's end counts as much as one at its end
    assert final["early"].outcome == "failed" and final["early"].reason == "config dense-tp1 reported failed"
    assert final["green"].outcome == "passed" and final["green"].details["configs"] == "megatron-tp2=passed,fsdp-tp1=passed"
    assert final["plain"].outcome == "passed" and "configs" not in final["plain"].details


def test_a_failed_configuration_behind_a_logging_or_torchrun_prefix_fails_the_test(tmp_path):
    final = _logged_night(tmp_path, {
        "logging": "INFO:__main__:config fsdp-tp2: failed\n",
        "torchrun": "[default0]:config megatron-tp2: passed\n[default1]:config megatron-tp4: failed\n",
        "near-miss": "reconfig fsdp-tp2: failed\nmyconfig a: failed\n",
    })
    assert final["logging"].outcome == "failed" and final["logging"].reason == "config fsdp-tp2 reported failed"
    assert final["torchrun"].outcome == "failed" and final["torchrun"].reason == "config megatron-tp4 reported failed"
    assert final["near-miss"].outcome == "passed" and "configs" not in final["near-miss"].details


def test_a_line_of_megabytes_is_skipped_in_chunks_and_the_reports_around_it_still_count(tmp_path):
    """A pod log has no cap: a test printing without newlines made one line of gigabytes, read whole (2 GB of
    memory for 1 GB) to look for `config ` reports. Overlong lines are skipped in 64 KiB chunks; the reports
    before and after them, and one at the very end without a newline, are read."""
    from pipelines.core.model import Attempt
    from pipelines.launch.base import CONFIG_LINE_MAX, judge_reported_configs

    log = tmp_path / "t.log"
    log.write_bytes(b"config tp1: passed\n" + b"x" * (3 * CONFIG_LINE_MAX + 7) + b" config tp9: failed\n"
                    + b"y" * CONFIG_LINE_MAX + b"\nconfig tp2: failed\nconfig tp4: passed")
    judged = judge_reported_configs(Attempt("t", "passed", 1.0, "2026-12-01T00:00:00+00:00", log_path=str(log)))
    assert (judged.outcome, judged.details["configs"]) == ("failed", "tp1=passed,tp2=failed,tp4=passed")
