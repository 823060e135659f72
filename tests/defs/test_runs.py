"""The run's own bookkeeping: which process a run is tagged with, so a later run can tell it is gone."""

from __future__ import annotations

import os
import uuid

import dagster as dg
import pytest

from pipelines.defs.runs import TAG_PID, fail_stale_runs, process_tags


@dg.op
def tag_its_process(context):
    """What test_runs does first: tag the run with the process that lives until the run ends."""
    context.instance.add_run_tags(context.run.run_id, process_tags())


@dg.job(executor_def=dg.multiprocess_executor)
def tagged():
    tag_its_process()


@pytest.mark.slow  # one step in a spawned process, as a daemon-launched run executes it: ~3 s
def test_a_run_whose_step_ran_in_a_child_process_is_tagged_with_its_run_worker():
    """Under the multiprocess executor (daemon-launched runs, `dagster asset materialize`) the step's
    process exits at STEP_SUCCESS while the run is still STARTED; the run worker (here: this process,
    which executes the run) lives until the run ends, so another run must not find it gone."""
    with dg.instance_for_test() as instance:
        with dg.execute_job(dg.reconstructable(tagged), instance=instance) as result:
            assert result.success
            run = instance.get_run_by_id(result.run_id)
        assert run.tags[TAG_PID] == str(os.getpid())
        # the same run between its step's end and its own: STARTED, tagged as its step tagged it
        ending = instance.add_run(dg.DagsterRun(job_name="tagged", run_id=str(uuid.uuid4()),
                                                status=dg.DagsterRunStatus.STARTED, tags=run.tags))
        assert fail_stale_runs(instance, "another") == []
        assert instance.get_run_by_id(ending.run_id).status == dg.DagsterRunStatus.STARTED


def test_a_run_executed_in_process_is_tagged_with_its_own_process():
    """`nightly run`, execute_in_process: the step runs in the process that runs the whole run."""
    with dg.instance_for_test() as instance:
        result = tagged.execute_in_process(instance=instance)
        assert instance.get_run_by_id(result.run_id).tags[TAG_PID] == str(os.getpid())


def _run_in_process_here(answers) -> None:
    """A run worker a code server spawned for a run of the in-process executor: the step runs here."""
    with dg.instance_for_test() as instance:
        result = tagged.execute_in_process(instance=instance)
        answers.put((os.getpid(), instance.get_run_by_id(result.run_id).tags[TAG_PID]))


@pytest.mark.slow  # a spawned process that imports Dagster: ~3 s
def test_a_run_executed_in_process_in_a_spawned_worker_is_tagged_with_that_worker_not_its_parent():
    """Dagster's code server starts each run in a spawn child of its own; with the in-process executor the
    step runs in that child, whose parent (the code server) outlives the run: tagged with the parent, a
    killed run would never be found gone."""
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    answers = spawn.Queue()
    worker = spawn.Process(target=_run_in_process_here, args=(answers,))
    worker.start()
    try:
        pid, tagged_pid = answers.get(timeout=120)
    finally:
        worker.join(60)
    assert (tagged_pid, pid) == (str(worker.pid), worker.pid) and tagged_pid != str(os.getpid())
