"""Run the tests of one run: plan, inputs, GPU-aware dispatch, history, the night's record.

This generator is the one implementation behind every way in (``nightly run``, schedules,
sensors, UI picks and backfills all materialize ``test_runs``, whose body drives it). It yields
our own events as things happen, so the Dagster asset only turns them into materializations,
observations and check results, and stays thin. No Dagster import here.

When the consumer stops early (SIGINT/SIGTERM, a terminated run), nothing new starts, running
tests are killed through the launcher, and every attempt still reaches history and the record.

A worker can also die without a word (kill -9, an evicted run pod). So the record is not only
written at the end: a partial one (``"status": "running"``) is stored as soon as the run is planned
and rewritten after each finished attempt, and each attempt's log goes to the state store as the
attempt finishes. A night whose worker died is then in ``nightly report`` as incomplete, with the
attempts and logs that finished, instead of missing.
"""

from __future__ import annotations

import dataclasses
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pipelines.core.health import detect_bad_nodes, leave_out
from pipelines.core.model import Attempt, Plan, Requirement, Test
from pipelines.core.plan.accuracy import night_record, record_to_json
from pipelines.core.plan.predict import predicted_text
from pipelines.core.report import printable
from pipelines.core.runset import RunSelection, RunSet
from pipelines.interrupts import deliver, held_signals, lost_interrupt, signals_noted
from pipelines.launch.base import Launcher
from pipelines.launch.dispatch import DispatchResult
from pipelines.night import UNSAVED, Night, ResultsNotStored, SamplesNotStored
from pipelines.storage.cache import BuildError, Built
from pipelines.storage.state import StateError


@dataclass(frozen=True)
class Planned:
    plan: Plan
    runset: RunSet


@dataclass(frozen=True)
class InputReady:
    requirement: Requirement
    built: Built


@dataclass(frozen=True)
class InputFailed:
    requirement: Requirement
    error: str


@dataclass(frozen=True)
class Finished:
    attempt: Attempt
    test: Test
    #: how many of the run's tests have finished (a retry counts its test once), and how many it launches
    done: int = 0
    total: int = 0
    #: the test was quarantined as flaky when the night started: a failure does not fail the night
    quarantined: bool = False


@dataclass(frozen=True)
class NightDone:
    summary: dict = field(default_factory=dict)


Event = Planned | InputReady | InputFailed | Finished | NightDone


def _input_failure(test: Test, error: str, timeout_s: int) -> Attempt:
    """An attempt that never launched because an input it needs could not be built (infra); it starts
    when the failure is known, so history orders it with its night (an empty start sorts before every
    night and once put its night first in duration trends). Stamped to the millisecond in the launchers' form
    (``...T01:19:20.450Z``): cut to the second, it came up to 1 s before the night's first launch."""
    return Attempt(test_id=test.id, outcome="infra_error", elapsed_s=0.0,
                   started_at=datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                   timeout_s=timeout_s,
                   reason=f"input not available: {error}", details={"retriable": "false", "stage": "inputs"})


