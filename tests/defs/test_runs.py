"""The run's own bookkeeping: which process a run is tagged with, so a later run can tell it is gone."""

from __future__ import annotations

import os
import threading
import time
import uuid

import dagster as dg
import pytest

from pipelines.defs.runs import (
    TAG_PID,
    TAG_PID_RUN,
    fail_stale_runs,
    interrupted_if_worker_dies,
    process_tags,
)


@dg.op
def tag_its_process(context):
    """What test_runs does first: tag the run with the process that lives until the run ends."""
    context.instance.add_run_tags(context.run.run_id, process_tags(context.run.run_id))


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
        same = str(uuid.uuid4())
        ending = instance.add_run(dg.DagsterRun(job_name="tagged", run_id=same, status=dg.DagsterRunStatus.STARTED,
                                                tags={**run.tags, TAG_PID_RUN: same}))
        assert fail_stale_runs(instance, "another") == []
        assert instance.get_run_by_id(ending.run_id).status == dg.DagsterRunStatus.STARTED


@dg.op
def watch_its_worker(context):
    """What test_runs does around the night: watch the run worker; tags the run with whether it did."""
    with interrupted_if_worker_dies(context.log.error, poll_s=0.05):
        time.sleep(0.5)  # several polls while the worker lives: none may interrupt the step
        watching = any(t.name == "nightly-worker-watch" for t in threading.enumerate())
    context.instance.add_run_tags(context.run.run_id, {"watching": str(watching)})


@dg.job(executor_def=dg.multiprocess_executor)
def watched():
    watch_its_worker()


@pytest.mark.slow  # one step in a spawned process: ~3 s
def test_a_step_in_a_child_of_its_run_worker_watches_the_worker_and_a_live_one_never_interrupts_it():
    with dg.instance_for_test() as instance:
        with dg.execute_job(dg.reconstructable(watched), instance=instance) as result:
            assert result.success
            assert instance.get_run_by_id(result.run_id).tags["watching"] == "True"


def test_a_run_in_its_own_process_watches_no_worker():
    """`nightly run`, execute_in_process: the run worker is this process; nothing to watch."""
    with dg.instance_for_test() as instance:
        result = watched.execute_in_process(instance=instance)
        assert instance.get_run_by_id(result.run_id).tags["watching"] == "False"


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


def _run_in_a_process_that_then_ends(ref, answers) -> None:
    """A `nightly run` whose night is over: its run is tagged with its process, which is then gone."""
    with dg.DagsterInstance.from_ref(ref) as instance:
        answers.put(tagged.execute_in_process(instance=instance).run_id)


@pytest.mark.slow  # a spawned process that imports Dagster, then a code location in this one: ~5 s
def test_a_re_execution_is_not_failed_for_the_process_of_the_run_it_re_executes():
    """The UI's Re-execute copies every tag of the run it re-executes (GraphQL: use_parent_run_tags), its
    process tags included, whose process has ended; until the re-execution's own step tags it afresh,
    another run must not fail it as "left by a dead process"."""
    import multiprocessing

    from dagster._core.execution.api import execute_run
    from dagster._core.execution.plan.resume_retry import ReexecutionStrategy
    from dagster._core.test_utils import in_process_test_workspace
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

    spawn = multiprocessing.get_context("spawn")
    with dg.instance_for_test() as instance:
        answers = spawn.Queue()
        ended = spawn.Process(target=_run_in_a_process_that_then_ends, args=(instance.get_ref(), answers))
        ended.start()
        try:
            parent = instance.get_run_by_id(answers.get(timeout=120))
        finally:
            ended.join(60)
        assert parent.tags[TAG_PID] == str(ended.pid)
        with in_process_test_workspace(instance, LoadableTargetOrigin(python_file=__file__, attribute="tagged")) as ws:
            location = ws.get_code_location(ws.code_location_names[0])
            job = next(iter(location.get_repositories().values())).get_full_job("tagged")
            again = instance.create_reexecuted_run(parent_run=parent, request_context=ws, code_location=location,
                                                   remote_job=job, strategy=ReexecutionStrategy.ALL_STEPS,
                                                   use_parent_run_tags=True)
        assert again.tags[TAG_PID] == str(ended.pid)  # as the UI makes it: the parent's (ended) process
        assert fail_stale_runs(instance, "another") == []
        assert instance.get_run_by_id(again.run_id).status == dg.DagsterRunStatus.NOT_STARTED
        # it runs, and its step tags it with its own process: a later run judges it by that one
        result = execute_run(dg.reconstructable(tagged), instance.get_run_by_id(again.run_id), instance)
        tags = instance.get_run_by_id(again.run_id).tags
        assert result.success and (tags[TAG_PID], tags[TAG_PID_RUN]) == (str(os.getpid()), again.run_id)
