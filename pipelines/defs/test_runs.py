"""``test_runs``: the one asset that runs tests, one partition per test id, many partitions per run.

With a single-run backfill policy one run receives every picked key (a UI pick, a backfill of
all partitions, ``dagster asset materialize --partition-range``); schedules, sensors and the CLI
request the whole key range plus a selection in the run config, so any selection is ONE run.
Those requests set ``all_registered``: the run covers every test registered when it starts, read
afresh, so a test file added since the code location loaded runs too (its partition shows once
the location is reloaded); a UI pick of every partition means the same.
A run whose config selects nothing (a typo'd label, a named test outside the picked keys) fails
with the reason before it writes any record, as ``nightly run`` exits 3. A pick or backfill whose
keys are all disabled (or on hardware no pool runs) is no mistake: a backfill splits into one run per
contiguous key range, so a disabled test alone in a pick gets a run of its own; that run observes its
tests as not launched and ends SUCCESS, never red, with no record.
The body plans the run's tests together and dispatches them on free GPUs
(``pipelines.execute``); each finished test is reported at once as a materialization of its
partition and a ``test_passed`` check result. Disabled and unplanned tests are observed with
their reason, never launched, never red. Inputs are materialized (or observed as reused) in
their own partitions within the same run, so lineage shows what each test used.
"""

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import dagster as dg

from pipelines.core.model import Catalog, CatalogError, timeout_floor_problem
from pipelines.core.plan.predict import predicted_text
from pipelines.core.runset import RunSelection, RunSet, unloadable_files
from pipelines.core.select import RUN_CONFIG_NAMES, Selection, SelectionError, why_nothing
from pipelines.core.specs_schema import env_name_problem
from pipelines.defs.jobs import JOB_CADENCE
from pipelines.defs.keys import (
    CONVERTED,
    DATASETS,
    MODEL_WEIGHTS,
    RANGE_END,
    RANGE_START,
    TEST_PASSED,
    TEST_RUNS,
    TEST_RUNS_POOL,
)
from pipelines.defs.metadata import (
    INFRA_OUTCOMES,
    attempt_metadata,
    built_metadata,
    check_result,
    check_verdict,
    plan_markdown,
    planned_metadata,
    unexcused_checks,
)
from pipelines.defs.resources import NightlyResource
from pipelines.defs.runs import (
    canceled_on_interrupt,
    fail_stale_runs,
    interrupted_if_worker_dies,
    process_tags,
)
from pipelines.defs.tags import run_tags, start_tags
from pipelines.execute import Finished, InputFailed, InputReady, NightDone, Planned, replanned_text, run_tests
from pipelines.interrupts import deliver, held_signals

_DONE = object()  # the end of a conversion
KIND_ASSET = {"model": MODEL_WEIGHTS, "dataset": DATASETS, "conversion": CONVERTED}
#: the outcome of a test file whose registration does not load (reported failed, with the problems)
UNLOADABLE = "registration does not load"