def run_tests(night: Night, runset: RunSet, selection: RunSelection, *, launcher: Launcher | None = None,
              say: Callable[[str], None] = print, infra: dict | None = None,
              tags: dict[str, str] | None = None,
              ended_runs: Callable[[list[str]], Iterable[str]] | None = None) -> Iterator[Event]:
    """Plan and run ``runset``; yields events as they happen and ends with the night's record.

    ``ended_runs``: which of the given run ids have ended (Kubernetes: their pods are swept first).
    """
    _stop_if_lost()  # a signal while Dagster set the run up, whose KeyboardInterrupt a finalizer swallowed
    night.history_at_start  # noqa: B018 - an unreadable history store stops the run before any test starts
    night.pin_images(infra or {})
    for pod in night.sweep_pods(ended_runs):
        say(f"deleted pod {pod}, left running by a run that is gone")
    if night.deployment.launcher == "local":
        for build in night.cache.reap_builds():  # first: a live one would write its .partial folder again
            say(f"killed an input build an earlier night left running: {build}")
        for leftover in night.cache.clean_partials():
            say(f"removed a half-built input an earlier build left: {leftover}")
    reaped = night.reap_orphans(refused=say)
    if pruned := night.prune_logs():  # the logs of nights older than the deployment's keep_log_nights
        say(pruned)
    killed = [a.test_id for a in reaped if a.details.get("reaped") == "killed"]
    ended = [a.test_id for a in reaped if a.details.get("reaped") != "killed"]
    if killed:
        say(f"killed {len(killed)} test(s) an earlier night left running and recorded them as interrupted: "
            f"{', '.join(killed)}")
    if ended:
        say(f"recorded {len(ended)} test(s) an earlier night left, which ended unobserved, as interrupted: "
            f"{', '.join(ended)}")
    tests = list(runset.run)
    plan = night.plan(tests)
    states = _flaky_states(night, tests)
    # the night's nodes are judged with its quarantined tests out of their failure rates (a flaky test's
    # failure is its own), in the dispatch, the verdict and the record alike
    night.node_history = leave_out(night.node_history, [t for t, st in states.items() if st.state == "quarantined"])
    progress = _Progress(night, runset, selection, plan, infra or {}, tags or {}, states, say)
    progress.write()  # from here on the run is in the store, even if its worker dies without a word
    try:
        yield Planned(plan, runset)
        yield from _run_planned(night, runset, selection, tests, plan, progress, launcher, say, infra, tags)
    except BaseException as exc:
        if not progress.done:  # ended before its record: say how, keep what finished
            with held_signals():  # a second Ctrl-C would leave the record saying "running"
                progress.write(*_how_it_ended(exc))
        raise


def _run_planned(night: Night, runset: RunSet, selection: RunSelection, tests: list[Test], plan: Plan,
                 progress: _Progress, launcher: Launcher | None, say: Callable[[str], None], infra: dict | None,
                 tags: dict[str, str] | None) -> Iterator[Event]:
    attempts_before: list[Attempt] = []
    failed_inputs: dict[str, str] = {}
    reqs = night.requirements_for(tests)
    for i, req in enumerate(reqs, 1):
        _stop_if_lost()  # between builds: a signal a finalizer swallowed stops the night before its next input
        missing = [d for d in req.depends_on if d in failed_inputs]
        try:
            if missing:
                raise BuildError(f"{req.key}: needs {', '.join(missing)}, which failed to build")
            built = night.build(req)
        except BuildError as exc:
            failed_inputs[req.key] = str(exc)
            say(f"[{i}/{len(reqs)}] {req.kind} {req.key}: FAILED {printable(str(exc))}")  # a converter's output
            yield InputFailed(req, str(exc))
            continue
        verb = "reused" if built.reused else f"built in {built.seconds:.1f}s"
        if built.rebuilt:
            verb += f" (rebuilt: {built.rebuilt})"
        say(f"[{i}/{len(reqs)}] {req.kind} {req.key}: {verb}")
        yield InputReady(req, built)
    if failed_inputs:  # tests whose inputs are missing are infra errors, never launched
        blocked = [t for t in tests if any(k in failed_inputs for k in t.requirements)]
        for i, t in enumerate(blocked, 1):  # counted with the night's tests: [1/2] of 2 selected, not [1/1]
            key = next(k for k in t.requirements if k in failed_inputs)
            a = _input_failure(t, failed_inputs[key], night.timeout_for(t))
            attempts_before.append(a)
            say(f"[{i}/{len(tests)}] {t.id}  INFRA_ERROR  not launched: {printable(a.reason)}")
            progress.finished(a)
            yield Finished(a, t, i, len(tests), t.id in progress.quarantined)
        if blocked:  # the rest run on a plan without them: its prediction is the night's, said as it changes
            tests = [t for t in tests if t not in blocked]
            before, plan = plan, night.plan(tests)
            progress.plan, progress.replanned = plan, replan_record(before, blocked)
            say(f"re-planned without the {len(blocked)} test(s) whose inputs failed: "
                f"{predicted_text(plan.predicted_median_s, plan.predicted_p90_s, plan.makespan_s)} (lower bound "
                f"{plan.lower_bound_s:.1f}s), was {predicted_text(before.predicted_median_s, before.predicted_p90_s, before.makespan_s)}"
                " at the start; the night's record and report judge the new figure")

    images = dict(night.probed_images)  # the probe's digests run_tests pinned: what samples record (Night.tonight)
    launcher = launcher or night.launcher()
    outcome: dict = {}

    def record(result: DispatchResult, notes: list[str], interrupted: bool, failed: str = "") -> dict:
        attempts = [*attempts_before, *result.attempts]
        for a in attempts:  # those stored as their attempt finished are not sent again
            night.store_log(a, notes)
        summary = night_summary(night, runset, selection, plan, result, attempts_before, notes,
                                infra=infra or {}, tags=tags or {}, interrupted=interrupted,
                                replanned=progress.replanned)
        summary.update(flaky_verdict(night, attempts, notes, progress.states, launched=[t.id for t in runset.run]))
        if failed:  # ended early by an error, not a signal: no one stopped it
            summary["status"] = "failed"
            summary["error"] = failed  # what the verdict names (report.py)
            summary["verdict"]["ok"] = False  # a night a bug stopped is never OK, whatever its tests did
        unsaved = outcome.get("unsaved")
        try:
            night.write_summary(summary)
        except StateError as exc:  # the store refuses writes (credentials expired mid-night): keep it here
            progress.done = True  # a partial record would be refused too
            raise night.keep_unsaved(summary, unsaved.samples if unsaved else [], attempts, str(exc)) from exc
        progress.done = True  # the whole record replaced the partial one
        if unsaved:
            raise night.keep_unsaved(summary, unsaved.samples, attempts, str(unsaved), record_stored=True) from unsaved
        return summary

    progress.dispatching()
    try:
        yield from _dispatch(night, plan, tests, launcher, say, images, outcome, progress.quarantined,
                             after=progress.finished, ended=attempts_before)
    except BaseException as exc:  # interrupted, or failed: what ran is recorded before the exception goes on
        if "result" in outcome:
            status, note = _how_it_ended(exc)
            if status == "interrupted":
                note = ("interrupted: no new test started after the signal; any test still running was killed "
                        "and recorded as `interrupted`")
            else:  # e.g. a bug while reporting a test: said as such, never as a signal
                note = note.replace("tests without an attempt never ran", "no new test started after it; any test "
                                    "still running was killed and recorded as `interrupted`")
            try:
                with held_signals():  # a second Ctrl-C here would lose the record
                    record(outcome["result"], [note], True,
                           failed=_error_of(exc) if status != "interrupted" else "")
            except ResultsNotStored as exc:
                say(f"error: {exc}")  # said; the interruption goes on
        raise
    result = outcome["result"]
    # every node the night named, one named mid-night whose finding faded by the end too (the record's bad_nodes)
    findings, _ = acted_on(detect_bad_nodes(result.attempts, history=night.node_history), night.nodes_acted_on)
    notes = [_bad_node_note(f, result.attempts) for f in findings] + night.cordon(findings) + night.notes + list(getattr(launcher, "notes", []))
    for n in notes:
        say(n)
    yield NightDone(record(result, notes, False))


