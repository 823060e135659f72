"""The run's own bookkeeping: ending CANCELED when interrupted, and no run left STARTED by a dead process.

Dagster marks an interrupted run CANCELED only when someone asked for the cancel first; a
SIGINT/SIGTERM to ``nightly run`` (or to a run worker) is such a request, so the asset reports it
before the interruption goes on. Runs executed in-process (the CLI) have no run monitor: a
``kill -9`` leaves them STARTED forever, so every run marks dead ones on this host as failed.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

import dagster as dg

from pipelines.launch.procs import pid_alive

TAG_HOST = "nightly/host"
TAG_PID = "nightly/pid"


def process_tags() -> dict[str, str]:
    """Where this run's process lives, so a later run can tell whether it is still alive."""
    return {TAG_HOST: socket.gethostname(), TAG_PID: str(os.getpid())}


def fail_stale_runs(instance: dg.DagsterInstance, current_run_id: str) -> list[str]:
    """Mark STARTED runs of dead processes on this host as failed; returns what was done."""
    notes = []
    host = socket.gethostname()
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED], tags={TAG_HOST: host}))
    for run in runs:
        pid = run.tags.get(TAG_PID, "")
        if run.run_id == current_run_id or not pid.isdigit() or pid_alive(int(pid)):
            continue
        instance.report_run_failed(run, f"its process {pid} on {host} is gone (killed?); marked failed by run "
                                        f"{current_run_id}")
        notes.append(f"run {run.run_id} was left STARTED by dead process {pid}; marked failed")
    return notes


@contextlib.contextmanager
def canceled_on_interrupt(context: dg.AssetExecutionContext) -> Iterator[None]:
    """A SIGINT/SIGTERM while tests run ends the run CANCELED, not FAILURE."""
    try:
        yield
    except (KeyboardInterrupt, dg.DagsterExecutionInterruptedError):
        run = context.instance.get_run_by_id(context.run.run_id)
        if run is not None and run.status not in (dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.CANCELED):
            context.instance.report_run_canceling(run, "interrupted (SIGINT/SIGTERM): running tests were killed "
                                                       "and recorded as `interrupted`")
        raise
