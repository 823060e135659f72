"""What a real cluster does that the happy path never shows: slow pulls, throttling, dropped
connections and streams, interrupted nights, dead runs' pods, the plan's nodes, refused cordons.

All against the stand-in API server with the real client; faults are injected by the server
(``StandInApiServer.fail``, ``log_cuts``), never by patching the launcher.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from pipelines.launch.base import judge_reported_configs
from pipelines.launch.kubernetes import logstream
from pipelines.launch.kubernetes.launcher import KubernetesLauncher
from pipelines.launch.kubernetes.nodes import cordon_bad_nodes
from pipelines.launch.kubernetes.ownership import launched_by, run_pod_owner, sweep_stale_pods
from pipelines.launch.procs import start_time
from tests.launch.kubernetes import pods
from tests.launch.kubernetes.apiserver import StandInApiServer, Step, gpu_node, qos_class
from tests.launch.kubernetes.test_k8s_launcher import DEPLOYMENT, PENDING_WAIT_S, POOL, launcher, request

DIGEST = "sha256:" + "7e" * 32


def launch(tmp_path, script, server=None, req=None, **kw):
    with (server or StandInApiServer(script=script)) as srv:
        if server is not None:
            srv.script = script
        run, seen = launcher(srv, **kw)
        lines: list[str] = []
        final = run.launch(req or request(tmp_path), lines.append)
    return final, seen, srv, lines


def forever(node):
    return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running(), logs=("training",))]


# -- resources and time --------------------------------------------------------------------
def test_the_api_server_sees_a_burstable_pod_not_best_effort(tmp_path):
    _, _, server, _ = launch(tmp_path, lambda pod, node: pods.passes(node))
    assert qos_class(server.created[0]["spec"]) == "Burstable"
    assert qos_class({"containers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}]}) == "BestEffort"


def test_a_slow_pull_and_preflight_do_not_eat_the_tests_time(tmp_path):
    req = dataclasses.replace(request(tmp_path), timeout_s=1)
    final, _, _, lines = launch(tmp_path, lambda pod, node: pods.passes_after_preflight(node, startup_s=1.5), req=req,
                                  startup_wait_s=30.0)
    assert (final.outcome, final.reason) == ("passed", ""), final.details["message"]
    assert lines == ["step 1 loss=2.0", "done"]


def test_a_test_running_past_its_timeout_from_its_own_start_is_timed_out_and_deleted(tmp_path):
    req = dataclasses.replace(request(tmp_path), timeout_s=1)
    final, seen, server, _ = launch(tmp_path, lambda pod, node: forever(node), req=req)
    assert (final.outcome, final.reason, len(seen)) == ("timed_out", "test_timeout", 1)
    assert final.elapsed_s >= 1.0 and not server.state.pods


@pytest.mark.slow  # waits out the startup limit
def test_a_pod_stuck_in_its_preflight_is_an_infra_startup_timeout_retried_elsewhere(tmp_path):
    def script(pod, node):
        if node == "h200-a":
            return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.preflight_running())]
        return pods.passes_after_preflight(node)
    _, seen, _, _ = launch(tmp_path, script, startup_wait_s=PENDING_WAIT_S)
    assert [(a.outcome, a.reason, a.node) for a in seen] == [("infra_error", "startup_timeout", "h200-a"),
                                                             ("passed", "", "h200-b")]


def test_the_deadline_before_the_test_started_is_infra_after_it_a_timeout(tmp_path):
    deadline = {"reason": "DeadlineExceeded", "phase": "Failed"}

    def stuck(pod):
        pod["status"].update(deadline)
    _, seen, _, _ = launch(tmp_path, lambda pod, node: [Step(mutate=pods.scheduled(node)), Step(mutate=pods.preflight_running()),
                                                          Step(mutate=stuck)], retries=0)
    assert (seen[0].outcome, seen[0].reason) == ("infra_error", "startup_timeout")
    final, _, _, _ = launch(tmp_path, lambda pod, node: pods.ends(node, pods.terminated("Failed", 137, "Error",
                                                                                        pod_reason="DeadlineExceeded")))
    assert (final.outcome, final.reason) == ("timed_out", "deadline_exceeded")


def test_every_attempt_records_the_digest_it_asked_for_and_the_image_the_node_ran(tmp_path):
    final, _, server, _ = launch(tmp_path, lambda pod, node: pods.passes(node), image_digests={"h200": DIGEST})
    assert server.created[0]["spec"]["containers"][0]["image"] == f"{POOL.image}@{DIGEST}"
    assert final.details["image_digest"] == DIGEST
    assert final.details["image_id"] == f"{POOL.image}@{DIGEST}"


# -- a flaky API ---------------------------------------------------------------------------
def test_throttled_and_failing_creates_are_retried_and_make_one_pod(tmp_path):
    server = StandInApiServer()
    server.fail("POST", "/pods", 429)
    server.fail("POST", "/pods", 503)
    server.fail("POST", "/pods", 0)  # connection dropped before the server saw the pod
    final, _, server, _ = launch(tmp_path, lambda pod, node: pods.passes(node), server=server)
    assert final.outcome == "passed" and len(server.created) == 1


def test_a_create_whose_answer_was_lost_adopts_its_own_pod(tmp_path):
    server = StandInApiServer()
    server.fail("POST", "/pods", 0, after=True)  # the pod exists; the answer never arrived
    final, _, server, _ = launch(tmp_path, lambda pod, node: pods.passes(node), server=server)
    assert final.outcome == "passed" and len(server.created) == 1
    assert final.details["pod"] == server.created[0]["metadata"]["name"]


def test_deletes_and_watches_survive_server_errors(tmp_path):
    server = StandInApiServer()
    server.fail("DELETE", "/pods/", 500)
    server.fail("GET", "/pods", 503, times=2)  # the watch (and anything else that reads pods)
    final, _, server, _ = launch(tmp_path, lambda pod, node: pods.passes(node), server=server)
    assert final.outcome == "passed" and not server.state.pods
    assert len(server.deleted) == 1, "the failed DELETE never reached the store; the retry did"


def test_a_log_stream_cut_mid_way_resumes_without_losing_or_repeating_lines(tmp_path):
    server = StandInApiServer()
    server.log_cuts = 1
    logs = tuple(f"step {i}" for i in range(5))

    def script(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running(), logs=logs),
                Step(delay_s=0.5, mutate=pods.terminated("Succeeded", 0, "Completed"), logs=("done",))]
    final, _, _, lines = launch(tmp_path, script, server=server, log_join_s=5.0)
    assert lines == [*logs, "done"]
    text = Path(final.log_path).read_text()
    assert "log stream dropped after 1 lines" in text and text.count("step 3") == 1


def rotated_at_cut(server, first, logs):
    """A script whose pod prints ``logs`` (the first six lines at once); the stream is cut after five
    lines and the kubelet rotates the log meanwhile, so a stream opened again starts at ``first``."""
    server.log_cuts, server.log_cut_after = 1, 5
    server.on_log_cut = lambda name: server.rotate(name, first)

    def script(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running(), logs=logs[:6]),
                Step(delay_s=0.3, mutate=pods.terminated("Succeeded", 0, "Completed"), logs=logs[6:])]
    return script


#: a matrix test's output: a failed configuration in line 6, a passed one in the last
MATRIX = ("step 1", "step 2", "step 3", "step 4", "step 5", "config tp2: failed", "step 7", "step 8", "step 9",
          "step 10", "step 11", "config tp1: passed")


def test_a_log_stream_reopened_after_a_rotation_writes_every_line_once(tmp_path):
    """The reopened stream starts at line 4 (the kubelet's newest log file), not at line 1: lines are
    skipped by their time, not counted, so line 6 is neither skipped nor repeated."""
    server = StandInApiServer()
    final, _, _, lines = launch(tmp_path, rotated_at_cut(server, 3, MATRIX), server=server, log_join_s=5.0)
    assert lines == list(MATRIX)
    text = Path(final.log_path).read_text()
    assert "log stream dropped after 5 lines" in text and "its log is unfinished" not in text
    assert (final.outcome, "log_unfinished" in final.details) == ("passed", False)
    assert judge_reported_configs(final).reason == "config tp2 reported failed"


def test_a_log_stream_reopened_past_lines_rotated_away_says_so_and_cannot_pass(tmp_path):
    """The reopened stream starts at line 7: line 6 was rotated away unread. The log says where lines
    may be missing, and the attempt does not pass on what is left."""
    server = StandInApiServer()
    final, _, _, lines = launch(tmp_path, rotated_at_cut(server, 6, MATRIX), server=server, log_join_s=5.0)
    assert lines == [*MATRIX[:5], *MATRIX[6:]]
    why = ("the pod's log stream, opened again after a drop, no longer held the last line written (the kubelet "
           "rotated the container's log meanwhile), so lines may be lost")
    text = Path(final.log_path).read_text()
    assert f"step 5\n# nightly: log stream dropped after 5 lines (ProtocolError); resuming\n# nightly: {why}: its log " \
           "is unfinished (after 5 lines; lines may be missing here)\nstep 7\n" in text
    assert (final.outcome, final.reason, final.details["log_unfinished"]) == (
        "failed", f"{why}: its log is unfinished, so it cannot pass", "true")


def test_a_log_stream_not_ended_when_the_pod_ended_never_passes_on_the_unfinished_log(tmp_path):
    """The stream drops and cannot be reopened before the launcher's wait for it ends: the lines
    after the drop (a failed configuration among them) never reach the log the night judges. The API
    refused the log (503), so the test's outcome is unknown: an infra error, not a pass nor its failure."""
    server = StandInApiServer()
    server.log_cuts = 1  # after the first line; every stream opened again is refused
    server.on_log_cut = lambda name: server.fail("GET", "/log", 503, times=10_000)

    def script(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running(), logs=("step 1",)),
                Step(delay_s=0.3, mutate=pods.terminated("Succeeded", 0, "Completed"),
                     logs=("config tp2: failed", "config tp1: passed"))]
    final, _, _, lines = launch(tmp_path, script, server=server, log_join_s=0.5, retries=0)
    assert lines == ["step 1"]
    assert (final.outcome, final.reason, final.details["log_unfinished"]) == ("infra_error", "log_unreadable", "true")
    why = "the pod's log stream had not ended 0.5 s after the attempt did (the last try: 503 Service Unavailable)"
    text = Path(final.log_path).read_text()
    assert (f"# nightly: {why}: its log is unfinished (the lines above may not be the test's last)\n"
            f"# nightly: verdict infra_error: {why}: its log is unfinished, so the test's outcome is unknown "
            "(passed: phase=Succeeded") in text
    assert judge_reported_configs(final).outcome == "infra_error"