#: what Dagster raises in a step it interrupts (Ctrl-C, SIGTERM, terminate from the UI), by name: no Dagster import here
INTERRUPTIONS = frozenset({"DagsterExecutionInterruptedError"})


def _error_of(exc: BaseException) -> str:
    """The error a failed run ended on, as its record and verdict name it (``KeyError: 'x'``)."""
    return f"{type(exc).__name__}: {exc}".strip().rstrip(":")[:500]


def _how_it_ended(exc: BaseException) -> tuple[str, str]:
    """(status, note) of a run that ended before its whole record was written."""
    if isinstance(exc, (GeneratorExit, KeyboardInterrupt, SystemExit)) or type(exc).__name__ in INTERRUPTIONS:
        how = f"stopped (exit {exc.code})" if isinstance(exc, SystemExit) else "interrupted"
        return "interrupted", f"the run was {how} before its tests were dispatched; tests without an attempt never ran"
    return "failed", (f"the run failed ({_error_of(exc)}); tests without an attempt never ran; see the Dagster run's "
                      "log for where it failed")


class _Progress:
    """The run's record while it runs, for a worker that may die at any moment (kill -9, an evicted pod).

    ``write`` stores a partial record (the whole record's shape, ``"status": "running"`` and a note
    saying it is incomplete) under the same keys as the whole one; ``finished`` stores the attempt's
    log and rewrites the record. Both are best effort: a store that fails is said once and the night
    goes on (the whole record at the end is written as before, and fails loudly).
    """

    def __init__(self, night: Night, runset: RunSet, selection: RunSelection, plan: Plan, infra: dict,
                 tags: dict[str, str], states: dict, say: Callable[[str], None]):
        self.night, self.runset, self.selection, self.plan = night, runset, selection, plan
        self.infra, self.tags, self.states, self.say = infra, tags, states, say
        self.quarantined = frozenset(tid for tid, st in states.items() if st.state == "quarantined")
        self.attempts: list[Attempt] = []
        self.notes: list[str] = []
        self.started = 0.0  # monotonic time the dispatch started (0: not yet)
        self.replanned: dict | None = None  # the plan the run started with, once failed inputs changed it (replan_record())
        self.done = False
        self._warned = False

    def dispatching(self) -> None:
        self.started = time.monotonic()

    def finished(self, attempt: Attempt) -> None:
        if any(a is attempt for a in self.attempts):  # told again after a signal cut its first telling short
            return
        self.attempts.append(attempt)
        self.night.store_log(attempt, self.notes)
        self.write()

    def summary(self, status: str = "running", note: str = "") -> dict:
        from pipelines.core.flaky import night_verdict, verdict_record

        ran = self.started and time.monotonic() - self.started
        result = DispatchResult(attempts=list(self.attempts), makespan_s=round(ran or 0.0, 3))
        finished = {a.test_id for a in self.attempts}
        unfinished = [t.id for t in self.runset.run if t.id not in finished]
        now = datetime.now(UTC).isoformat(timespec="seconds")
        head = (f"INCOMPLETE: this record was written at {now} while the run was going ({len(finished)} of "
                f"{len(self.runset.run)} test(s) had finished); if the run is no longer running (its worker died), "
                "the tests without an attempt never finished; a run that ends replaces this record"
                if status == "running" else f"INCOMPLETE: {note}")
        summary = night_summary(self.night, self.runset, self.selection, self.plan, result, [], [head, *self.notes],
                                infra=self.infra, tags=self.tags, interrupted=status == "interrupted",
                                replanned=self.replanned)
        v = night_verdict(self.attempts, self.states, self.night.node_history)
        if status == "running":  # unfinished tests are not passes: the night is not OK until a whole record says so
            verdict = {**verdict_record(v), "ok": False, "interrupted": [*v.interrupted, *unfinished]}
        else:  # the run ended here (a signal, an error) with no test running: those without an attempt never started
            verdict = verdict_record(dataclasses.replace(v, never_started=tuple(unfinished)))
        summary.update({"status": status, "updated_at": now, "verdict": {**verdict, "unfinished": unfinished}})
        return summary

    def write(self, status: str = "running", note: str = "") -> None:
        if self.done:
            return
        try:
            self.night.write_summary(self.summary(status, note))
        except (StateError, OSError) as exc:
            if not self._warned:
                self._warned = True
                self.say(f"warning: the run's partial record was not stored ({exc}); the whole record is "
                         f"written when the run ends (kept under {self.night.home / UNSAVED}/ if the store "
                         "still refuses)")