class TestRunsConfig(dg.Config):
    """What a run of test_runs covers beyond its partition keys; all empty = exactly the keys picked."""

    cadence: str = ""
    labels: list[str] = []
    suites: list[str] = []
    pools: list[str] = []
    #: explicit test ids (a sensor's changed files)
    tests: list[str] = []
    #: names of environment variables passed to every test; values come from the run's process
    #: environment, so secrets never land in Dagster's run storage (e.g. MINIRL_FAIL)
    env_from: list[str] = []
    #: override the repo's timeout floor in seconds (0 = assets/repos.yaml)
    timeout_floor_s: int = 0
    #: run over every test registered when the run starts (a test file added since the code location
    #: loaded included), not only the partition keys; schedules, sensors and `nightly run` set it
    all_registered: bool = False

    def floor(self) -> int | None:
        """The floor to use (None: the repo's); a value out of range fails the run before any test starts."""
        if not self.timeout_floor_s:
            return None
        problem = timeout_floor_problem(self.timeout_floor_s)
        if problem:
            raise dg.Failure(f"timeout_floor_s: {problem} (0 = the repo's)")
        return self.timeout_floor_s

    def extra_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The ``env_from`` names with their values from ``environ`` (the run's process); a name a pod
        or a shell would refuse, or one that is not set, fails the run before any test starts."""
        env = {}
        for name in self.env_from:
            bad = env_name_problem(name)
            if bad:
                raise dg.Failure(f"env_from: {bad}")
            if name not in environ:
                raise dg.Failure(f"env_from names {name!r}, which is not set in the run's environment; "
                                 f"set it where the run executes (the CLI's --env does) or drop it")
            env[name] = environ[name]
        return env

    def selection(self, job_cadence: str = "") -> RunSelection:
        """The run's selection; ``job_cadence`` (the job's own, nightly or weekly) when ``cadence`` is empty."""
        return RunSelection(cadence=self.cadence or job_cadence, labels=tuple(self.labels), suites=tuple(self.suites),
                            pools=tuple(self.pools), tests=tuple(self.tests))


def throwaway_instance_warning(home, dagster_home: str | None, ephemeral: bool) -> str:
    """Why nothing will follow a run on a throwaway instance ('' on a lasting one): it still runs the
    tests, but the UI and the calibration sensors look at the instance in DAGSTER_HOME, and
    `dagster asset materialize` without it runs on a temporary folder it deletes at exit."""
    if dagster_home and not ephemeral:
        return ""
    why = "an in-memory one" if ephemeral else "DAGSTER_HOME is not set"
    return (f"this run is on a throwaway Dagster instance ({why}): the UI will not list it and no calibration "
            "run or report follows it (history still keeps its attempts); run it with "
            f"DAGSTER_HOME={Path(home).resolve() / 'dagster'} (docs/ui.md)")


def _say(context: dg.AssetExecutionContext, message: str, level: str = "info") -> None:
    """Progress for the terminal (stdout; the step's log in the UI) and the event log."""
    print(f"nightly: {message}", flush=True)
    getattr(context.log, level)(message)


def _keys(context: dg.AssetExecutionContext) -> list[str]:
    """The run's partition keys. PartitionsNamed refused a run naming none, or keys the code location does
    not list, before the step: keys that still cannot be read stop the run, never read as "every test"."""
    try:
        return list(context.partition_keys)
    except Exception as exc:  # noqa: BLE001 - Dagster's own error, said with what to do
        raise dg.Failure(f"the run's partition keys cannot be read ({exc}); pick the partitions again after "
                         "reloading the code location (Deployment -> Reload); no test was started") from exc


def _nothing_to_run(night, keys: list[str] | None, selection: RunSelection, runset: RunSet) -> str:
    """Why a run launches no test at all (what the CLI says before exiting 3)."""
    by_id = night.catalog.by_id()
    among = [by_id[k] for k in keys if k in by_id] if keys is not None else list(night.catalog.tests)
    if keys is not None and not among:
        return (f"none of the {len(keys)} picked partition(s) is a registered test now; reload the code location "
                "(Deployment -> Reload) and pick again")
    if runset.skipped:  # a pick of disabled tests only: a night that ran nothing is no record to keep
        shown = "; ".join(f"{t.id} ({why})" for t, why in runset.skipped[:5])
        more = f"; and {len(runset.skipped) - 5} more" if len(runset.skipped) > 5 else ""
        return f"every selected test is disabled or on hardware no pool runs: {shown}{more}"
    if selection.tests:
        return (f"the named test(s) {', '.join(selection.tests)} are not among the run's {len(among)} partition "
                "key(s); pick their partitions, or launch the whole range")
    why = why_nothing(among, Selection(cadence=selection.cadence or None, labels=selection.labels,
                                       suites=selection.suites), RUN_CONFIG_NAMES)
    return why or f"{selection.describe()} selects none of the run's {len(among)} test(s)"


def _unloadable(keys: list[str] | None, night, whole: frozenset[str], all_registered: bool) -> dict:
    """The run's test files whose registration does not load (path -> located problems): those picked,
    or every one for a run over every registered test (a schedule, a sensor, the CLI, the whole range)."""
    broken = unloadable_files(night.catalog)
    if keys is None or all_registered or (whole and set(keys) >= whole):
        return broken
    return {k: v for k, v in broken.items() if k in keys}


def _report_unloadable(context: dg.AssetExecutionContext, broken: dict):
    """Each unloadable test file recorded on its partition and its test_passed check failed with the
    located problems: never green, never silently gone from the UI."""
    for path, problems in sorted(broken.items()):
        reason = "; ".join(str(p) for p in problems)
        _say(context, f"{path}: registration does not load, reported failed: {reason}", "error")
        yield dg.AssetMaterialization(asset_key=TEST_RUNS, partition=path, metadata={
            "outcome": dg.MetadataValue.text(UNLOADABLE), "reason": dg.MetadataValue.text(reason)})
        yield _targeted(context, dg.AssetCheckEvaluation(
            asset_key=TEST_RUNS, check_name=TEST_PASSED.name, passed=False, severity=dg.AssetCheckSeverity.ERROR,
            description=f"{UNLOADABLE}: {reason} (fix the registration, then reload the code location)",
            partition=path, metadata={"problems": dg.MetadataValue.md("\n".join(f"- `{p}`" for p in problems))}))


def _resolve(context: dg.AssetExecutionContext, night, selection: RunSelection, whole: frozenset[str],
             all_registered: bool, unloadable: frozenset[str] = frozenset()) -> RunSet:
    """The run's tests; ``all_registered`` or the whole key range: every test registered now. A
    selection naming nothing that exists, or a config selection launching no test, fails the run with
    the reason before any record is written; a pick (no config selection) of tests that are never
    launched only is returned as it is, with nothing to run. ``unloadable`` keys (test files whose
    registration does not load) are reported by the caller, not resolved here."""
    keys = _keys(context)
    if keys is not None and unloadable:
        keys = [k for k in keys if k not in unloadable]
    stale: list[str] = []
    if keys is not None and (all_registered or (whole and set(keys) >= whole)):
        stale, keys = [k for k in keys if k not in night.catalog.by_id()], None
    try:
        runset = night.runset(keys, selection)
    except SelectionError as exc:
        raise dg.Failure(f"run config: {exc}") from exc
    if not runset.run and not (selection.empty and runset.skipped):
        raise dg.Failure(f"nothing to run: {_nothing_to_run(night, keys, selection, runset)}")
    for key in (*stale, *runset.unknown):
        _say(context, f"{key}: no longer registered; reload the code location to refresh the partitions",
             "warning")
    return runset


def start_refusal(night, tests) -> str:
    """Why a run of ``tests`` stops at its start, before any test ('' when it starts), as `nightly run`
    does: a broken quarantine file (its quarantines would not hold), a GPU lock folder a local night
    cannot lock (not every test an infra_error). The sensors ask it before they request a run and move
    their cursor, so a change they request is one the run takes, and one it would refuse stays pending."""
    try:
        night.quarantine_doc()
    except CatalogError as exc:
        return f"quarantine file: {exc}"
    from pipelines.launch.local import gpu_lock_problem

    return gpu_lock_problem(night.deployment.launcher, tests)


def one_partition(keys: list[str] | None, runset: RunSet) -> bool:
    """Whether the run is exactly one test's partition: the Pipes path's result carries no partition,
    and Dagster applies it to every partition of the run (one test of a range stays on the watch path)."""
    return len(runset.run) == 1 and keys == [runset.run[0].id]


class _Reporter:
    """Our events as Dagster events: observations, materializations and check results.

    ``pipes``: a Pipes session ran in this step, so Dagster expects the step's own result, exactly
    once: the test's final attempt. An attempt retried after an infra error is observed on the
    partition with its metadata, so its result waits until the next attempt or the end of the night.
    ``current`` is the conversion under way: an interrupt that lands in Dagster's frame while it
    stores one of its events leaves the rest (a check result) to :meth:`stopped`.
    """

    def __init__(self, context: dg.AssetExecutionContext, night, selection: RunSelection, by_id: dict,
                 pipes: bool = False):
        self.context, self.night, self.selection, self.by_id, self.pipes = context, night, selection, by_id, pipes
        self.held: list = []  # Pipes: the latest attempt, (test id, metadata, check) not yet reported
        self.pending: dict = {}  # quarantined tests whose last attempt failed: excused only if the night's verdict says so
        self.current = iter(())

    def of(self, event):
        """The Dagster events of one of ours, lazily: a check is tied to the materialization stored before it."""
        context, night = self.context, self.night
        if isinstance(event, Planned):
            plan = event.plan
            predicted = predicted_text(plan.predicted_median_s, plan.predicted_p90_s, plan.makespan_s)
            _say(context, f"{len(plan.assignments)} test(s) of {self.selection.describe()}; {predicted} "
                          f"(lower bound {plan.lower_bound_s:.1f}s); {len(event.runset.skipped)} not launched")
            context.log.info("plan:\n" + plan_markdown(plan))
            for a in plan.ordered():
                yield dg.AssetObservation(asset_key=TEST_RUNS, partition=a.test_id,
                                          metadata=planned_metadata(a, self.by_id[a.test_id], night.night))
            yield from _not_launched(event.runset)
        elif isinstance(event, InputReady):
            cls = dg.AssetObservation if event.built.reused else dg.AssetMaterialization
            yield cls(asset_key=KIND_ASSET[event.requirement.kind], partition=event.requirement.key,
                      metadata=built_metadata(event.built, event.requirement.source))
        elif isinstance(event, InputFailed):
            yield dg.AssetObservation(asset_key=KIND_ASSET[event.requirement.kind], partition=event.requirement.key,
                                      metadata={"outcome": "build failed", "reason": event.error})
        elif isinstance(event, Finished):
            meta = attempt_metadata(event.attempt, event.test, night.night)
            check = check_result(event.attempt, event.test, event.quarantined)
            if event.quarantined and event.attempt.outcome not in ("passed", *INFRA_OUTCOMES):
                self.pending[event.test.id] = (event.attempt, event.test)
            else:
                self.pending.pop(event.test.id, None)  # a retry decides
            if self.pipes:
                yield from _held_attempt(self.held, final=False)  # another attempt followed: that one was retried
                self.held.append((event.test.id, meta, check))
            else:
                yield dg.AssetMaterialization(asset_key=TEST_RUNS, partition=event.test.id, metadata=meta)
                yield _targeted(context, check)
        elif isinstance(event, NightDone):
            yield from self.end()
            s = event.summary
            yield from (_targeted(context, c) for c in unexcused_checks(self.pending, s.get("verdict") or {}))
            # the figure the record stores and the closing line repeats, not the schedule's on medians
            predicted = predicted_text(s.get("predicted_median_s") or 0, s.get("predicted_p90_s") or 0,
                                       s["predicted_makespan_s"])
            _say(context, f"done: {predicted}{replanned_text(s)}, actual {s['actual_makespan_s']:.1f}s; record "
                          f"{night.state.uri('runs/' + night.run_id + '.json')}")

    def end(self):
        """The Pipes path's held attempt, as the step's result."""
        return _held_attempt(self.held, final=True, context=self.context)

    def each(self):
        """The conversion under way, one Dagster event at a time. A signal while one is made waits
        until it is handed to Dagster: raised in the conversion, it would drop the rest (a check
        result after its test's materialization)."""
        while True:
            with held_signals(stopping=False) as held:
                e = next(self.current, _DONE)
            if e is _DONE:
                deliver(held)
                return
            yield e
            deliver(held)

    def after(self, events, exc: BaseException):
        """After ``exc`` in our frame or Dagster's (a signal while we reported, not while the night
        ran): the rest of the conversion under way, then the night interrupted with it as if it had
        landed there (tests killed, record written), and what it still reports: the killed tests.
        A night that ``exc`` already ended reports nothing more."""
        for e in self.current:  # noqa: UP028 - the conversion object is shared: see _dagster_events
            yield e
        try:
            event = events.throw(exc)
        except BaseException:  # noqa: BLE001 - the night ended (with exc, or its record's failure)
            return
        while True:
            self.current = self.of(event)
            for e in self.current:  # noqa: UP028
                yield e
            try:
                event = next(events)
            except BaseException:  # noqa: BLE001 - the night ended as an interrupted one: its record is written
                return

    def stopped(self, events, store) -> None:
        """The night left suspended by an interrupt that landed in Dagster's frame, after the step
        failed: as :meth:`after`, each Dagster event stored by ``store``, as nothing can be yielded now."""
        for e in self.after(events, dg.DagsterExecutionInterruptedError()):
            store(self._loggable(e))
        for e in self.end():
            store(self._loggable(e))

    def _loggable(self, e):
        """A Pipes step result as the materialization of the step's one partition (a result is yielded only)."""
        if isinstance(e, dg.MaterializeResult):
            return dg.AssetMaterialization(asset_key=TEST_RUNS, partition=self.context.partition_key,
                                           metadata=e.metadata)
        return e


def _dagster_events(reporter: _Reporter, events):
    """Each of the night's events as Dagster events, as it happens."""
    try:
        for event in events:
            reporter.current = reporter.of(event)
            yield from reporter.each()  # not the conversion itself: a close leaves its rest to reporter.stopped
    except GeneratorExit:  # closed by Dagster while suspended here: nothing more may be yielded
        raise
    except BaseException as exc:  # the night failed or was interrupted: still its result, and what it reports
        yield from reporter.after(events, exc)
        yield from reporter.end()
        raise
    yield from reporter.end()


def _targeted(context: dg.AssetExecutionContext, check: dg.AssetCheckEvaluation) -> dg.AssetCheckEvaluation:
    """The check result tied to its partition's newest materialization (the one just reported).

    Dagster shows a partition's check status only while the result targets that partition's latest
    materialization; an untargeted result counts as stale, and the check's Partitions view then
    says every test is "Missing", hiding which ones failed."""
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData,
    )

    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=TEST_RUNS, asset_partitions=[check.partition]), limit=1).records
    if not records or records[0].run_id != context.run.run_id:  # not materialized by this run: nothing to tie it to
        return check
    newest = records[0]
    return dg.AssetCheckEvaluation(
        asset_key=check.asset_key, check_name=check.check_name, passed=check.passed, metadata=check.metadata,
        severity=check.severity, description=check.description, blocking=check.blocking, partition=check.partition,
        target_materialization_data=AssetCheckEvaluationTargetMaterializationData(
            storage_id=newest.storage_id, run_id=newest.run_id, timestamp=newest.timestamp))


