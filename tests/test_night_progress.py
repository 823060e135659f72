"""The night's progress lines (`nightly run`, the Dagster run's log) count tests, and say which line is a retry."""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime

from pipelines.core.model import Attempt
from pipelines.core.runset import RunSelection
from pipelines.execute import Finished, run_tests
from pipelines.night import Night, NightSettings
from tests.support.assets import two_node_example

TEST_FILE = '''from minirl.ci_register import register_cuda_ci

register_cuda_ci(est_time=1, suite="stage-c-8-gpu-h200", labels=["fnode"])
'''


class BrokenNode1:
    """A stand-in launcher for two local nodes: every test placed on node 1 fails (CUDA error 802). A first
    attempt on node 0 starts only once node 1 has failed twice: node 1 gets two tests whatever the threads'
    scheduling (a busy machine lets node 0 run all the others while node 1 runs one)."""

    name = "stand-in"

    def __init__(self):
        self.lock = threading.Lock()
        self.node1_failed_twice = threading.Event()
        self.node1_failures = 0

    def launch(self, request, on_log=None) -> Attempt:
        node = f"local-h200-{request.node}"
        if node in request.avoid_nodes:
            node = "local-h200-0"
        failed = node == "local-h200-1"
        if not failed and request.attempt == 1:
            assert self.node1_failed_twice.wait(60), "node 1 never ran two tests"
        if failed:
            with self.lock:
                self.node1_failures += 1
                if self.node1_failures >= 2:
                    self.node1_failed_twice.set()
        return Attempt(request.test.id, "failed" if failed else "passed", 0.1, datetime.now(UTC).isoformat(),
                       request.attempt, node=node, gpu_slots=request.gpu_slots, exit_code=int(failed),
                       timeout_s=request.timeout_s)


def test_retries_on_another_node_are_marked_and_never_count_past_the_total(tmp_path):
    repo, assets = two_node_example(tmp_path, TEST_FILE)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, repo=str(repo), deployment="two"))
    selection = RunSelection(labels=("fnode",))
    lines: list[str] = []
    events = list(run_tests(night, night.runset(None, selection), selection, launcher=BrokenNode1(),
                            say=lines.append))
    progress = [line for line in lines if line.startswith("[")]
    retries = [line for line in progress if " retry of " in line]
    failed = [line for line in progress if "  FAILED  " in line]
    assert len(failed) >= 2 and len(retries) == len(failed) and len(progress) == 6 + len(retries), progress
    assert all(line.split("]")[0] in {f"[{k}/6" for k in range(1, 7)} for line in progress), progress
    assert progress[-1].startswith("[6/6] ")
    for line in retries:
        assert " from local-h200-1 (attempt 2)  PASSED " in line and line.endswith("node=local-h200-0"), line
    finished = [e for e in events if isinstance(e, Finished)]
    assert [e.done for e in finished][-1] == 6 and all(e.total == 6 for e in finished)


def test_a_run_dagster_interrupts_while_it_builds_inputs_is_recorded_as_interrupted(tmp_path, monkeypatch):
    import json

    import pytest
    from dagster._core.errors import DagsterExecutionInterruptedError

    needs_model = TEST_FILE + "\ndef prepare():\n    exec_command('hf download minirl/tiny-lm --local-dir /root/models/tiny-lm')\n"
    repo, assets = two_node_example(tmp_path, needs_model)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, repo=str(repo), deployment="two"))
    selection = RunSelection(labels=("fnode",))

    def terminated(req):  # Dagster's terminate (or SIGTERM) reaching the step while a conversion runs
        raise DagsterExecutionInterruptedError()

    monkeypatch.setattr(night, "build", terminated)
    with pytest.raises(DagsterExecutionInterruptedError):
        list(run_tests(night, night.runset(None, selection), selection, launcher=BrokenNode1(), say=lambda _: None))
    record = json.loads(night.state.get(f"runs/{night.run_id}.json"))
    assert record["status"] == "interrupted", record["status"]


