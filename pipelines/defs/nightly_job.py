"""The nightly and weekly jobs: one Dagster run per night that plans, builds inputs and runs every test.

One run per night (not one per test) keeps orchestration overhead per test far below a second
and lets the dispatcher start the next test the moment GPUs free up. Each step records its
results as materializations of the software-defined assets (``model_weights`` ...
``test_runs``), so partitions, lineage and history in the UI are the same as for single runs.
"""


import queue
import threading

import dagster as dg

from pipelines.core.health import detect_bad_nodes
from pipelines.defs.assets import CONVERTED, DATASETS, MODEL_WEIGHTS, TEST_RUNS
from pipelines.defs.metadata import attempt_metadata, built_metadata, skipped_metadata
from pipelines.defs.resources import NightlyResource

KIND_ASSET = {"model": MODEL_WEIGHTS, "dataset": DATASETS, "conversion": CONVERTED}


class NightConfig(dg.Config):
    """What tonight runs: the cadence and label picks of the framework's runner."""

    cadence: str = "nightly"
    labels: list[str] = []
    suites: list[str] = []
    #: extra environment for every test, e.g. {"MINIRL_FAIL": "test_x"} (failure injection)
    env: dict[str, str] = {}
    #: override the repo's timeout floor in seconds (0 = use assets/repos.yaml)
    timeout_floor_s: int = 0


def _say(context: dg.OpExecutionContext, message: str, level: str = "info") -> None:
    """Progress for the terminal (stdout; captured as the step's log in the UI) and the event log."""
    print(f"nightly: {message}", flush=True)
    getattr(context.log, level)(message)


def _night(context: dg.OpExecutionContext, nightly: NightlyResource, config: NightConfig):
    return nightly.night(
        run_id=context.run.run_id, cadence=config.cadence, labels=tuple(config.labels),
        suites=tuple(config.suites), extra_env=tuple(sorted(config.env.items())),
        timeout_floor_s=config.timeout_floor_s or None,
    )


@dg.op(description="Select tonight's tests, plan them onto the GPU pools, build missing inputs, run them all.",
       out=dg.Out(dict, description="The night's summary (also written to <home>/nights/)."))
def run_night(context: dg.OpExecutionContext, config: NightConfig, nightly: NightlyResource):
    """A generator, so every build and every finished test reaches the event log (and the UI) at once."""
    night = _night(context, nightly, config)
    night.history.read()  # an unreadable history store fails the night before any test runs
    for problem in night.catalog.problems:
        _say(context, f"catalog problem: {problem}", "warning")
    tests, skipped = night.selected()
    plan = night.plan(tests)
    _say(
        context,
        f"{len(tests)} tests to run, {len(skipped)} disabled; predicted makespan {plan.makespan_s:.0f}s "
        f"(lower bound {plan.lower_bound_s:.0f}s, ratio {plan.ratio:.3f})"
    )
    for p in plan.unplanned:
        _say(context, f"{p}: no pool runs its hardware; not planned", "warning")

    reqs = night.requirements_for(tests)
    for i, req in enumerate(reqs, 1):
        built = night.build(req)
        verb = "reused" if built.reused else f"built in {built.seconds:.1f}s"
        _say(context, f"[{i}/{len(reqs)}] {req.kind} {req.key}: {verb}")
        event = dg.AssetObservation if built.reused else dg.AssetMaterialization
        yield event(asset_key=KIND_ASSET[req.kind], partition=req.key, metadata=built_metadata(built, req.source))

    for t in skipped:
        yield dg.AssetObservation(asset_key=TEST_RUNS, partition=t.id, metadata=skipped_metadata(t))

    # the dispatcher runs in a thread; its finished attempts come back here to be logged and yielded
    by_id = night.catalog.by_id()
    finished: queue.Queue = queue.Queue()
    outcome: dict = {}

    def dispatch() -> None:
        try:
            outcome["result"] = night.run(plan, on_finish=finished.put)
        except BaseException as exc:  # re-raised below, in the op's own thread
            outcome["error"] = exc

    worker = threading.Thread(target=dispatch, name="nightly-dispatch", daemon=True)
    worker.start()
    done = 0
    while worker.is_alive() or not finished.empty():
        try:
            attempt = finished.get(timeout=0.5)
        except queue.Empty:
            continue
        done += 1
        test = by_id[attempt.test_id]
        _say(context, f"[{done}/{len(plan.assignments)}] {attempt.test_id}  {attempt.outcome.upper()}  "
                      f"elapsed={attempt.elapsed_s:.1f}s est={test.est_time}s node={attempt.node}")
        yield dg.AssetMaterialization(asset_key=TEST_RUNS, partition=attempt.test_id,
                                      metadata=attempt_metadata(attempt, test, night.night))
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    result = outcome["result"]

    bad = detect_bad_nodes(result.attempts)
    notes = [f.summary for f in bad] + [f"cordoned {n}" for n in night.cordon(bad)]
    for n in notes:
        _say(context, n, "warning")
    summary = night.write_summary(tests, skipped, plan, result, notes)
    final = result.final().values()
    yield dg.Output(summary, metadata={
        "predicted_makespan_s": dg.MetadataValue.float(plan.makespan_s),
        "actual_makespan_s": dg.MetadataValue.float(result.makespan_s),
        "lower_bound_s": dg.MetadataValue.float(plan.lower_bound_s),
        "passed": dg.MetadataValue.int(sum(1 for a in final if a.outcome == "passed")),
        "not_passed": dg.MetadataValue.int(sum(1 for a in final if a.outcome != "passed")),
    })


@dg.graph(description="One night: plan, inputs, dynamic dispatch of every selected test.")
def night_graph() -> None:
    run_night()


def build_jobs(resources: dict) -> tuple[dg.JobDefinition, dg.JobDefinition]:
    executor = dg.in_process_executor
    nightly = night_graph.to_job(
        name="nightly", executor_def=executor, resource_defs=resources,
        config={"ops": {"run_night": {"config": {"cadence": "nightly"}}}},
        description="Every enabled test of the nightly cadence (all labels but long/ft-long), longest first.",
    )
    weekly = night_graph.to_job(
        name="weekly", executor_def=executor, resource_defs=resources,
        config={"ops": {"run_night": {"config": {"cadence": "weekly"}}}},
        description="The full suite, long tests included.",
    )
    return nightly, weekly