def _not_launched(runset: RunSet):
    """Each test the run never launches, observed on its partition with the reason (never red)."""
    for t, why in runset.skipped:
        yield dg.AssetObservation(asset_key=TEST_RUNS, partition=t.id,
                                  metadata={"outcome": "skipped", "reason": why,
                                            "est_time_s": t.est_time, "est_source": t.est_source})


def _held_attempt(held: list, final: bool, context: dg.AssetExecutionContext | None = None):
    """The Pipes path's held attempt: the step's result when ``final``, else an observation of the
    partition with the same metadata (the attempt was retried); then its check result."""
    if not held:
        return
    test_id, meta, check = held.pop()
    if final:
        yield dg.MaterializeResult(asset_key=TEST_RUNS, metadata=meta)
        yield _targeted(context, check) if context is not None else check
    else:
        yield dg.AssetObservation(asset_key=TEST_RUNS, partition=test_id, metadata=meta)
        yield check


def _excused(nightly: NightlyResource, event, key: str | None) -> bool:
    """Whether the night that materialized the partition excused its failure (quarantined then), as
    its record's verdict says; False when the record cannot be read."""
    run_id = getattr(event, "run_id", None) or getattr(getattr(event, "event_log_entry", None), "run_id", None)
    if not run_id or key is None:
        return False
    try:
        text = nightly.night(run_id=run_id).state.get(f"runs/{run_id}.json")
        return key in ((json.loads(text) if text else {}).get("verdict") or {}).get("excused_quarantined", ())
    except Exception:  # noqa: BLE001 - a record that cannot be read leaves the plain rule
        return False


