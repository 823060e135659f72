"""Run the tests of one run: plan, inputs, GPU-aware dispatch, history, the night's record.

This generator is the one implementation behind every way in (``nightly run``, schedules,
sensors, UI picks and backfills all materialize ``test_runs``, whose body drives it). It yields
our own events as things happen, so the Dagster asset only turns them into materializations,
observations and check results, and stays thin. No Dagster import here.

When the consumer stops early (SIGINT/SIGTERM, a terminated run), nothing new starts, running
tests are killed through the launcher, and every attempt still reaches history and the record.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pipelines.core.health import detect_bad_nodes
from pipelines.core.model import Attempt, Plan, Requirement, Test
from pipelines.core.plan.accuracy import night_record, record_to_json
from pipelines.core.runset import RunSelection, RunSet
from pipelines.launch.base import Launcher
from pipelines.launch.dispatch import DispatchResult
from pipelines.night import Night
from pipelines.storage.cache import BuildError, Built


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
    #: 1-based count of finished attempts, and how many tests the run launches
    done: int = 0
    total: int = 0
    #: the test was quarantined as flaky when the night started: a failure does not fail the night
    quarantined: bool = False


@dataclass(frozen=True)
class NightDone:
    summary: dict = field(default_factory=dict)


Event = Planned | InputReady | InputFailed | Finished | NightDone


def _input_failure(test: Test, error: str, timeout_s: int) -> Attempt:
    """An attempt that never launched because an input it needs could not be built (infra)."""
    return Attempt(test_id=test.id, outcome="infra_error", elapsed_s=0.0, started_at="", timeout_s=timeout_s,
                   reason=f"input not available: {error}", details={"retriable": "false", "stage": "inputs"})


def run_tests(night: Night, runset: RunSet, selection: RunSelection, *, launcher: Launcher | None = None,
              say: Callable[[str], None] = print, infra: dict | None = None,
              tags: dict[str, str] | None = None, live_run_ids: tuple[str, ...] = ()) -> Iterator[Event]:
    """Plan and run ``runset``; yields events as they happen and ends with the night's record.

    ``live_run_ids``: runs still alive (Kubernetes: pods of any other run are swept first).
    """
    night.history.read()  # an unreadable history store stops the run before any test starts
    night.pin_images(infra or {})
    for pod in night.sweep_pods(live_run_ids):
        say(f"deleted pod {pod}, left running by a run that is gone")
    if night.deployment.launcher == "local":
        for leftover in night.cache.clean_partials():
            say(f"removed a half-built input an earlier build left: {leftover}")
    reaped = night.reap_orphans()
    if reaped:
        say(f"killed {len(reaped)} test process(es) an earlier night left running and recorded them as "
            f"interrupted: {', '.join(a.test_id for a in reaped)}")
    tests = list(runset.run)
    plan = night.plan(tests)
    yield Planned(plan, runset)

    attempts_before: list[Attempt] = []
    failed_inputs: dict[str, str] = {}
    reqs = night.requirements_for(tests)
    for i, req in enumerate(reqs, 1):
        missing = [d for d in req.depends_on if d in failed_inputs]
        try:
            if missing:
                raise BuildError(f"{req.key}: needs {', '.join(missing)}, which failed to build")
            built = night.build(req)
        except BuildError as exc:
            failed_inputs[req.key] = str(exc)
            say(f"[{i}/{len(reqs)}] {req.kind} {req.key}: FAILED {exc}")
            yield InputFailed(req, str(exc))
            continue
        verb = "reused" if built.reused else f"built in {built.seconds:.1f}s"
        say(f"[{i}/{len(reqs)}] {req.kind} {req.key}: {verb}")
        yield InputReady(req, built)
    if failed_inputs:  # tests whose inputs are missing are infra errors, never launched
        blocked = [t for t in tests if any(k in failed_inputs for k in t.requirements)]
        for t in blocked:
            key = next(k for k in t.requirements if k in failed_inputs)
            a = _input_failure(t, failed_inputs[key], night.timeout_for(t))
            attempts_before.append(a)
            yield Finished(a, t)
        tests = [t for t in tests if t not in blocked]
        plan = night.plan(tests)

    images = {pool: (info or {}).get("image_digest", "") for pool, info in (infra or {}).items()}
    launcher = launcher or night.launcher()
    outcome: dict = {}

    def record(result: DispatchResult, notes: list[str], interrupted: bool) -> dict:
        summary = night_summary(night, runset, selection, plan, result, attempts_before, notes,
                                infra=infra or {}, tags=tags or {}, interrupted=interrupted)
        summary.update(flaky_verdict(night, [*attempts_before, *result.attempts], notes))
        _store_logs(night, summary)
        return night.write_summary(summary)

    try:
        yield from _dispatch(night, plan, tests, launcher, say, images, outcome, _quarantined(night))
    except BaseException:  # interrupted: what ran is recorded before the interruption goes on
        if "result" in outcome:
            record(outcome["result"], ["interrupted: no new test started after the signal; running tests "
                                       "were killed and recorded as `interrupted`"], True)
        raise
    result = outcome["result"]
    findings = detect_bad_nodes(result.attempts)
    notes = [f.summary for f in findings] + night.cordon(findings) + night.notes + list(getattr(launcher, "notes", []))
    for n in notes:
        say(n)
    yield NightDone(record(result, notes, False))


def _quarantined(night: Night) -> frozenset[str]:
    """Tests quarantined as flaky as the night starts (advice: unreadable rules or states mean none)."""
    try:
        return frozenset(tid for tid, st in night.flaky_states().items() if st.state == "quarantined")
    except Exception:  # noqa: BLE001 - the night's record notes why (flaky_verdict)
        return frozenset()


def _dispatch(night: Night, plan: Plan, tests: list[Test], launcher: Launcher, say: Callable[[str], None],
              images: dict[str, str], outcome: dict, quarantined: frozenset[str] = frozenset()) -> Iterator[Finished]:
    """Dispatch in a worker thread and yield each finished attempt here, in the caller's thread.

    ``outcome["result"]`` holds the DispatchResult once the worker ends, even when interrupted.
    """
    by_id = {t.id: t for t in tests}
    finished: queue.Queue = queue.Queue()
    stop = threading.Event()

    def dispatch() -> None:
        try:
            outcome["result"] = night.run(plan, on_finish=finished.put, launcher=launcher, stop=stop, images=images)
        except BaseException as exc:  # re-raised below, in the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=dispatch, name="nightly-dispatch", daemon=True)
    worker.start()
    done, total = 0, len(plan.assignments)

    def report(attempt: Attempt) -> Finished:
        nonlocal done
        done += 1
        test = by_id[attempt.test_id]
        configs = _config_outcomes(attempt)
        if configs:  # a matrix test that reports each configuration: kept with the attempt
            attempt.details["configs"] = ",".join(f"{k}={v}" for k, v in configs.items())
        say(f"[{done}/{total}] {attempt.test_id}  {attempt.outcome.upper()}  elapsed={attempt.elapsed_s:.1f}s "
            f"est={test.est_time}s node={attempt.node}")
        return Finished(attempt, test, done, total, attempt.test_id in quarantined)

    try:
        while worker.is_alive() or not finished.empty():
            try:
                attempt = finished.get(timeout=0.5)
            except queue.Empty:
                continue
            yield report(attempt)
    except BaseException as exc:  # interrupted (SIGINT/SIGTERM, a terminated run): stop, kill, keep what ran
        stop.set()
        interrupt = getattr(launcher, "interrupt", None) or getattr(launcher, "cancel_all", None)
        if interrupt is not None:
            interrupt()  # local: kill the process trees; Kubernetes: delete the pods
        worker.join()
        if not isinstance(exc, GeneratorExit):  # still iterated: the killed attempts are reported like any other
            while not finished.empty():
                yield report(finished.get())
        raise
    worker.join()
    if "error" in outcome:
        raise outcome["error"]


def _config_outcomes(attempt: Attempt) -> dict[str, str]:
    """Per-configuration outcomes the test printed (``config NAME: passed|failed``), from its log."""
    from pipelines.core.coverage.outcomes import config_outcomes
    from pipelines.launch.base import tail

    return config_outcomes(tail(attempt.log_path, max_lines=2000, max_chars=200_000)) if attempt.log_path else {}


def night_summary(night: Night, runset: RunSet, selection: RunSelection, plan: Plan, result: DispatchResult,
                  attempts_before: list[Attempt], notes: list[str], *, infra: dict | None = None,
                  tags: dict[str, str] | None = None, interrupted: bool = False) -> dict:
    """The run's record: what was selected, planned and run, how each attempt ended, and the figures."""
    attempts = [*attempts_before, *result.attempts]
    return {
        "night": night.night, "run_id": night.run_id, "repo": night.repo_spec.name,
        "deployment": night.deployment.name, "cadence": selection.cadence or "picked",
        "selection": dataclasses.asdict(selection),
        "selected": [t.id for t in runset.run] + [t.id for t in runset.unplanned],
        "skipped": [t.id for t in runset.disabled] + [t.id for t in runset.not_here] + [t.id for t in runset.held],
        "skip_reasons": {t.id: why for t, why in runset.skipped},
        "unplanned": [t.id for t in runset.unplanned],
        "unknown_keys": list(runset.unknown),
        "attempts": [dataclasses.asdict(a) for a in attempts],
        "plan": [dataclasses.asdict(a) for a in plan.ordered()],
        "predicted_makespan_s": plan.makespan_s, "lower_bound_s": plan.lower_bound_s,
        "predicted_median_s": plan.predicted_median_s, "predicted_p90_s": plan.predicted_p90_s,
        "prediction": record_to_json(night_record(
            night.night, plan, result.makespan_s,
            {a.test_id: a.elapsed_s for a in result.attempts if a.outcome == "passed"})),
        "actual_makespan_s": result.makespan_s, "notes": notes, "interrupted": interrupted,
        "infra": infra or {}, "tags": tags or {},
        "est_time": {t.id: t.est_time for t in runset.run},
    }


