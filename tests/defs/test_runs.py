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