def _flaky_states(night: Night, tests: list[Test]) -> dict:
    """Flaky states as the night starts, for each test's code and image tonight (an automatic
    quarantine of other code or another image ends: ``flaky.for_tonight``), the image as the night's
    samples record it (the infra probe's digest for the test's pool); advice: unreadable rules or
    states mean none."""
    try:
        return night.flaky_states(night.tonight(tests))  # for_tonight, with calibrate's rewrites as the replay has them
    except Exception:  # noqa: BLE001 - the night's record notes why (flaky_verdict)
        return {}


#: after this long without a line from the dispatch, a line says which tests still run: CI systems kill a job
#: whose log is silent for long, and a user takes a 2-hour test's silence for a hang
PROGRESS_EVERY_S = 300.0
#: sets :data:`PROGRESS_EVERY_S` (seconds, a positive number; the tests set a short one)
PROGRESS_ENV = "NIGHTLY_PROGRESS_EVERY_S"
#: the still-running line lists the longest-running tests first and stops near this many characters
STILL_RUNNING_CHARS = 400


def progress_every_s(say: Callable[[str], None], env: Mapping[str, str] | None = None) -> float:
    """Seconds between still-running lines: ``$NIGHTLY_PROGRESS_EVERY_S``, else :data:`PROGRESS_EVERY_S`
    (a value that is no positive number is said, and the default used)."""
    raw = (os.environ if env is None else env).get(PROGRESS_ENV, "").strip()
    if not raw:
        return PROGRESS_EVERY_S
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if value > 0 and math.isfinite(value):
        return value
    say(f"warning: {PROGRESS_ENV}={raw!r} is not a positive number of seconds; a still-running line comes every "
        f"{PROGRESS_EVERY_S:g} s without other progress; set it to e.g. 600 or unset it")
    return PROGRESS_EVERY_S