def flaky_verdict(night: Night, attempts: list[Attempt], notes: list[str]) -> dict:
    """Flaky/quarantine states after tonight, and the night's verdict: a quarantined test's failure
    does not fail the night, an infra fault or a bad node always does (``pipelines.core.flaky``)."""
    from pipelines.core.flaky import night_verdict, recorded_states

    try:
        states = night.flaky_states()
    except Exception as exc:  # noqa: BLE001 - flakiness is advice; the record must still be written
        notes.append(f"flaky states not computed: {exc}")
        states = {}
    v = night_verdict(attempts, states)
    return {"flaky": recorded_states(states),
            "verdict": {"ok": v.ok, "failed": list(v.failed), "excused_quarantined": list(v.excused),
                        "infra": list(v.infra), "bad_nodes": list(v.bad_nodes), "interrupted": list(v.interrupted)}}


def _store_logs(night: Night, summary: dict) -> None:
    """Put each attempt's log in the state store (a no-op locally, where logs are written in place)."""
    from pathlib import Path

    from pipelines.storage.state import LocalStateStore, StateError

    if isinstance(night.state, LocalStateStore):
        return
    for a in summary["attempts"]:
        path = Path(a.get("log_path") or "")
        if not a.get("log_path") or not path.is_file():
            continue
        try:
            a["log_uri"] = night.state.put_file(f"logs/{summary['night']}/{path.name}", path)
        except StateError as exc:
            summary["notes"].append(f"log of {a['test_id']} not stored: {exc}")