def test_a_log_stream_still_bringing_lines_after_the_pod_ended_is_waited_for_and_the_test_passes(tmp_path):
    """A slow link to the kubelet: the test's last lines (a long log's tail) arrive over several seconds after
    the pod ended. The wait for them (``log_join_s``, here 0.5 s) runs from the last line, not from the pod's
    end: a pass was ``failed`` ("its log is unfinished") on a log that was still coming, whole."""
    server = StandInApiServer()
    server.log_line_delay_s = 0.05  # 40 lines: 2 s, four times the wait
    tail = tuple(f"step {i}" for i in range(39))

    def script(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running()),
                Step(mutate=pods.terminated("Succeeded", 0, "Completed"), logs=(*tail, "done"))]
    final, seen, _, lines = launch(tmp_path, script, server=server, log_join_s=0.5)
    assert lines == [*tail, "done"]
    assert [(a.outcome, "log_unfinished" in a.details) for a in seen] == [("passed", False)], final.details


def test_a_stream_reopened_after_a_drop_replays_the_lines_written_and_is_still_waited_for(tmp_path):
    """The slow link drops after 40 of 60 lines; the reopened stream replays those 40 (skipped: written
    already) before the 20 new ones. The replay is the stream moving too: counting only new lines, the wait
    gave up during it and the pass became infra_error/log_unreadable, a whole GPU test run again."""
    server = StandInApiServer()
    server.log_line_delay_s = 0.05
    server.log_cuts, server.log_cut_after = 1, 40
    lines_after = tuple(f"step {i}" for i in range(60))

    def script(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running()),
                Step(mutate=pods.terminated("Succeeded", 0, "Completed"), logs=lines_after)]
    final, seen, _, lines = launch(tmp_path, script, server=server, log_join_s=0.5, retries=0)
    assert lines == list(lines_after)
    assert [(a.outcome, "log_unfinished" in a.details) for a in seen] == [("passed", False)], final.details


