"""A signal while a night's tests run: nothing new starts from the moment it arrives, though the night acts
on it only once its wait for a finished test ends (up to half a second later)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from datetime import UTC, datetime

import pytest

from pipelines.core.model import Attempt
from pipelines.core.runset import RunSelection
from pipelines.execute import Finished, run_tests
from pipelines.interrupts import deliver, held_signals
from pipelines.night import Night, NightSettings
from tests.support.assets import two_node_example

TEST_FILE = '''from minirl.ci_register import register_cuda_ci

register_cuda_ci(est_time=1, suite="stage-c-8-gpu-h200", labels=["fnode"])
'''


class SignalledWhileATestRuns:
    """A stand-in launcher: test_f_node1 passes at once; test_f_node2, once ``go`` is set (the night handed
    node1 on and is back waiting for the next finished test), sends SIGTERM to this process and a moment later
    ends as a retriable infra error, whose retry would be a new attempt started after the signal."""

    name = "stand-in"

    def __init__(self):
        self.go = threading.Event()
        self.launched: list[tuple[str, int]] = []

    def launch(self, request, on_log=None) -> Attempt:
        self.launched.append((request.test.id, request.attempt))
        outcome, details = "passed", {}
        if request.test.id.endswith("node2.py") and request.attempt == 1:
            if not self.go.wait(60):
                raise AssertionError("test_f_node1's event never came")
            time.sleep(0.1)  # the night is back in its wait for a finished test
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # well inside that wait: the night holds the signal until this attempt comes
            outcome, details = "infra_error", {"retriable": "true"}
        return Attempt(request.test.id, outcome, 0.1, datetime.now(UTC).isoformat(), request.attempt,
                       node=f"local-h200-{request.node}", gpu_slots=request.gpu_slots, timeout_s=request.timeout_s,
                       details=details)


def test_no_attempt_starts_once_a_signal_arrived_though_the_night_still_holds_it(tmp_path):
    repo, assets = two_node_example(tmp_path, TEST_FILE, count=2)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, repo=str(repo), deployment="two"))
    selection = RunSelection(labels=("fnode",))
    launcher = SignalledWhileATestRuns()
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # as `nightly run` sets it
    try:
        with pytest.raises(KeyboardInterrupt):
            for event in run_tests(night, night.runset(None, selection), selection, launcher=launcher,
                                   say=lambda _: None):
                if isinstance(event, Finished) and event.test.id.endswith("node1.py"):
                    launcher.go.set()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert sorted(launcher.launched) == [("tests/e2e/test_f_node1.py", 1), ("tests/e2e/test_f_node2.py", 1)], \
        "an attempt started after the signal"


class StoppedWhileItsEventIsConverted(SignalledWhileATestRuns):
    """test_f_node2's first attempt ends as a retriable infra error once ``go`` is set; ``interrupt`` keeps
    which signal the night says stopped it and when it came."""

    def __init__(self):
        super().__init__()
        self.returned = threading.Event()
        self.interrupted: list[tuple[int, float | None]] = []

    def launch(self, request, on_log=None) -> Attempt:
        self.launched.append((request.test.id, request.attempt))
        outcome, details = "passed", {}
        if request.test.id.endswith("node2.py") and request.attempt == 1:
            if not self.go.wait(60):
                raise AssertionError("the signal never came")
            outcome, details = "infra_error", {"retriable": "true"}
            self.returned.set()
        return Attempt(request.test.id, outcome, 0.1, datetime.now(UTC).isoformat(), request.attempt,
                       node=f"local-h200-{request.node}", gpu_slots=request.gpu_slots, timeout_s=request.timeout_s,
                       details=details)

    def interrupt(self, signum: int = 0, at: float | None = None) -> list[str]:
        self.interrupted.append((signum, at))
        return []


def test_a_signal_held_while_the_dagster_asset_converts_an_event_stops_the_night_at_once(tmp_path):
    """The Dagster asset holds signals while it turns the night's event into Dagster's (test_runs' each()),
    the night suspended at its yield: no attempt starts once the signal came, and the launcher is told
    which signal stopped the night and when it came, not when it was delivered."""
    repo, assets = two_node_example(tmp_path, TEST_FILE, count=2)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, repo=str(repo), deployment="two"))
    selection = RunSelection(labels=("fnode",))
    launcher = StoppedWhileItsEventIsConverted()
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # as `nightly run` sets it
    events = run_tests(night, night.runset(None, selection), selection, launcher=launcher, say=lambda _: None)
    try:
        for event in events:
            if isinstance(event, Finished) and event.test.id.endswith("node1.py"):
                with held_signals(stopping=False) as held:  # as the asset's conversion of the event
                    sent = time.monotonic()
                    os.kill(os.getpid(), signal.SIGTERM)
                    launcher.go.set()  # test_f_node2 ends after the signal: its retry would start now
                    assert launcher.returned.wait(60)
                    time.sleep(0.5)
                with pytest.raises(KeyboardInterrupt) as raised:
                    deliver(held)
                with pytest.raises(KeyboardInterrupt):  # the asset hands it to the night (_Reporter.after)
                    event = events.throw(raised.value)
                    while True:
                        event = next(events)
                break
    finally:
        signal.signal(signal.SIGTERM, previous)
        events.close()
    assert sorted(launcher.launched) == [("tests/e2e/test_f_node1.py", 1), ("tests/e2e/test_f_node2.py", 1)], \
        "an attempt started after the signal"
    ((signum, at),) = launcher.interrupted
    assert signum == signal.SIGTERM and at is not None and sent <= at < sent + 0.4, (signum, at, sent)


class RunsUntilInterrupted(SignalledWhileATestRuns):
    """test_f_node1 passes at once; test_f_node2 runs until the night interrupts it (then ``interrupted``), or
    ends as a pass after ``GIVE_UP_S``: a night that never acts on its signal ends whole."""

    GIVE_UP_S = 20.0

    def __init__(self):
        super().__init__()
        self.stop = threading.Event()
        self.interrupted: list[tuple[int, float | None]] = []

    def launch(self, request, on_log=None) -> Attempt:
        self.launched.append((request.test.id, request.attempt))
        outcome = "passed"
        if request.test.id.endswith("node2.py") and self.stop.wait(self.GIVE_UP_S):
            outcome = "interrupted"
        return Attempt(request.test.id, outcome, 0.1, datetime.now(UTC).isoformat(), request.attempt,
                       node=f"local-h200-{request.node}", gpu_slots=request.gpu_slots, timeout_s=request.timeout_s)

    def interrupt(self, signum: int = 0, at: float | None = None) -> list[str]:
        self.interrupted.append((signum, at))
        self.stop.set()
        return ["tests/e2e/test_f_node2.py"]


class SignalledInAFinalizer:
    """Sends SIGTERM to this process as it is collected and waits there for the handler, whose KeyboardInterrupt
    Python then discards ("Exception ignored in"), as SQLAlchemy's gc callback ``_collection_gced`` did."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(50):
            time.sleep(0.01)  # the handler runs here: its exception goes no further than this finalizer


def test_a_signal_whose_interrupt_a_finalizer_swallowed_still_stops_the_night_and_kills_its_running_test(
        tmp_path, monkeypatch):
    """The night used to run its tests to their end (PASSED, done) and `nightly run` then said they were killed.
    The night takes the lost interrupt at its next wait for a finished test, as if it had landed there."""
    from pipelines import interrupts

    repo, assets = two_node_example(tmp_path, TEST_FILE, count=2)
    night = Night(NightSettings(home=tmp_path / "home", assets_dir=assets, repo=str(repo), deployment="two"))
    selection = RunSelection(labels=("fnode",))
    launcher = RunsUntilInterrupted()
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # pytest's own, put back after the test
    interrupts.keep_lost_interrupts()  # as `nightly run` does (answer_interrupts)
    previous = signal.signal(signal.SIGTERM, interrupts.interrupt)  # as `nightly run` sets it
    swallowed = []
    try:
        with pytest.raises(KeyboardInterrupt):
            for event in run_tests(night, night.runset(None, selection), selection, launcher=launcher,
                                   say=lambda _: None):
                if isinstance(event, Finished) and event.test.id.endswith("node1.py"):
                    sent = time.monotonic()
                    SignalledInAFinalizer()  # collected at once: the KeyboardInterrupt is lost in its __del__
                    swallowed.append(interrupts._lost[:])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert swallowed == [[(signal.SIGTERM, pytest.approx(sent, abs=0.4))]], "the finalizer did not swallow it"
    ((signum, at),) = launcher.interrupted  # the night stopped on it, told which signal and when it came
    assert signum == signal.SIGTERM and sent <= at < sent + 0.4, (signum, at, sent)
    record = night.summary()
    assert record["status"] == "interrupted", record["notes"]
    assert {a["test_id"]: a["outcome"] for a in record["attempts"]} == {
        "tests/e2e/test_f_node1.py": "passed", "tests/e2e/test_f_node2.py": "interrupted"}
    assert interrupts.lost_interrupt() is None  # taken once
