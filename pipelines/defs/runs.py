"""The run's own bookkeeping: ending CANCELED when interrupted, and no run left STARTED by a dead process.

Dagster marks an interrupted run CANCELED only when someone asked for the cancel first; a
SIGINT/SIGTERM to ``nightly run`` (or to a run worker) is such a request, so the asset reports it
before the interruption goes on, wherever the signal landed (see :func:`canceled_on_interrupt`).
Runs executed in-process (the CLI) have no run monitor: a
``kill -9`` leaves them STARTED forever, so every run marks dead ones on this host as failed.
A step that Dagster's multiprocess executor runs in a child of the run worker outlives a worker
killed with SIGKILL (the code server marks the run failed, nobody stops the step), so such a step
watches its worker and interrupts its night when the worker is gone (:func:`interrupted_if_worker_dies`).
The process tags name the run they were written for: Dagster's Re-execute copies every tag of the
run it re-executes, whose process has ended, and that process says nothing about the re-execution.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Generator, Iterator

import dagster as dg

from pipelines.launch.procs import pid_alive

TAG_HOST = "nightly/host"
TAG_PID = "nightly/pid"
#: the run the two tags above were written for (a re-execution carries its parent's until its step tags it)
TAG_PID_RUN = "nightly/pid_run"


def run_worker_pid() -> int:
    """The process that lives until the run ends, seen from a step of that run.

    In-process execution (``nightly run``, execute_in_process, a run whose executor is ``in_process``)
    runs the step in the run's own process. Dagster's multiprocess executor (a daemon-launched run,
    ``dagster asset materialize``) runs each step in a child the run worker starts (spawn or forkserver:
    ``parent_process`` is the worker either way); that child exits at STEP_SUCCESS, seconds (more under
    load) before the worker reports the run's end, and later steps of the run may follow. So the
    worker, not the step, is what a later run asks about: judging by the step's process, or by how
    long the run has been quiet, would fail a live run.

    Having a parent process is not enough to tell the two apart: a code server starts each run of an
    in-process executor in a spawn child of its own, so that run's parent is the code server, which
    outlives it. Only a step child of the multiprocess executor gets its parent (:func:`_multiprocess_step`).
    """
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None and _multiprocess_step() else os.getpid()


def _multiprocess_step() -> bool:
    """Whether this process is a step's child that Dagster's multiprocess executor started: the process
    object multiprocessing runs here is Dagster's child-process entry with a multiprocess executor's
    step command (names only, so a Dagster that renames them reads as in-process: the run is then
    tagged with the step's process, never with a process that outlives the run)."""
    me = multiprocessing.current_process()
    target = getattr(me, "_target", None)
    return (getattr(target, "__module__", "") == "dagster._core.executor.child_process_executor"
            and any(type(arg).__name__ == "MultiprocessExecutorChildProcessCommand" for arg in getattr(me, "_args", ())))


#: how often a step in a child of its run worker checks that the worker still lives (seconds)
WORKER_POLL_S = 1.0


@contextlib.contextmanager
def interrupted_if_worker_dies(say: Callable[[str], None], poll_s: float = WORKER_POLL_S) -> Iterator[None]:
    """While the block runs in a step child of Dagster's multiprocess executor, a thread watches the
    run worker that started it; once the worker is gone (kill -9, OOM kill) it says so with ``say``
    and interrupts this process as Dagster does when it terminates a step (SIGINT to itself): the
    night stops, kills its running tests, records them `interrupted` and writes its record, instead
    of running on orphaned with the tests' GPUs until their timeouts. Nothing is watched in a run's
    own process (``nightly run``, in-process executors): the run worker is this process there.

    The worker is watched through multiprocessing's parent sentinel, a pipe that reads EOF once the
    worker has died, so a PID reused since cannot pass for it."""
    parent = multiprocessing.parent_process()
    if parent is None or not _multiprocess_step():
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.wait(poll_s):
            if parent.is_alive():
                continue
            # the worker reads this step's events no more: exiting must not wait to hand them over
            for arg in getattr(multiprocessing.current_process(), "_args", ()):
                with contextlib.suppress(Exception):
                    if hasattr(arg, "cancel_join_thread"):
                        arg.cancel_join_thread()
            with contextlib.suppress(Exception):  # saying why must not keep the tests running
                say(f"the run worker (PID {parent.pid}) that started this step is gone (killed?); interrupting "
                    "the night: running tests are killed and recorded as `interrupted`, the record is written")
            if not done.is_set():
                os.kill(os.getpid(), signal.SIGINT)  # as Dagster's own termination of a step
            return

    threading.Thread(target=watch, name="nightly-worker-watch", daemon=True).start()
    try:
        yield
    finally:
        done.set()


def process_tags(run_id: str) -> dict[str, str]:
    """Where run ``run_id``'s worker lives, so a later run can tell whether it is still alive."""
    return {TAG_HOST: socket.gethostname(), TAG_PID: str(run_worker_pid()), TAG_PID_RUN: run_id}


def process_gone(run: dg.DagsterRun) -> bool | None:
    """Whether the process the run's tags name has ended; None when the tags cannot tell: none, another
    host's, or written for another run (copied by a re-execution from its parent). Tags written before
    ``TAG_PID_RUN`` existed count as the run's own unless the run is a re-execution."""
    pid, written_for = run.tags.get(TAG_PID, ""), run.tags.get(TAG_PID_RUN)
    if run.tags.get(TAG_HOST) != socket.gethostname() or not pid.isdigit():
        return None
    if written_for != run.run_id and (written_for is not None or run.parent_run_id is not None):
        return None
    return not pid_alive(int(pid))


def fail_stale_runs(instance: dg.DagsterInstance, current_run_id: str) -> list[str]:
    """Mark STARTED or NOT_STARTED runs of dead processes on this host as failed; returns what was done.

    NOT_STARTED: a run created in-process whose process died (or was interrupted) before Dagster
    started it, e.g. the calibration run `nightly run` creates after the night.
    """
    notes = []
    host = socket.gethostname()
    waiting = [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.NOT_STARTED]
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=waiting, tags={TAG_HOST: host}))
    for run in runs:
        pid = run.tags.get(TAG_PID, "")
        if run.run_id == current_run_id or not process_gone(run):
            continue
        instance.report_run_failed(run, f"its process {pid} on {host} is gone (killed?); marked failed by run "
                                        f"{current_run_id}")
        notes.append(f"run {run.run_id} was left {run.status.value} by dead process {pid}; marked failed")
    return notes