def test_a_log_stream_a_proxy_keeps_open_after_the_pod_ended_is_an_infra_error_not_the_tests_failure(tmp_path):
    """Every line came, the container ended, and the stream never ends (a proxy holding it open): what the
    night waited for is the connection's doing, never the test's. The pass was ``failed``, the test's own
    failure; its outcome is unknown: infra_error/log_unreadable, retried once on another node."""
    server = StandInApiServer()
    server.log_held_open = True
    final, seen, _, lines = launch(tmp_path, lambda pod, node: pods.passes(node), server=server, log_join_s=0.5)
    assert [(a.outcome, a.reason, a.node, a.details["retriable"]) for a in seen] == [
        ("infra_error", "log_unreadable", "h200-a", "true"), ("infra_error", "log_unreadable", "h200-b", "false")]
    said = [line for line in Path(final.log_path).read_text().splitlines() if "log is unfinished (" in line]
    assert lines[-1] == "done" and len(said) == 1, said  # every line came: the stream only did not end
    assert said[0].startswith("# nightly: the pod's log stream had not ended 0.5 s after "), said
    assert "so the test's outcome is unknown (passed: " in final.details["message"]


def test_a_log_stream_still_bringing_lines_at_the_longest_wait_is_an_infra_error(tmp_path, monkeypatch):
    """The wait for a stream that keeps bringing lines ends at ``JOIN_MOST_S`` (here 1 s): the log is
    unfinished by the connection's pace, so the outcome is unknown, not the test's failure."""
    monkeypatch.setattr(logstream, "JOIN_MOST_S", 1.0)
    server = StandInApiServer()
    server.log_line_delay_s = 0.05
    lines_after = tuple(f"step {i}" for i in range(200))  # 10 s of lines

    def script(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running()),
                Step(mutate=pods.terminated("Succeeded", 0, "Completed"), logs=lines_after)]
    final, seen, _, lines = launch(tmp_path, script, server=server, log_join_s=0.5, retries=0)
    assert 0 < len(lines) < len(lines_after)
    assert (seen[0].outcome, seen[0].reason) == ("infra_error", "log_unreadable"), seen[0].details
    assert "# nightly: the pod's log stream was still bringing lines 1 s after the attempt ended: its log is " \
        "unfinished" in Path(final.log_path).read_text()