#: what a run of test_runs that names no partition is told (docs/ui.md, the Launchpad row)
NO_PARTITIONS = ("this run of test_runs names no partition (no dagster/partition tag, no "
                 "dagster/asset_partition_range_start and _end tags), and test_runs runs the tests of its "
                 "partitions: in the Launchpad pick the partitions (all of them, or a range) before launching; "
                 "with `dagster job execute` add --tags '{\"dagster/asset_partition_range_start\": \"FIRST\", "
                 "\"dagster/asset_partition_range_end\": \"LAST\"}' (test ids); or use `nightly run` or the "
                 "schedules (docs/ui.md)")


def names_partitions(tags: Mapping[str, str]) -> bool:
    """Whether a run's tags name test_runs partitions (one key, or a range), as Dagster reads them."""
    return "dagster/partition" in tags or bool(tags.get(RANGE_START) and tags.get(RANGE_END))


def partitions_problem(tags: Mapping[str, str], order: Sequence[str]) -> str:
    """Why a run's partition tags name no valid pick of ``order`` (the test ids the code location lists
    now), in words that say what to do; "" when they do. A key that is not listed (a test deleted or
    renamed since the UI listed the partitions, a mistyped or hostile id in ``--tags``) made Dagster's own
    step set-up fail with its internal error, or, where it got past that, ran every registered test."""
    index = {k: i for i, k in enumerate(order)}
    named = ([("dagster/partition", tags["dagster/partition"])] if "dagster/partition" in tags
             else [(RANGE_START, tags.get(RANGE_START, "")), (RANGE_END, tags.get(RANGE_END, ""))])
    unknown = [(tag, key) for tag, key in named if key not in index]
    if unknown:
        said = "; ".join(f"{key!r} (run tag {tag})" for tag, key in unknown)
        return (f"{said}: not a test this code location lists now: a test deleted or renamed since the partitions "
                "were listed (reload the code location, Deployment -> Reload, and pick again) or a mistyped id "
                "(`nightly catalog` lists the test ids); no test was started")
    if len(named) == 2 and index[named[0][1]] > index[named[1][1]]:
        return (f"the partition range {named[0][1]} .. {named[1][1]} (run tags {RANGE_START} and {RANGE_END}) is "
                f"empty: {named[0][1]} comes after {named[1][1]} in the partitions' order (sorted test ids); give the "
                "earlier one as the start; no test was started")
    return ""