def still_running(running: Mapping[str, tuple[float, int]], now: float, limit: int = STILL_RUNNING_CHARS) -> str:
    """``still running (2): tests/a.py 12m of 30m timeout, tests/b.py 40s of 60m timeout``: each running test
    (id -> (monotonic time it was dispatched, its timeout in seconds)), the longest-running first, the
    list cut near ``limit`` characters (``and N more``)."""
    parts = [f"{tid} {_span(now - since)} of {_span(timeout_s)} timeout"
             for tid, (since, timeout_s) in sorted(running.items(), key=lambda kv: (kv[1][0], kv[0]))]
    head = f"still running ({len(parts)}): "
    shown = parts[:1]
    for part in parts[1:]:
        if len(head) + len(", ".join([*shown, part])) + len(f", and {len(parts)} more") > limit:
            break
        shown.append(part)
    rest = len(parts) - len(shown)
    return head + ", ".join(shown) + (f", and {rest} more" if rest else "")


def _span(seconds: float) -> str:
    """``40s``, ``12m``, ``2h05m``: a duration as a progress line says it."""
    seconds = max(0, round(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{round(seconds / 60)}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _dispatch(night: Night, plan: Plan, tests: list[Test], launcher: Launcher, say: Callable[[str], None],
              images: dict[str, str], outcome: dict, quarantined: frozenset[str] = frozenset(),
              after: Callable[[Attempt], None] | None = None, ended: list[Attempt] | None = None) -> Iterator[Finished]:
    """Dispatch in a worker thread and yield each finished attempt here, in the caller's thread.

    ``outcome["result"]`` holds the DispatchResult once the worker ends, even when interrupted.
    ``after`` sees each finished attempt before it is yielded (its log stored, the record rewritten).
    ``ended``: attempts that never reached the plan (blocked by a failed input), for history (``Night.run``).
    """
    by_id = {t.id: t for t in tests}
    finished: queue.Queue = queue.Queue()
    stop = threading.Event()
    running: dict[str, tuple[float, int]] = {}  # test id -> (when dispatched, timeout): the still-running line's
    running_lock = threading.Lock()

    def started(request) -> None:  # in the test's thread, before its launch (a wait for its GPUs counts)
        with running_lock:
            running[request.test.id] = (time.monotonic(), request.timeout_s)

    def ended_one(attempt: Attempt) -> None:  # in the test's thread: a retry's start comes after this
        with running_lock:
            running.pop(attempt.test_id, None)
        finished.put(attempt)

    def dispatch() -> None:
        try:
            outcome["result"] = night.run(plan, on_start=started, on_finish=ended_one, launcher=launcher, stop=stop,
                                          images=images, ended=list(ended or ()))
        except SamplesNotStored as exc:  # every test ran: the record is written, the samples kept (record())
            outcome["result"], outcome["unsaved"] = exc.result, exc
        except BaseException as exc:  # re-raised below, in the caller's thread
            outcome["error"] = exc

    _stop_if_lost()  # no test starts on a night a signal already stopped (swallowed while Dagster set the run up)
    worker = threading.Thread(target=dispatch, name="nightly-dispatch", daemon=True)
    worker.start()
    # tests with a finished attempt: the count is of tests, never past the total; tests a failed input kept
    # from the plan (``ended``) were counted first, so a night of 2 whose 1st was blocked says [2/2], not [1/1]
    seen: set[str] = {a.test_id for a in ended or ()}
    total = len(plan.assignments) + len(seen)

    def report(attempt: Attempt) -> tuple[Finished, str]:
        """The attempt's event and progress line: cheap, so taking an attempt off the queue and
        having its event are never far apart (see ``unsent``)."""
        test = by_id[attempt.test_id]
        what = attempt.test_id
        if attempt.test_id in seen:  # a retry (a bad node's failure, an infra error) of a test counted already
            left = attempt.details.get("retry_of")
            what = f"retry of {attempt.test_id}{f' from {left}' if left else ''} (attempt {attempt.attempt})"
        seen.add(attempt.test_id)
        line = (f"[{len(seen)}/{total}] {what}  {attempt.outcome.upper()}  elapsed={attempt.elapsed_s:.1f}s "
                f"est={test.est_time}s node={attempt.node}")
        return Finished(attempt, test, len(seen), total, attempt.test_id in quarantined), line

    def tell(item: list) -> None:
        """Said, then stored (its log, the partial record): slow against a remote store, so a signal may
        land here; ``item`` ([event, line, stage]) keeps how far it got, so nothing is said twice."""
        if item[2] < 1:
            say(item[1])
            item[2] = 1
        if item[2] < 2 and after is not None:
            after(item[0].attempt)
        item[2] = 2

    # [event, line, stage] of the attempt taken off the queue and not yet handed on: a signal while it is
    # told (its record written to a slow store) leaves it to the interrupted path, which hands it on first
    unsent: list[list] = []
    every_s = progress_every_s(say)
    said = time.monotonic()  # the last line said here: one per finished test, else a still-running one
    # the first signal held anywhere while the night dispatches, (signum, time.monotonic() as it came): the
    # launcher relabels the test the same signal killed first (systemctl stop); none starts once it came
    stopped_by: list[tuple[int, float]] = []

    def signalled(signum: int, at: float) -> None:  # in the signal handler, as the signal is held
        if not stopped_by:
            stopped_by.append((signum, at))
            if (arrived := getattr(launcher, "signal_arrived", None)) is not None:  # local: judges a test it ended
                arrived(signum, at)
        stop.set()

    with signals_noted(signalled):
        try:
            while worker.is_alive() or not finished.empty():
                # a test taken off the queue is in hand before a signal acts; none starts once one came (the
                # signal that stops the night may also end a running test, whose GPUs would start the next):
                # ``signalled`` sets ``stop`` as the signal is held, here or in the Dagster asset's own block
                with held_signals(stopping=False) as held:
                    try:
                        unsent.append([*report(finished.get(timeout=min(0.5, every_s))), 0])
                    except queue.Empty:
                        pass
                deliver(held)
                if (lost := lost_interrupt()) is not None:  # a finalizer swallowed its interruption: it lands here
                    signalled(*lost)
                    raise KeyboardInterrupt
                if not unsent:
                    with running_lock:
                        now_running = dict(running)
                    if now_running and time.monotonic() - said >= every_s:  # none: the dispatch is ending
                        say(still_running(now_running, time.monotonic()))
                        said = time.monotonic()
                    continue
                tell(unsent[0])
                try:
                    yield unsent[0][0]
                except BaseException:
                    unsent.clear()  # whatever came in at the yield: the event was handed on
                    raise
                unsent.clear()
                said = time.monotonic()
        except BaseException as exc:  # interrupted (SIGINT/SIGTERM, a terminated run): stop, kill, keep what ran
            with held_signals():  # a second Ctrl-C must not cut this short: the night's result would be lost
                stop.set()
                if (interrupt := getattr(launcher, "interrupt", None)) is not None:  # local: kill the process trees
                    signum, at = _stopping_signal(exc, stopped_by)
                    interrupt(signum=signum, at=at)
                elif (cancel := getattr(launcher, "cancel_all", None)) is not None:  # Kubernetes: delete the pods
                    cancel()
                worker.join()
            if not isinstance(exc, GeneratorExit):  # still iterated: the killed attempts are reported like any other
                while unsent or not finished.empty():
                    with held_signals():
                        item = unsent.pop(0) if unsent else [*report(finished.get()), 0]
                        tell(item)
                    try:
                        yield item[0]
                    except GeneratorExit:
                        raise
                    except BaseException:  # noqa: BLE001 - another signal (in Dagster's frame): the rest still reported
                        continue
            raise
    worker.join()
    if "error" in outcome:
        raise outcome["error"]


def _stop_if_lost() -> None:
    """Stop here, as if it arrived now, on a signal whose KeyboardInterrupt a finalizer or a callback
    swallowed (SQLAlchemy's gc callback, a ``__del__``): Python discards an exception raised there, and
    the night ran to its end (:func:`pipelines.interrupts.lost_interrupt`)."""
    if lost_interrupt() is not None:
        raise KeyboardInterrupt


def _stopping_signal(exc: BaseException, held: list[tuple[int, float]]) -> tuple[int, float | None]:
    """(signum, when it came) of the signal that stopped the night, as the local launcher's ``interrupt()``
    takes them: the first one held (:func:`held_signals`), else a KeyboardInterrupt or Dagster's interruption
    raised where none held it (which signal is not known: 0; when: now, which is no earlier than it came, so
    this only ever relabels fewer tests); else (0, None): an error stopped the night, not a signal."""
    if held:
        return held[0]
    if isinstance(exc, KeyboardInterrupt) or type(exc).__name__ in INTERRUPTIONS:
        return 0, time.monotonic()
    return 0, None


def replan_record(before: Plan, blocked: Iterable[Test]) -> dict:
    """The record's ``replanned``: the tests a failed input kept from the night, and the prediction of the
    plan it started with (said as it started); the record's own figures are those of the plan its tests ran on."""
    return {"without": [t.id for t in blocked], "predicted_makespan_s": before.makespan_s,
            "predicted_median_s": before.predicted_median_s, "predicted_p90_s": before.predicted_p90_s,
            "lower_bound_s": before.lower_bound_s}


def replanned_text(summary: Mapping) -> str:
    """`` (re-planned without 1 test whose inputs failed; predicted median makespan 2.2s (p90 3.8s) at the
    start)``: what the end-of-night lines add to the record's prediction when failed inputs changed the plan."""
    r = summary.get("replanned")
    if not isinstance(r, Mapping) or not r.get("without"):
        return ""
    start = predicted_text(r.get("predicted_median_s") or 0, r.get("predicted_p90_s") or 0,
                           r.get("predicted_makespan_s") or 0)
    return f" (re-planned without the {len(r['without'])} test(s) whose inputs failed; {start} at the start)"


def night_summary(night: Night, runset: RunSet, selection: RunSelection, plan: Plan, result: DispatchResult,
                  attempts_before: list[Attempt], notes: list[str], *, infra: dict | None = None,
                  tags: dict[str, str] | None = None, interrupted: bool = False,
                  replanned: dict | None = None) -> dict:
    """The run's record: what was selected, planned and run, how each attempt ended, and the figures (those
    of the plan the tests ran on; ``replanned``: the one it started with, when failed inputs changed it)."""
    attempts = [*attempts_before, *result.attempts]
    return {
        "night": night.night, "run_id": night.run_id, "repo": night.repo_spec.name,
        "repo_path": str(night.repo_spec.path),
        "deployment": night.deployment.name, "cadence": selection.cadence or "picked",
        "env": night.env_digest,  # extra environment: names and a hash (flaky evidence compares like with like)
        "selection": dataclasses.asdict(selection),
        "selected": [t.id for t in runset.run] + [t.id for t in runset.unplanned],
        "skipped": [t.id for t in runset.disabled] + [t.id for t in runset.not_here] + [t.id for t in runset.held],
        "skip_reasons": {t.id: why for t, why in runset.skipped},
        "unplanned": [t.id for t in runset.unplanned],
        "unknown_keys": list(runset.unknown),
        #: what keeps the night from green though every launched test passed (the report's verdict says PROBLEMS)
        "problems": night_problems(night.problems_for(runset), runset),
        "attempts": [_recorded(a) for a in attempts],
        "plan": [dataclasses.asdict(a) for a in plan.ordered()],
        "predicted_makespan_s": plan.makespan_s, "lower_bound_s": plan.lower_bound_s,
        "predicted_median_s": plan.predicted_median_s, "predicted_p90_s": plan.predicted_p90_s,
        **({"replanned": replanned} if replanned else {}),
        #: the pools the night ran on, name -> nodes and GPUs per node: the report's GPU capacity
        "pools": night.pool_shapes(plan),
        "prediction": record_to_json(night_record(
            night.night, plan, result.makespan_s,
            {a.test_id: a.elapsed_s for a in result.attempts if a.outcome == "passed"})),
        "actual_makespan_s": result.makespan_s, "notes": notes, "interrupted": interrupted,
        "infra": infra or {}, "tags": tags or {},
        "est_time": {t.id: t.est_time for t in runset.run},
        #: the timeout floor the night ran with (``--timeout-floor``, or the repo's): near timeout is judged with it
        "timeout_floor_s": night.timeout_floor_s,
        #: "finished" or "interrupted" for a whole record; a partial one (written while the run goes) says
        #: "running", or "failed"/"interrupted" when the run ended before its whole record (see _Progress)
        "status": "interrupted" if interrupted else "finished",
    }


def night_problems(catalog_problems: Iterable, runset: RunSet) -> list[str]:
    """What makes a night not green even when every launched test passed, the same on every way in: a
    test file whose registration does not load silently drops out of the night, and a test no pool runs
    never runs. Kept in the record, so the report's verdict and ``nightly run``'s exit status agree."""
    out = [f"catalog problem: {p}" for p in catalog_problems]
    out += [f"unplanned: {t.id}: {why}" for t, why in runset.skipped if t in runset.unplanned]
    return out


def flaky_verdict(night: Night, attempts: list[Attempt], notes: list[str], at_start: dict,
                  launched: Iterable[str] = ()) -> dict:
    """The night's verdict and the flaky/quarantine states after tonight (``pipelines.core.flaky``).
    ``launched``: the tests the night was to launch: one without an attempt (a signal or an error stopped
    the night before it started) is no pass, so the night is not OK.

    The verdict judges with ``at_start``, the states as the night started, which its Dagster checks
    and partial records used too: a failure that completes a test's quarantine evidence tonight is
    not excused by it tonight. The states after tonight (history replayed with tonight's samples)
    are recorded for the next night. A quarantined test's failure does not fail the night, an infra
    fault or a bad node always does, and so does the failure of a test whose automatic quarantine
    ended (a note says why)."""
    from pipelines.core.flaky import ended_notes, night_verdict, recorded_states, verdict_record

    try:
        states = night.flaky_states()
    except Exception as exc:  # noqa: BLE001 - flakiness is advice; the record must still be written
        notes.append(f"flaky states not computed: {exc}")
        states = {}
    # the nodes the night acted on, those named or suspected while it ran included: the record keeps them, and
    # the verdict says the same (a node named mid-night whose finding faded is still bad in both)
    findings, suspects = acted_on(detect_bad_nodes(attempts, history=night.node_history), night.nodes_acted_on)
    v = night_verdict(attempts, at_start, night.node_history, launched, named=[f.node for f in findings],
                      suspected=[f.node for f in suspects])
    notes.extend(ended_notes(v, at_start))  # why a quarantine no longer excused a failure
    return {"flaky": recorded_states(states),
            "verdict": verdict_record(v),
            # the evidence as the night saw it (with its history window): the report prints this
            "bad_nodes": [dataclasses.asdict(f) for f in findings],
            # nodes the night avoided and retried from without naming them, with the evidence it acted on
            "suspect_nodes": [dataclasses.asdict(f) for f in suspects]}


def acted_on(findings: list, acted: Mapping[tuple[str, str], object]) -> tuple[list, list]:
    """(bad nodes, suspects) the record keeps: the night's end findings, every node it named during the
    night (a cross-night finding can fade as later tests pass elsewhere, after its failures were
    retried), with the evidence it acted on, and the nodes it only suspected."""
    named = {f.node for f in findings}
    extra = [f for (node, kind), f in acted.items() if kind == "named" and node not in named]
    named |= {f.node for f in extra}
    return [*findings, *extra], [f for (node, kind), f in acted.items() if kind == "suspect" and node not in named]


def _bad_node_note(finding, attempts: list[Attempt]) -> str:
    """The night's line about a bad node: its evidence, and what became of the tests it failed."""
    retried = [a for a in attempts if a.details.get("retry_of") == finding.node]
    passed = sum(1 for a in retried if a.outcome == "passed")
    if not retried:
        return f"{finding.summary}; no test was retried on another node (none failed there, or the pool has no other node)"
    return (f"{finding.summary}; {len(retried)} test(s) that failed there were retried on another node, "
            f"{passed} passed (the retry's outcome is the test's)")


def _recorded(attempt: Attempt) -> dict:
    """An attempt as the record keeps it, with ``log_uri``: its log's stored copy, when it has one."""
    out = dataclasses.asdict(attempt)
    if attempt.details.get("log_uri"):
        out["log_uri"] = attempt.details["log_uri"]
    return out