@pytest.mark.parametrize(("status", "said"), [(403, "403 Forbidden"), (502, "502 Bad Gateway")])
def test_a_log_the_api_never_serves_is_an_infra_error_retried_once_not_the_tests_failure(tmp_path, status, said):
    """Every pods/log request refused (403: the role lacks pods/log; 502: the API server cannot reach the
    kubelet): a passing test was ``failed``, not retried, recorded as the test's own failure. Its outcome is
    unknown: infra_error/log_unreadable, retried once on another node (a second refusal is final)."""
    server = StandInApiServer()
    server.fail("GET", "/log", status, times=10_000)
    final, seen, _, _ = launch(tmp_path, lambda pod, node: pods.passes(node), server=server, log_join_s=0.5)
    assert [(a.outcome, a.reason, a.node, a.details["retriable"]) for a in seen] == [
        ("infra_error", "log_unreadable", "h200-a", "true"), ("infra_error", "log_unreadable", "h200-b", "false")]
    assert said in final.details["message"] and "so the test's outcome is unknown (passed: " in final.details["message"]
    assert "# nightly: verdict infra_error: the pod's log stream" in Path(final.log_path).read_text()


def test_a_second_once_per_night_outcome_of_another_reason_is_final_too(tmp_path):
    """The log refused on h200-a, the pod failed before its container ran on h200-b: the rule was
    kept per (test, reason), so a third node was tried (and a fourth, alternating). The second
    once-per-night outcome of the test, whatever its reason, is final."""
    server = StandInApiServer()
    server.fail("GET", "/log", 403, times=10_000)

    def script(pod, node):
        if node == "h200-b":
            return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.failed_before_start())]
        return pods.passes(node)
    final, seen, _, _ = launch(tmp_path, script, server=server, log_join_s=0.5)
    assert [(a.outcome, a.reason, a.node, a.details["retriable"]) for a in seen] == [
        ("infra_error", "log_unreadable", "h200-a", "true"),
        ("infra_error", "failed_without_container", "h200-b", "false")]
    assert final.details["attempts"] == (
        "1:infra_error/log_unreadable@h200-a; 2:infra_error/failed_without_container@h200-b")


def test_a_failure_whose_log_the_api_never_serves_stays_the_tests_failure(tmp_path):
    server = StandInApiServer()
    server.fail("GET", "/log", 403, times=10_000)
    final, seen, _, _ = launch(tmp_path, lambda pod, node: pods.ends(node, pods.terminated("Failed", 1, "Error")),
                               server=server, log_join_s=0.5)
    assert [(a.outcome, a.reason) for a in seen] == [("failed", "exit_code")]


@pytest.mark.parametrize("how", ["close", "mid_chunk", "reset"])
def test_a_log_stream_cut_by_the_connection_resumes_and_the_test_passes(tmp_path, how):
    """The connection under a follow stream breaks (between chunks, or in the middle of one: an incomplete
    chunk, a TCP reset), not an HTTP error: the stream is opened again and every line arrives once."""
    server = StandInApiServer()
    server.log_cuts, server.log_cut_how = 1, how
    logs = tuple(f"step {i}" for i in range(5))

    def script(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running(), logs=logs),
                Step(delay_s=0.5, mutate=pods.terminated("Succeeded", 0, "Completed"), logs=("done",))]
    final, seen, _, lines = launch(tmp_path, script, server=server, log_join_s=5.0)
    assert lines == [*logs, "done"]
    assert [(a.outcome, "log_unfinished" in a.details) for a in seen] == [("passed", False)]
    assert "# nightly: log stream dropped after 1 lines (" in Path(final.log_path).read_text()


@pytest.mark.parametrize("how", ["close", "mid_chunk", "reset"])
def test_a_log_the_connection_never_lets_be_read_to_its_end_is_an_infra_error_retried_once(tmp_path, how):
    """The stream breaks after the first line and every reopening of that pod's log loses its connection
    (no HTTP status): the pass was ``failed``, the test's own failure, not retried. Lines after the break
    (a failed configuration among them) were never read, so its outcome is unknown: infra_error/
    log_unreadable, retried once on another node, where the log is read whole and the test passes."""
    server = StandInApiServer()
    server.log_cuts, server.log_cut_how = 1, how
    server.on_log_cut = lambda name: server.fail("GET", f"/pods/{name}/log", 0, times=10_000)

    def script(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running(), logs=("step 1",)),
                Step(delay_s=0.3, mutate=pods.terminated("Succeeded", 0, "Completed"),
                     logs=("config tp2: failed", "config tp1: passed"))]
    final, seen, _, lines = launch(tmp_path, script, server=server, log_join_s=0.5)
    assert [(a.outcome, a.reason, a.node, a.details["retriable"]) for a in seen] == [
        ("infra_error", "log_unreadable", "h200-a", "true"), ("passed", "", "h200-b", "false")]
    assert seen[0].details["log_unfinished"] == "true"
    assert "so the test's outcome is unknown (passed: " in seen[0].details["message"]
    assert lines == ["step 1", "step 1", "config tp2: failed", "config tp1: passed"]
    assert judge_reported_configs(final).reason == "config tp2 reported failed"


def test_a_log_stream_that_dropped_near_the_end_is_reopened_at_once_not_after_its_backoff(tmp_path):
    """Reopening backs off while the test runs (here 0.2 s, 0.4 s, 0.8 s, 1.6 s, ...); once the pod
    has ended its last lines are wanted now: a backoff that outlasts the wait for them cuts the log."""
    server = StandInApiServer()
    server.log_cuts = 1
    server.fail("GET", "/log", 503, times=3)

    def script(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running(), logs=("step 1",)),
                Step(delay_s=1.5, mutate=pods.terminated("Succeeded", 0, "Completed"),
                     logs=("config tp2: failed", "done"))]
    final, _, _, lines = launch(tmp_path, script, server=server, log_join_s=1.0, backoff_s=0.2)
    assert lines == ["step 1", "config tp2: failed", "done"]
    assert (final.outcome, "log_unfinished" in final.details) == ("passed", False)
    assert judge_reported_configs(final).reason == "config tp2 reported failed"