CANCEL_MESSAGE = ("interrupted (SIGINT/SIGTERM): no new test started after it; any test still running was killed "
                  "and recorded as `interrupted`")


def request_cancel(instance: dg.DagsterInstance, run_id: str, message: str = CANCEL_MESSAGE) -> None:
    """Ask for the run's cancel (CANCELING) unless it has ended or is already being cancelled."""
    run = instance.get_run_by_id(run_id)
    if run is not None and not run.is_finished and run.status != dg.DagsterRunStatus.CANCELING:
        instance.report_run_canceling(run, message)


def is_interrupted_step(entry) -> bool:
    """Whether an event log entry is a step failing because its process was interrupted."""
    event = getattr(entry, "dagster_event", None)
    if event is None or event.event_type != dg.DagsterEventType.STEP_FAILURE:
        return False
    data = event.step_failure_data
    source = getattr(data.error_source, "value", data.error_source)
    return source == "INTERRUPT" or getattr(data.error, "cls_name", None) in (
        "DagsterExecutionInterruptedError", "KeyboardInterrupt")


def as_step_event(failure, instance: dg.DagsterInstance, run_id: str) -> Callable[[object], None]:
    """Store an event of ours in the run's event log as the failed step's own, directly: Dagster
    drops whatever is logged through its logging while it handles an event (its guard against
    loops), and the step's failure is being handled when the night is stopped."""
    from dagster._core.events import (
        AssetObservationData,
        DagsterEvent,
        DagsterEventType,
        StepMaterializationData,
    )

    def store(event) -> None:
        if isinstance(event, dg.AssetMaterialization):
            kind, data = DagsterEventType.ASSET_MATERIALIZATION, StepMaterializationData(event)
        elif isinstance(event, dg.AssetObservation):
            kind, data = DagsterEventType.ASSET_OBSERVATION, AssetObservationData(event)
        else:
            kind, data = DagsterEventType.ASSET_CHECK_EVALUATION, event
        instance.report_dagster_event(DagsterEvent(
            kind.value, failure.job_name, failure.step_handle, failure.node_handle, failure.step_kind_value,
            failure.logging_tags, data, message=getattr(event, "description", None), pid=os.getpid()), run_id)

    return store


@contextlib.contextmanager
def canceled_on_interrupt(context: dg.AssetExecutionContext, events: Generator,
                          stopped: Callable[[Generator, Callable[[object], None]], None] | None = None,
                          ) -> Iterator[None]:
    """A SIGINT/SIGTERM while ``events`` (the night's tests) runs: the tests stop at once and the run
    ends CANCELED, not FAILURE; ``events`` is closed however the block ends.

    The signal lands either in our frames (``events`` raises and ends itself) or in Dagster's own,
    while it stores an event we yielded: Dagster then raises there and leaves this generator
    suspended, to be closed only when the garbage collector reaches it (seconds later, the tests
    still running and the night's record partial). The step's failure event says so at once: it
    asks for the cancel and hands ``events`` to ``stopped`` with a way to store Dagster events
    (it interrupts the night and stores what it still reports: its killed tests), then closes it.
    """
    instance, run_id = context.instance, context.run.run_id
    live = [events]

    def on_event(entry) -> None:
        if live and is_interrupted_step(entry):
            request_cancel(instance, run_id)
            night = live.pop()  # once: what ``stopped`` stores comes back here
            with contextlib.suppress(ValueError):  # still executing: it is ending in our frame already
                try:
                    if stopped is not None:
                        stopped(night, as_step_event(entry.dagster_event, instance, run_id))
                except Exception as exc:  # noqa: BLE001 - inside Dagster's handling of the failure: said, not raised
                    print(f"nightly: the stopped night's last tests could not be shown in the UI ({exc}); "
                          "history and the night's record hold them", file=sys.stderr, flush=True)
                night.close()

    instance.add_event_listener(run_id, on_event)
    try:
        with contextlib.closing(events):
            yield
    except (KeyboardInterrupt, dg.DagsterExecutionInterruptedError):
        request_cancel(instance, run_id)
        raise
    finally:
        live.clear()
