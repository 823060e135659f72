"""Schedules and sensors: cadences, feedback after every run that ran tests, reruns on change.

Every request is ONE run of ``test_runs`` over the whole key range with a selection in its
config. The cron strings are framework M's (nightly Sunday-Friday 15:00 UTC, weekly Saturday).
A sensor never parses a test file itself: it asks the catalog, and the infra probe.

Calibration follows a run that ran tests from two sensors: the run-status sensors, within seconds
of the run's end, and ``calibrate_missed_runs``, for runs no run-status sensor will ever see (a run
status sensor's first tick starts after the newest run, so runs made before the daemon first
started, e.g. ``dagster asset materialize`` right after ``nightly ui --print-command``, are skipped).
Both ask :func:`calibration_request`, which refuses a run whose calibration run (tagged with it)
succeeded or is still going, so a run is calibrated once whichever sensor gets there first; a
calibration run that failed, was cancelled or was left by a killed process (``nightly run`` killed
while it calibrated its own night) is no calibration, and the catch-up asks again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from datetime import UTC, datetime, timedelta

import dagster as dg

from pipelines.core.catalog.ids import safe_filename
from pipelines.core.model import CatalogError
from pipelines.core.runset import RunSelection, unloadable_files
from pipelines.defs.jobs import TEST_JOBS, run_request
from pipelines.defs.keys import TAG_CALIBRATION, TAG_SOURCE_RUN, TEST_RUNS
from pipelines.defs.resources import NightlyResource
from pipelines.defs.runs import TAG_HOST, TAG_PID, process_gone
from pipelines.defs.test_runs import start_refusal
from pipelines.storage.state import StateError

NIGHTLY_CRON = "0 15 * * 0-5"
#: the runs the catch-up looks at: the newest finished runs of the last days, not the whole past
CATCH_UP_DAYS = 7
CATCH_UP_RUNS = 100
#: how long the catch-up leaves a freshly ended run to its run-status sensor (which asks within seconds)
CATCH_UP_GRACE_S = 120
FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
WEEKLY_CRON = "0 15 * * 6"
#: a sensor's skip when the run it would request stops at its start (test_runs.start_refusal)
REFUSED = "not requested, the run would stop before any test (requested on the first tick after the fix)"


def still_listed(keys: list[str], night) -> list[str]:
    """The partition keys the code location listed when it loaded that are still tests now. A request's
    range must start and end at keys both this code location (loaded hours ago, perhaps) and the run's
    own fresh load list: a test file deleted since, first or last in sorted order, failed every scheduled
    night (and each sensor's run) until someone reloaded the location. The run covers every test registered
    when it starts whatever its range says; the range only has to be valid in both."""
    try:
        now = set(night.catalog.by_id()) | set(unloadable_files(night.catalog))
    except CatalogError:  # the run itself says what is wrong with the repo
        return keys
    return [k for k in keys if k in now] or keys


def build_schedules(jobs: dict, keys: list[str], deployment: str, pools: list[str]) -> list:
    def cadence_schedule(name: str, cron: str, cadence: str, description: str):
        @dg.schedule(name=name, job=jobs[cadence], cron_schedule=cron, execution_timezone="UTC",
                     description=description)
        def _schedule(context: dg.ScheduleEvaluationContext, nightly: NightlyResource):
            stamp = context.scheduled_execution_time.strftime("%Y-%m-%dT%H%M")
            return run_request(still_listed(keys, nightly.night()), RunSelection(cadence=cadence), deployment, pools,
                               run_key=f"{cadence}-{stamp}", reason=f"{cadence} schedule")

        return _schedule

    return [cadence_schedule("nightly_schedule", NIGHTLY_CRON, "nightly", "Nightly cadence, Sunday to Friday."),
            cadence_schedule("weekly_schedule", WEEKLY_CRON, "weekly", "Weekly full suite, Saturday.")]


def ran_tests(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Whether a finished run ran tests: a test job, or any launch (a UI pick, a backfill) with a test_runs step."""
    if run.job_name in TEST_JOBS or TEST_RUNS in (run.asset_selection or ()):
        return True
    if run.execution_plan_snapshot_id is None:
        return False
    plan = instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
    return any(step.key == TEST_RUNS.path[-1] for step in plan.steps)


def calibration_request(instance: dg.DagsterInstance, run: dg.DagsterRun, night) -> dg.RunRequest | dg.SkipReason:
    """The calibration run a finished run calls for, or why none: it ran no tests, a calibration of it
    succeeded or is still going (either sensor's, or the CLI's), it wrote no night record, or ``nightly run``
    is calibrating it itself."""
    return _calibration_decision(instance, run, night)[0]


def _calibration_decision(instance: dg.DagsterInstance, run: dg.DagsterRun, night):
    """(calibration_request's answer, whether it is final): not final while a calibration is still
    going, in this process or in `nightly run`'s, whose end (or death) the catch-up waits to see."""
    if not ran_tests(instance, run):
        return dg.SkipReason(f"run {run.run_id} ran no tests"), True
    tried = instance.get_runs(filters=dg.RunsFilter(tags={TAG_SOURCE_RUN: run.run_id}))  # newest first
    for calib in tried:
        if calib.status == dg.DagsterRunStatus.SUCCESS:
            return dg.SkipReason(f"run {run.run_id} is calibrated by run {calib.run_id} already"), True
    for calib in tried:
        if not calib.is_finished and not process_gone(calib):  # one left by a killed `nightly run` is over
            return dg.SkipReason(f"run {run.run_id} is being calibrated by run {calib.run_id} "
                                 f"({calib.status.value})"), False
    if night.state.get(f"runs/{safe_filename(run.run_id)}.json") is None:
        return dg.SkipReason(f"run {run.run_id} wrote no night record (it ended before any test started: "
                             "see the run's log)"), True
    # `nightly run` calibrates its night once the night's run ended, in the process that ran it; a
    # re-execution (UI "Re-execute") copies its parent's tags, inline included, but calibrates nothing itself
    if run.tags.get(TAG_CALIBRATION) == "inline" and not run.parent_run_id and not tried and not process_gone(run):
        return dg.SkipReason(f"run {run.run_id} calibrates itself (nightly run, process "
                             f"{run.tags.get(TAG_PID, '?')} on {run.tags.get(TAG_HOST, '?')})"), False
    # a second request after a calibration that did not succeed: a key of its own, or Dagster drops it
    key = f"calibrate-{run.run_id}" + (f"-after-{tried[0].run_id}" if tried else "")
    return dg.RunRequest(run_key=key, tags={TAG_SOURCE_RUN: run.run_id}), True


def _broken(night, changed: list[str], vanished: set[str]) -> str:
    """The catalog problems of test files that changed or whose tests vanished since the last tick:
    a file edited into a broken registration must say so, not just drop out of the catalog."""
    files = {t.split("::")[0] for t in (*changed, *vanished)}
    problems = [str(p) for p in night.catalog.problems if p.path in files]
    return f"; changed test files with catalog problems (fix them to run them): {'; '.join(problems)}" if problems else ""


def skip_on_unreadable_state(evaluate):
    """A corrupt estimates file or an unreachable state store skips the tick, saying where and what to do,
    instead of erroring every tick; the cursor is not moved (each sensor moves it only once what could
    raise has run), so the next tick after the fix sees the same changes."""
    @functools.wraps(evaluate)
    def _evaluate(*args, **kwargs):
        try:
            return evaluate(*args, **kwargs)
        except (CatalogError, StateError) as exc:
            return dg.SkipReason(f"nightly state unreadable: {exc}")

    return _evaluate


def build_sensors(jobs: dict, keys: list[str], deployment: str, pools: list[str]) -> list:
    calibration = jobs["calibration"]

    def calibrate_after(status: dg.DagsterRunStatus, name: str):
        @dg.run_status_sensor(name=name, run_status=status, request_job=calibration, minimum_interval_seconds=5,
                              default_status=dg.DefaultSensorStatus.RUNNING,
                              # an in-process run (`dagster asset materialize`, execute_in_process) has no code
                              # location origin, and without this Dagster drops it before the sensor sees it;
                              # ran_tests and the inline tag below keep it to our runs, calibrated once
                              monitor_all_code_locations=True,
                              description=f"After any run that ran tests ends ({status.value.lower()}): schedule, UI "
                                          "pick, backfill or sensor: recalibrate est_time and report that run.")
        def _sensor(context: dg.RunStatusSensorContext, nightly: NightlyResource):
            return calibration_request(context.instance, context.dagster_run, nightly.night())

        return _sensor

    @dg.sensor(name="calibrate_missed_runs", job=calibration, minimum_interval_seconds=60,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Calibration and a report for runs that ran tests and have none: runs that ended "
                           f"before the daemon first started (the run-status sensors begin after the newest "
                           f"run), of the last {CATCH_UP_DAYS} days ({CATCH_UP_RUNS} runs at most).")
    @skip_on_unreadable_state
    def calibrate_missed_runs(context: dg.SensorEvaluationContext, nightly: NightlyResource):
        """The cursor lists the runs already decided (requested or never to be), so a run is requested
        once; a run that ended less than CATCH_UP_GRACE_S ago is left to its run-status sensor for now."""
        decided = set(json.loads(context.cursor)) if context.cursor else set()
        since = datetime.now(UTC) - timedelta(days=CATCH_UP_DAYS)
        records = context.instance.get_run_records(filters=dg.RunsFilter(statuses=FINISHED, updated_after=since),
                                                   limit=CATCH_UP_RUNS)
        night, now, requests, waiting, calibrating = nightly.night(), time.time(), [], 0, 0
        for record in reversed(records):  # oldest first
            run = record.dagster_run
            if run.run_id in decided:
                continue
            if record.end_time is None or now - record.end_time < CATCH_UP_GRACE_S:
                waiting += 1
                continue
            request, final = _calibration_decision(context.instance, run, night)
            if isinstance(request, dg.RunRequest):
                requests.append(request)
            if final:
                decided.add(run.run_id)
            else:  # looked at again next tick: the calibration going on may fail, its process be killed
                calibrating += 1
        # only the runs still in the window: the cursor stays as small as the window
        context.update_cursor(json.dumps(sorted(decided & {r.dagster_run.run_id for r in records})))
        if requests:
            return requests
        return dg.SkipReason("no finished run that ran tests is without calibration"
                             + (f" ({waiting} ended in the last {CATCH_UP_GRACE_S} s: left to the run-status "
                                "sensors for now)" if waiting else "")
                             + (f" ({calibrating} being calibrated: looked at again until that calibration "
                                "succeeds, or fails and is asked again)" if calibrating else ""))

    @dg.sensor(name="rerun_changed_tests", job=jobs["tests"], minimum_interval_seconds=300,
               description="ONE run of the enabled tests whose file changed since the last evaluation.")
    @skip_on_unreadable_state
    def rerun_changed_tests(context: dg.SensorEvaluationContext, nightly: NightlyResource):
        night = nightly.night()
        shas = {t.id: t.sha256 for t in night.catalog.tests if t.enabled}
        previous = json.loads(context.cursor) if context.cursor else None
        if previous is None:
            context.update_cursor(json.dumps(shas))
            return dg.SkipReason("first evaluation: remembering test file digests")
        changed = sorted(t for t, s in shas.items() if previous.get(t) != s)
        # may raise (a broken quarantine file, an unreadable store): the cursor stays, the change is seen again
        runnable = night.runset(None, RunSelection(tests=tuple(changed))).run if changed else ()
        refused = start_refusal(night, runnable) if runnable else ""
        if refused:  # the run would stop before any test: the change stays pending until the fix
            return dg.SkipReason(f"{REFUSED}: {refused}")
        context.update_cursor(json.dumps(shas))
        if not runnable:
            return dg.SkipReason("no enabled, plannable test file changed" + _broken(night, changed, set(previous) - set(shas)))
        ids = tuple(t.id for t in runnable)
        # the contents, in full, and the time: a file reverted and relanded (A -> B -> A) has contents
        # an earlier request had, and Dagster drops a request whose key it has seen
        contents = hashlib.sha256(json.dumps([[i, shas[i]] for i in ids]).encode()).hexdigest()[:16]
        at = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        # a broken file changed in the same tick is named first (the reason is cut at 255 characters);
        # the run itself reports every test file whose registration does not load as a failed check
        broken = sorted(set(unloadable_files(night.catalog))
                        & {t.split("::")[0] for t in (*changed, *(set(previous) - set(shas)))})
        if broken:
            context.log.warning("changed test files not run" + _broken(night, changed, set(previous) - set(shas)))
        unloaded = f"registration does not load (reported failed): {', '.join(broken)}; " if broken else ""
        return run_request(still_listed(keys, night), RunSelection(tests=ids), deployment, pools,
                           run_key=f"changed-{contents}-{at}",
                           reason=f"{unloaded}test file changed: {', '.join(ids)}"[:255])

    @dg.sensor(name="infra_change_backfill", job=jobs["tests"], minimum_interval_seconds=300,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description="When a pool's image digest (same tag, new push), GPU driver / CUDA version or "
                           "spec changes: ONE run of that pool's enabled tests of the nightly cadence (none when it "
                           "has none).")
    @skip_on_unreadable_state
    def infra_change_backfill(context: dg.SensorEvaluationContext, nightly: NightlyResource):
        from pipelines.launch.infra import changed_pools, fingerprint, keep_last_observed, probe

        night = nightly.night()
        before = json.loads(context.cursor) if context.cursor else None
        now, problems = keep_last_observed(before or {}, probe(night.deployment))
        unprobed = f" (probe failed, last observed value kept: {'; '.join(problems)})" if problems else ""
        if before is None:
            context.update_cursor(json.dumps(now, sort_keys=True))
            return dg.SkipReason("first evaluation: remembering each pool's image digest, driver and spec"
                                 + unprobed)
        changed = changed_pools(before, now)
        if not changed:
            context.update_cursor(json.dumps(now, sort_keys=True))
            return dg.SkipReason("no pool's image digest, driver or spec changed" + unprobed)
        # what each run would launch, as the run resolves it: may raise (a corrupt estimates file, a broken
        # quarantine file with run_quarantined off, an unreachable store), and the cursor stays
        runnable = {pool: night.runset(None, RunSelection(cadence="nightly", pools=(pool,))).run for pool in changed}
        refused = start_refusal(night, [t for tests in runnable.values() for t in tests])
        if refused:  # the runs would stop before any test: the changes stay pending until the fix
            return dg.SkipReason(f"{REFUSED}: {refused}")
        context.update_cursor(json.dumps(now, sort_keys=True))
        requests, idle = [], []
        # the cursor already fires each change once; the time keeps a return to an earlier state (a
        # rollback, then the upgrade again) from reusing that state's key, which Dagster would drop
        at = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        for pool, what in sorted(changed.items()):
            if not runnable[pool]:  # its run would fail with nothing to run, every partition painted Failed
                idle.append(f"no nightly test runs on pool {pool} ({'; '.join(what)})")
                continue
            requests.append(run_request(still_listed(keys, night), RunSelection(cadence="nightly", pools=(pool,)),
                                        deployment, pools,
                                        run_key=f"infra-{pool}-{fingerprint(now[pool])}-{at}",
                                        reason=f"infra change on {pool}: {'; '.join(what)}"))
        if not requests:
            return dg.SkipReason("infra change, nothing to rerun: " + "; ".join(idle) + unprobed)
        for line in idle:
            context.log.info(f"infra change, nothing to rerun: {line}")
        return requests

    return [calibrate_after(dg.DagsterRunStatus.SUCCESS, "calibrate_after_tests"),
            calibrate_after(dg.DagsterRunStatus.FAILURE, "calibrate_after_failed_tests"),
            calibrate_after(dg.DagsterRunStatus.CANCELED, "calibrate_after_canceled_tests"),
            calibrate_missed_runs, rerun_changed_tests, infra_change_backfill]