# -- runs that end badly -------------------------------------------------------------------
def test_cancel_all_deletes_running_pods_and_starts_no_more(tmp_path):
    with StandInApiServer(script=lambda pod, node: forever(node)) as server:
        run, _ = launcher(server)
        out: list = []
        training = threading.Event()
        t = threading.Thread(target=lambda: out.append(run.launch(request(tmp_path), lambda line: training.set())))
        t.start()
        assert training.wait(30), "the test never started"
        assert run.cancel_all() == [server.created[0]["metadata"]["name"]]
        t.join(30)
        said = Path(out[0].log_path).read_text()  # the next launch writes to the same path
        after = run.launch(dataclasses.replace(request(tmp_path), attempt=5))
    # interrupted, as a local test killed by Ctrl-C is: the night's stop, not an infra fault of the node
    assert (out[0].outcome, out[0].reason, out[0].node) == ("interrupted", "deleted", "h200-a")
    assert (after.outcome, after.reason) == ("interrupted", "cancelled") and len(server.created) == 1
    assert not server.state.pods
    assert "# nightly: verdict interrupted: the night was interrupted and its pod deleted (deleted: " in said
    assert Path(after.log_path).read_text().endswith(
        "# nightly: verdict interrupted: the night was interrupted before this pod was created\n")


def test_a_pod_deleted_by_an_interrupt_while_its_image_pulls_is_interrupted_not_an_image_pull_error(tmp_path):
    """cancel_all deletes a pod still in ImagePullBackOff: the API then says the pod was deleted
    while its image could not be had, which on its own is an image pull error of its node; here the
    night's own interrupt ended it, so it is ``interrupted``, as a running pod's deletion is."""
    script = lambda pod, node: [Step(mutate=pods.scheduled(node)),  # noqa: E731
                                Step(mutate=pods.waiting("ImagePullBackOff", "Back-off pulling image"))]
    with StandInApiServer(script=script) as server:
        run, seen = launcher(server)
        out: list = []
        t = threading.Thread(target=lambda: out.append(run.launch(request(tmp_path))))
        t.start()
        deadline = time.monotonic() + 30
        while not any(((c.get("state") or {}).get("waiting") or {}).get("reason") == "ImagePullBackOff"
                      for p in server.state.pods.values() for c in (p.get("status") or {}).get("containerStatuses") or []):
            assert time.monotonic() < deadline, "the pod never waited for its image"
            time.sleep(0.05)
        run.cancel_all()
        t.join(30)
    assert [(a.outcome, a.reason) for a in seen] == [("interrupted", "deleted")]
    assert (out[0].outcome, out[0].reason) == ("interrupted", "deleted")


def test_a_pod_deleted_by_an_interrupt_never_makes_its_node_bad_in_the_flaky_replay(tmp_path):
    """A pod cancel_all deleted must reach history as ``interrupted``, not an infra error: history
    from before infra reasons were kept takes any infra error on a node as the node's, and would
    excuse the failures there. Test B fails on h200-a the night test A's pod is deleted
    there by the interrupt: B's failure is B's own (a flip), not the node's."""
    from pipelines.core.flaky import replay
    from pipelines.core.history import sample_from_attempt
    from pipelines.core.model import Sample

    with StandInApiServer(script=lambda pod, node: forever(node)) as server:
        run, _ = launcher(server)
        out: list = []
        training = threading.Event()
        t = threading.Thread(target=lambda: out.append(run.launch(request(tmp_path), lambda line: training.set())))
        t.start()
        assert training.wait(30), "the test never started"
        run.cancel_all()
        t.join(30)
    [cut] = out
    a = request(tmp_path).test
    b = "tests/e2e/test_b.py"
    ran = lambda run_id, day, outcome: Sample(b, "h200", a.sha256, outcome, 50.0,  # noqa: E731
                                              f"2026-12-0{day}T02:00:00+00:00", node="h200-a", run_id=run_id)
    history = [ran("r1", 1, "passed"), ran("r2", 2, "failed"), sample_from_attempt(cut, a, "r2"), ran("r3", 3, "passed")]
    assert history[2].outcome == "interrupted"
    assert replay(history)[b].state == "flaky"  # two flips on the same code and image