class PartitionsNamed(dg.ConfigurableResource):
    """A check set up with test_runs's step, before the step starts: Dagster's own step code fails a run
    that names no partition first (reading the inputs' data versions), with "Cannot access
    partition_key for a non-partitioned run", which says nothing of what to do; and one whose keys the
    code location does not list (:func:`partitions_problem`) with its internal error."""

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        run = context.dagster_run
        if run is not None and not names_partitions(run.tags):
            raise dg.Failure(NO_PARTITIONS)
        listed = self.listed()
        if run is not None and listed is not None and (problem := partitions_problem(run.tags, listed)):
            raise dg.Failure(problem)

    def listed(self) -> Sequence[str] | None:
        """The partition keys in their order (:func:`build_test_runs` knows them); None: not known here."""
        return None


def build_test_runs(catalog: Catalog, test_parts: dg.PartitionsDefinition, deps: list[dg.AssetDep]):
    """The asset and its partitioned check (the check's results come from the asset's own run)."""
    order = tuple(test_parts.get_partition_keys())
    whole = frozenset(order)

    class KeysListed(PartitionsNamed):
        def listed(self) -> Sequence[str] | None:
            return order

    @dg.asset(key=TEST_RUNS, partitions_def=test_parts, group_name="tests", deps=deps,
              backfill_policy=dg.BackfillPolicy.single_run(), output_required=False, pool=TEST_RUNS_POOL,
              resource_defs={"partitions_named": KeysListed()},
              description="Runs the picked tests together on free GPUs; one partition per test id "
                          "(outcome, elapsed, est_time, timeout, node and log of each attempt).")
    def test_runs(context: dg.AssetExecutionContext, config: TestRunsConfig, nightly: NightlyResource,
                  partitions_named: PartitionsNamed):
        # a step in a child of the run worker must not run on when the worker is killed (kill -9)
        with interrupted_if_worker_dies(lambda m: _say(context, m, "error")):
            yield from run_night(context, config, nightly)

    def run_night(context: dg.AssetExecutionContext, config: TestRunsConfig, nightly: NightlyResource):
        """The asset's body: the run's tests, from its config and partition keys to its record."""
        selection = config.selection(JOB_CADENCE.get(context.job_name, ""))
        try:  # refused after the run is tagged: the Runs page still says why, where and which cadence
            env, floor, refused = config.extra_env(os.environ), config.floor(), None
        except dg.Failure as exc:
            env, floor, refused = {}, None, exc
        night = nightly.night(run_id=context.run.run_id, extra_env=tuple(sorted(env.items())),
                              timeout_floor_s=floor, cadence=selection.cadence or "release")
        started = start_tags(night, selection, dict(context.run.tags))
        context.instance.add_run_tags(context.run.run_id, started)
        if refused is not None:
            raise refused
        throwaway = throwaway_instance_warning(night.home, os.environ.get("DAGSTER_HOME"),
                                               context.instance.is_ephemeral)
        if throwaway:
            _say(context, throwaway, "warning")
        for problem in night.catalog.problems:
            _say(context, f"catalog problem: {problem}", "warning")
        picked = _keys(context)
        broken = _unloadable(picked, night, whole, config.all_registered)
        yield from _report_unloadable(context, broken)
        if broken and picked is not None and set(picked) <= set(broken):
            raise dg.Failure("nothing to run: every picked test file's registration does not load: "
                             + "; ".join(str(p) for ps in broken.values() for p in ps))
        runset = _resolve(context, night, selection, whole, config.all_registered, frozenset(broken))
        if not runset.run:  # a pick of tests never launched only: observed so, the run a SUCCESS, no record
            _say(context, f"nothing to launch: {_nothing_to_run(night, _keys(context), selection, runset)}")
            yield from _not_launched(runset)
            return
        refused = start_refusal(night, runset.run)
        if refused:
            raise dg.Failure(refused)

        from pipelines.launch.infra import probe

        infra = probe(night.deployment)
        tags = {**run_tags(night, selection, infra), **started}
        context.instance.add_run_tags(context.run.run_id, {**tags, **process_tags(context.run.run_id)})
        for note in fail_stale_runs(context.instance, context.run.run_id):
            _say(context, note, "warning")
        launcher = None
        if night.deployment.launcher == "kubernetes" and one_partition(_keys(context), runset):
            from pipelines.launch.kubernetes.pipes import pipes_launcher_for  # one pod through Pipes

            night.pin_images(infra)
            launcher = pipes_launcher_for(context, night.deployment, **night.pod_settings())

        by_id = night.catalog.by_id()
        def ended(run_ids: list[str]) -> list[str]:  # only runs this instance knows: not another's night
            return [r.run_id for r in context.instance.get_runs(filters=dg.RunsFilter(run_ids=run_ids)) if r.is_finished]

        events = run_tests(night, runset, selection, launcher=launcher, say=lambda m: _say(context, m),
                           infra=infra, tags=tags, ended_runs=ended)
        reporter = _Reporter(context, night, selection, by_id, pipes=launcher is not None)
        with canceled_on_interrupt(context, events, reporter.stopped):
            yield from _dagster_events(reporter, events)

    @dg.asset_check(asset=TEST_RUNS, name=TEST_PASSED.name, partitions_def=test_parts, blocking=False,
                    description="The test's last attempt passed. Fails for failed and timed-out tests with "
                                "the reason; infra outcomes (lost node, unusable GPU, interrupted) fail with "
                                "severity WARN so they are told apart. Evaluated by test_runs as each test ends.")
    def test_passed(context: dg.AssetCheckExecutionContext, nightly: NightlyResource) -> dg.AssetCheckResult:
        """Re-evaluate from the partition's latest materialization (when launched on its own), by the
        rule the run used inline: infra and a quarantine the night excused warn."""
        key = context.partition_key if context.has_partition_key else None
        event = context.instance.get_latest_materialization_event(TEST_RUNS) if key is None else next(
            iter(context.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=TEST_RUNS, asset_partitions=[key]), limit=1).records), None)
        mat = getattr(event, "asset_materialization", None) or getattr(getattr(event, "event_log_entry", None),
                                                                       "asset_materialization", None)
        if mat is None:
            return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN,
                                       description="the test has not run yet")
        outcome = mat.metadata.get("outcome").value if "outcome" in mat.metadata else "?"
        reason = mat.metadata.get("reason").value if "reason" in mat.metadata else ""
        passed, severity, description, _ = check_verdict(outcome, reason, _excused(nightly, event, key))
        return dg.AssetCheckResult(passed=passed, severity=severity, description=description)

    return test_runs, test_passed