class Slow:
    """A stand-in launcher (any launcher, local or Kubernetes, is driven alike) whose two tests run until three
    still-running lines were said once both had started: the night adds each test to what runs in the test's
    own thread, so a busy machine may start the second well after the first (a line between says 1 test)."""

    name = "stand-in"

    def __init__(self, lines: list[str]):
        self.lines = lines
        self.both_started = threading.Barrier(2)
        self.lock = threading.Lock()
        self.from_line: int | None = None  # len(lines) once both tests had started

    def checked(self) -> list[str]:
        """The still-running lines said after both tests started, less the first: the night takes what runs
        just before it says the line, so the first line said after may have been taken before."""
        if self.from_line is None:
            return []
        return [line for line in self.lines[self.from_line:] if line.startswith("still running")][1:]

    def launch(self, request, on_log=None) -> Attempt:
        import time

        begun = time.monotonic()
        self.both_started.wait(timeout=60)
        with self.lock:
            if self.from_line is None:
                self.from_line = len(self.lines)
        while len(self.checked()) < 3:
            assert time.monotonic() - begun < 60, f"no 3 still-running lines in 60 s: {self.lines}"
            time.sleep(0.05)
        elapsed = time.monotonic() - begun
        return Attempt(request.test.id, "passed", elapsed, datetime.now(UTC).isoformat(), request.attempt,
                       node=f"local-h200-{request.node}", gpu_slots=request.gpu_slots, exit_code=0,
                       timeout_s=request.timeout_s)


def test_while_tests_run_without_a_finished_line_a_line_says_which_still_run(tmp_path, monkeypatch):
    """A night prints one line per finished test; a 2-hour test would leave the CI job's log silent (and CI
    kills a silent job): after NIGHTLY_PROGRESS_EVERY_S without a line, one says what still runs."""
    monkeypatch.setenv("NIGHTLY_PROGRESS_EVERY_S", "0.5")
    repo, assets = two_node_example(tmp_path, TEST_FILE, count=2)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, repo=str(repo), deployment="two"))
    selection = RunSelection(labels=("fnode",))
    lines: list[str] = []
    launcher = Slow(lines)
    list(run_tests(night, night.runset(None, selection), selection, launcher=launcher, say=lines.append))
    first_done = next(i for i, line in enumerate(lines) if line.startswith("[1/2] "))
    assert launcher.from_line is not None and launcher.from_line <= first_done, lines
    still = [line for line in lines[launcher.from_line:first_done] if line.startswith("still running")][1:]
    assert len(still) >= 3, lines
    timeout = next(a.timeout_s for a in night.plan(list(night.runset(None, selection).run)).assignments)
    assert timeout < 120  # said in seconds
    for line in still:  # the two tests, each with its time so far and its timeout
        assert re.fullmatch(rf"still running \(2\): tests/e2e/test_f_node[12]\.py \d+s of {timeout}s timeout, "
                            rf"tests/e2e/test_f_node[12]\.py \d+s of {timeout}s timeout", line), line
    assert "tests/e2e/test_f_node1.py" in still[-1] and "tests/e2e/test_f_node2.py" in still[-1]
    assert not any(line.startswith("still running") for line in lines[lines.index(next(
        line for line in lines if line.startswith("[2/2] "))):])


def test_the_still_running_line_is_bounded_and_says_how_many_it_leaves_out():
    from pipelines.execute import still_running

    running = {f"tests/e2e/suite/test_{i:03d}_a_rather_long_name.py": (1000.0 + i, 1800) for i in range(50)}
    line = still_running(running, now=1000.0 + 12 * 60)
    assert line.startswith("still running (50): tests/e2e/suite/test_000_a_rather_long_name.py 12m of 30m timeout, ")
    assert len(line) <= 400 and line.endswith(" more")
    shown = line.count(" timeout")
    assert line.endswith(f", and {50 - shown} more")
    assert still_running({"t.py": (0.0, 7200)}, now=3 * 3600 + 5 * 60) == "still running (1): t.py 3h05m of 2h00m timeout"
    assert still_running({"t.py": (0.0, 60)}, now=42) == "still running (1): t.py 42s of 60s timeout"


def test_a_progress_interval_that_is_no_positive_number_is_said_and_the_default_used():
    from pipelines.execute import PROGRESS_EVERY_S, progress_every_s

    for raw in ("soon", "0", "-5", "nan"):
        said: list[str] = []
        assert progress_every_s(said.append, {"NIGHTLY_PROGRESS_EVERY_S": raw}) == PROGRESS_EVERY_S
        assert said == [f"warning: NIGHTLY_PROGRESS_EVERY_S={raw!r} is not a positive number of seconds; a "
                        "still-running line comes every 300 s without other progress; set it to e.g. 600 or unset it"]
    assert progress_every_s(said.append, {"NIGHTLY_PROGRESS_EVERY_S": "1.5"}) == 1.5
    assert progress_every_s(said.append, {}) == PROGRESS_EVERY_S == 300