def test_the_sweeper_deletes_pods_of_ended_runs_only(tmp_path):
    """Pods owned by a run's pod: run-1 ended, run-2 is alive, run-3 is another instance's; only
    run-1's pod goes. Pods no run pod owns were made outside the cluster: their run's Dagster
    status is no evidence (the cluster's run monitor fails a workstation's live night), only a
    gone process on this host is; a live one, or one on another host, is left alone."""
    asked = []

    def ended(run_ids):
        asked.append(run_ids)
        return [r for r in run_ids if r == "run-1"]

    gone_pid = _dead_pid()
    here = launched_by()  # this process, on this boot, in this PID namespace
    killed = here.replace(f"pid={os.getpid()} start={start_time(os.getpid())}", f"pid={gone_pid} start=1")
    owner = [{"apiVersion": "v1", "kind": "Pod", "name": "dagster-run-x", "uid": "u"}]
    with StandInApiServer(script=lambda pod, node: forever(node)) as server:
        api = server.core_v1()
        for name, run, meta in (
                ("dead", "run-1", {"ownerReferences": owner}), ("live", "run-2", {"ownerReferences": owner}),
                ("elsewhere", "run-3", {"ownerReferences": owner}), ("by-hand", "", {}),
                ("workstation", "run-1", {"annotations": {"nightly-e2e.io/launched-by": "laptop-7:4242"}}),
                ("running-here", "run-1", {"annotations": {"nightly-e2e.io/launched-by": here}}),
                ("killed-here", "run-4", {"annotations": {"nightly-e2e.io/launched-by": killed}})):
            labels = {"app.kubernetes.io/managed-by": "nightly-e2e", **({"nightly-e2e.io/run-id": run} if run else {})}
            api.create_namespaced_pod("nightly-e2e", {"apiVersion": "v1", "kind": "Pod",
                                                      "metadata": {"name": name, "labels": labels, **meta},
                                                      "spec": {"containers": [{"name": "test", "image": "x"}]}})
        assert sweep_stale_pods(api, DEPLOYMENT, ended) == ["dead", "killed-here"]
        assert sorted(server.state.pods) == ["by-hand", "elsewhere", "live", "running-here", "workstation"]
    assert asked == [["run-1", "run-2", "run-3"]]


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_every_pod_says_which_process_on_which_host_created_it(tmp_path):
    _, _, server, _ = launch(tmp_path, lambda pod, node: pods.passes(node))
    assert server.created[0]["metadata"]["annotations"]["nightly-e2e.io/launched-by"] == launched_by()


