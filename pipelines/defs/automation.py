"""Schedules and sensors: the framework's cron cadences, calibration after every night, reruns on change.

The cron strings are the ones framework M uses (nightly Sunday-Friday 15:00 UTC, weekly full
suite Saturday). A sensor never parses a test file itself: it asks the catalog.
"""


import hashlib
import json

import dagster as dg

from pipelines.defs.resources import NightlyResource

NIGHTLY_CRON = "0 15 * * 0-5"
WEEKLY_CRON = "0 15 * * 6"


def build_schedules(nightly: dg.JobDefinition, weekly: dg.JobDefinition) -> list[dg.ScheduleDefinition]:
    return [
        dg.ScheduleDefinition(name="nightly_schedule", job=nightly, cron_schedule=NIGHTLY_CRON,
                              execution_timezone="UTC", description="Nightly cadence, Sunday to Friday."),
        dg.ScheduleDefinition(name="weekly_schedule", job=weekly, cron_schedule=WEEKLY_CRON,
                              execution_timezone="UTC", description="Weekly full suite, Saturday."),
    ]


def build_sensors(nightly: dg.JobDefinition, weekly: dg.JobDefinition, calibration_job,
                  test_runs_job) -> list:
    def calibrate_after(status: dg.DagsterRunStatus, name: str, description: str):
        @dg.run_status_sensor(name=name, run_status=status, monitored_jobs=[nightly, weekly],
                              request_job=calibration_job, description=description)
        def _sensor(context: dg.RunStatusSensorContext):
            return dg.RunRequest(run_key=f"calibrate-{context.dagster_run.run_id}")

        return _sensor

    calibrate_after_night = calibrate_after(
        dg.DagsterRunStatus.SUCCESS, "calibrate_after_night",
        "After every night, recalibrate est_time and write the report.")
    calibrate_after_failed_night = calibrate_after(
        dg.DagsterRunStatus.FAILURE, "calibrate_after_failed_night",
        "A night that failed part-way still has passing samples worth calibrating.")

    @dg.sensor(
        name="rerun_changed_tests", job=test_runs_job, minimum_interval_seconds=300,
        description="Rerun a test whose file changed, and every test when a pool image changes.",
    )
    def rerun_changed_tests(context: dg.SensorEvaluationContext, nightly: NightlyResource):
        night = nightly.night()
        shas = {t.id: t.sha256 for t in night.catalog.tests if t.enabled}
        images = {p.name: p.image for p in night.deployment.pools}
        images_digest = hashlib.sha256(json.dumps(images, sort_keys=True).encode()).hexdigest()[:16]
        previous = json.loads(context.cursor) if context.cursor else None
        context.update_cursor(json.dumps({"shas": shas, "images": images_digest}))
        if previous is None:
            return dg.SkipReason("first evaluation: remembering test file digests and images")
        if previous.get("images") != images_digest:
            changed = sorted(shas)
            why = "pool image changed"
        else:
            changed = sorted(t for t, s in shas.items() if previous["shas"].get(t) != s)
            why = "test file changed"
        if not changed:
            return dg.SkipReason("no test file or image changed")
        return [dg.RunRequest(run_key=f"{tid}@{shas[tid][:12]}-{images_digest}", partition_key=tid,
                              tags={"nightly/reason": why}) for tid in changed]

    return [calibrate_after_night, calibrate_after_failed_night, rerun_changed_tests]