def test_the_runs_pod_is_found_from_the_downward_api_or_by_hostname(tmp_path):
    env = {"POD_NAME": "dagster-run-abc", "POD_UID": "uid-9"}
    assert run_pod_owner(None, "nightly-e2e", env) == {"apiVersion": "v1", "kind": "Pod", "name": "dagster-run-abc",
                                                       "uid": "uid-9"}
    assert run_pod_owner(None, "nightly-e2e", {}) is None, "outside a cluster nothing owns the pods"
    with StandInApiServer() as server:
        api = server.core_v1()
        api.create_namespaced_pod("nightly-e2e", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": socket.gethostname()},
                                                  "spec": {"containers": [{"name": "run", "image": "x"}]}})
        owner = run_pod_owner(api, "nightly-e2e", {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert owner == {"apiVersion": "v1", "kind": "Pod", "name": socket.gethostname(), "uid": "uid-1"}


def test_a_refused_cordon_is_a_note_and_the_night_goes_on():
    with StandInApiServer() as server:
        server.fail("PATCH", "/nodes/h200-a", 403)
        notes: list[str] = []
        on = dataclasses.replace(DEPLOYMENT, cordon_bad_nodes=True)
        done = cordon_bad_nodes(server.core_v1(), on, [("h200-a", "bad"), ("h200-b", "bad too")], notes)
    assert done == ["h200-b"]
    assert notes == ["cordon h200-a: refused (403 stand-in fault 403); cordon it by hand (kubectl cordon) "
                     "or apply k8s/overlays/cordon"]


# -- the plan's nodes ----------------------------------------------------------------------
def test_the_plans_virtual_nodes_are_pinned_to_usable_nodes_of_the_pool(tmp_path):
    nodes = [gpu_node("h200-a"), gpu_node("h200-b", gpus=4),  # too few GPUs for a whole-node pool
             gpu_node("h200-c"), gpu_node("h200-d"), gpu_node("l40-a", product="NVIDIA-L40S")]
    nodes[3]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    server = StandInApiServer(node_objects=nodes)
    req = dataclasses.replace(request(tmp_path), node=1)
    final, _, server, _ = launch(tmp_path, lambda pod, node: pods.passes(node), server=server, req=req)
    assert final.node == "h200-c", "virtual node 1 = the second usable node (a, c)"
    terms = server.created[0]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"] == [
        {"key": "metadata.name", "operator": "In", "values": ["h200-c"]}]


def test_a_node_with_a_taint_the_pool_does_not_tolerate_is_never_pinned_and_the_night_says_why(tmp_path):
    """The kubelet's disk-pressure taint (NoSchedule) and an admin's maintenance taint (NoExecute) keep
    the pool's pods off h200-a and h200-b: a pod pinned there would be Pending until the unschedulable
    limit. A PreferNoSchedule taint keeps none off. (The pin is what is checked: a pod pinned to a tainted node
    would never be scheduled.)"""
    nodes = [gpu_node(n) for n in ("h200-a", "h200-b", "h200-c", "h200-d")]
    nodes[0]["spec"]["taints"].append({"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"})
    nodes[1]["spec"]["taints"].append({"key": "example.com/maintenance", "value": "fabric", "effect": "NoExecute"})
    nodes[2]["spec"]["taints"].append({"key": "example.com/busy", "effect": "PreferNoSchedule"})
    with StandInApiServer(script=lambda pod, node: pods.passes(node), node_objects=nodes) as server:
        run, _ = launcher(server)
        final = run.launch(request(tmp_path), lambda line: None)
        later = run.launch(dataclasses.replace(request(tmp_path), node=1, attempt=2), lambda line: None)
    assert (final.outcome, final.node, later.node) == ("passed", "h200-c", "h200-d")
    terms = server.created[0]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["h200-c"]
    assert run.notes == [
        "pool h200: node h200-a not used: taint node.kubernetes.io/disk-pressure=:NoSchedule not tolerated; remove the "
        "taint (kubectl taint nodes h200-a KEY-) or tolerate it in pools.h200.tolerations of the deployment",
        "pool h200: node h200-b not used: taint example.com/maintenance=fabric:NoExecute not tolerated; remove the "
        "taint (kubectl taint nodes h200-b KEY-) or tolerate it in pools.h200.tolerations of the deployment",
        "pool h200: 2 usable node(s), the plan has 4; the rest run unpinned"]


@pytest.mark.parametrize(("toleration", "taint", "expected"), [
    ({"operator": "Exists"}, {"key": "any", "value": "v", "effect": "NoExecute"}, True),  # empty key: every taint
    ({"operator": "Exists", "effect": "NoSchedule"}, {"key": "any", "effect": "NoExecute"}, False),
    ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
    ({"key": "k", "operator": "Exists"}, {"key": "other", "effect": "NoSchedule"}, False),
    ({"key": "k", "operator": "Equal", "value": "v"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
    ({"key": "k", "value": "v"}, {"key": "k", "value": "w", "effect": "NoSchedule"}, False),  # no operator: Equal
    ({"key": "k", "operator": "Equal"}, {"key": "k", "effect": "NoSchedule"}, True),  # both values empty
    ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, {"key": "k", "value": "v",
                                                                                 "effect": "NoExecute"}, False),
])
def test_tolerations_match_taints_by_the_schedulers_rules(toleration, taint, expected):
    from pipelines.launch.kubernetes.nodes import tolerated

    assert tolerated(taint, [toleration]) is expected


def eks_nodes(*hosts: str) -> list[dict]:
    """Nodes as EKS and kops make them: named by FQDN, their ``kubernetes.io/hostname`` label the short name."""
    nodes = [gpu_node(f"{h}.ec2.internal") for h in hosts]
    for node, host in zip(nodes, hosts, strict=True):
        node["metadata"]["labels"]["kubernetes.io/hostname"] = host
    return nodes


def unschedulable_unless_placed(pod, node):
    if not node:  # what kube-scheduler says when no node matches the pod's affinity
        return [Step(mutate=pods.unschedulable("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."))]
    return pods.passes(node)


def test_a_pod_is_pinned_by_node_name_where_the_hostname_label_differs(tmp_path):
    server = StandInApiServer(node_objects=eks_nodes("ip-10-0-1-1", "ip-10-0-1-2", "ip-10-0-1-3"))
    req = dataclasses.replace(request(tmp_path), node=1)
    final, seen, _, _ = launch(tmp_path, unschedulable_unless_placed, server=server, req=req, pending_wait_s=2)
    assert [(a.outcome, a.node) for a in seen] == [("passed", "ip-10-0-1-2.ec2.internal")], seen[0].details["message"]


def test_a_bad_node_is_avoided_by_name_where_the_hostname_label_differs(tmp_path):
    bad = "ip-10-0-1-1.ec2.internal"
    def script(pod, node):
        return pods.ends(node, pods.preflight_failed(86)) if node == bad else unschedulable_unless_placed(pod, node)
    server = StandInApiServer(node_objects=eks_nodes("ip-10-0-1-1", "ip-10-0-1-2", "ip-10-0-1-3"))
    req = dataclasses.replace(request(tmp_path), node=0)
    _, seen, _, _ = launch(tmp_path, script, server=server, req=req, pending_wait_s=2)
    assert [(a.outcome, a.reason, a.node) for a in seen] == [
        ("infra_error", "gpu_unusable", bad), ("passed", "", "ip-10-0-1-2.ec2.internal")]


def test_without_rights_to_list_nodes_pods_run_unpinned_with_a_note(tmp_path):
    server = StandInApiServer(script=lambda pod, node: pods.passes(node))
    server.fail("GET", "/api/v1/nodes", 403)
    with server:
        run, _ = launcher(server)
        final = run.launch(request(tmp_path))
    assert final.outcome == "passed" and "affinity" not in server.created[0]["spec"]
    assert run.notes == ["pool h200: nodes not listed (403 Forbidden); pods are not pinned to the plan's nodes; "
                         "apply k8s/components/node-reader"]


def test_a_node_selector_the_api_server_refuses_is_named_not_blamed_on_rights(tmp_path):
    """A PoolSpec built in code skips the specs' check: the listing's 400 names the selector, not RBAC."""
    pool = dataclasses.replace(POOL, node_selector={"nvidia.com/gpu.product": "NVIDIA H200"})
    deployment = dataclasses.replace(DEPLOYMENT, pools=(pool,))
    with StandInApiServer(script=lambda pod, node: pods.passes(node)) as server:
        run = KubernetesLauncher(server.core_v1(), deployment, tick_s=0.02, watch_timeout_s=1, log_join_s=2.0)
        final = run.launch(request(tmp_path))
    assert (final.outcome, final.reason) == ("infra_error", "create_rejected"), "and the pod is refused too"
    assert run.notes == ["pool h200: nodes not listed: the API server refused the node_selector "
                         "'nvidia.com/gpu.product=NVIDIA H200' (400 unable to parse requirement: "
                         "values[0][nvidia.com/gpu.product]: Invalid value: \"NVIDIA H200\": a valid label must be an "
                         "empty string or consist of alphanumeric characters, '-', '_' or '.'); pods are not pinned to "
                         "the plan's nodes; fix node_selector in assets/cluster.yaml"]


def test_a_launcher_without_pins_never_lists_nodes(tmp_path):
    with StandInApiServer(script=lambda pod, node: pods.passes(node)) as server:
        KubernetesLauncher(server.core_v1(), DEPLOYMENT, pin_nodes=False, tick_s=0.02, watch_timeout_s=1,
                           log_join_s=2.0).launch(request(tmp_path))
    assert not [p for _, p in server.requests if p.startswith("/api/v1/nodes")]


@pytest.mark.slow  # waits out the pending limit
def test_a_pod_pinned_to_a_node_it_cannot_get_is_retried_on_another_node(tmp_path):
    def script(pod, node):
        if node == "h200-a":  # cordoned since the night started, or full of someone else's pods
            return [Step(mutate=pods.unschedulable("0/4 nodes are available: 1 node(s) were unschedulable."))]
        return pods.passes(node)
    _, seen, server, _ = launch(tmp_path, script, pending_wait_s=PENDING_WAIT_S)
    assert [(a.outcome, a.reason, a.node, a.details["retriable"]) for a in seen] == [
        ("infra_error", "unschedulable", "h200-a", "true"), ("passed", "", "h200-b", "false")]
    assert "(pinned to h200-a)" in seen[0].details["message"]


@pytest.mark.slow  # waits out the pending limit
def test_a_pinned_pod_held_by_kueue_is_not_retried_elsewhere(tmp_path):
    _, seen, _, _ = launch(tmp_path, lambda pod, node: [Step(mutate=pods.gated())], pending_wait_s=PENDING_WAIT_S)
    assert [(a.reason, a.details["retriable"]) for a in seen] == [("unschedulable", "false")]


def test_a_node_lost_tonight_is_pinned_to_no_more_and_its_virtual_nodes_later_tests_run_elsewhere(tmp_path):
    """The pins are listed at night start. h200-a is lost under a test (NotReady, then the unreachable taint
    and the taint manager's deletion): the next test the plan put on the same virtual node must not be pinned
    to it, or it waits the unschedulable limit (30 minutes in production) before its retry runs elsewhere."""
    server = StandInApiServer()
    lost: list[str] = []

    def lose_h200_a(pod):
        lost.append("h200-a")
        node = next(n for n in server.node_objects if n["metadata"]["name"] == "h200-a")
        node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
        node["spec"]["taints"].append({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"})

    def script(pod, node):
        if not node:  # what kube-scheduler says of a pod pinned to the unreachable node
            return [Step(mutate=pods.unschedulable(
                "0/4 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, "
                "3 node(s) didn't match Pod's node affinity/selector."))]
        if node == "h200-a" and not lost:
            return pods.ends(node, pods.together(lose_h200_a, pods.node_not_ready()),
                             pods.disruption("DeletionByTaintManager"))
        return pods.passes(node)

    with server:
        server.script = script
        run, seen = launcher(server, retries=0, pending_wait_s=PENDING_WAIT_S, startup_wait_s=PENDING_WAIT_S)
        first = run.launch(dataclasses.replace(request(tmp_path), node=0))
        test = dataclasses.replace(request(tmp_path).test, id="tests/e2e/test_sft.py", path="tests/e2e/test_sft.py")
        later = run.launch(dataclasses.replace(request(tmp_path), test=test, node=0,
                                               log_path=tmp_path / "logs" / "sft.attempt1.log"))
    assert (first.outcome, first.reason, first.node) == ("infra_error", "node_lost", "h200-a")
    assert [(a.test_id, a.outcome, a.node) for a in seen[1:]] == [("tests/e2e/test_sft.py", "passed", "h200-b")], \
        seen[-1].details["message"]
    assert "affinity" not in server.created[-1]["spec"], "unpinned: the scheduler picks a node"
    why = ("not pinned to h200-a (the plan's node 0 of pool h200): node_lost of tests/e2e/test_grpo.py attempt 1 "
           "there earlier tonight; the scheduler picks the node")
    assert later.details["unpinned"] == why
    assert f"# nightly: {why}\n" in Path(later.log_path).read_text()
    assert run.notes == ["pool h200: the plan's node 0 no longer pinned to h200-a (node_lost of "
                         "tests/e2e/test_grpo.py attempt 1); its later tests ran unpinned"]
