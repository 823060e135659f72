"""``nightly run``: one whole night through Dagster on the embedded default (``make nightly``).

Shows the plan before it runs, progress while it runs, and a table plus the report path at the
end. The night is ONE run of the ``test_runs`` asset over every partition with the selection
as config, the same path a schedule takes, executed in this process on the project's instance
(``nightly ui`` shows it); calibration and the report follow in a second run.

Exit status: 0 when every launched test passed and the night had no problems; 1 when a test
did not pass (a quarantined flaky test does not count, an infra fault always does) or the
calibration run failed; 2 when a flag or an input is wrong, or the state folder cannot be written
(checked first; set NIGHTLY_HOME or --home), or on a local deployment the host's GPU lock folder
cannot be made or written (checked before the plan; set NIGHTLY_GPU_LOCK_DIR); 3 when the night had
problems (catalog problems, tests no pool runs, nothing selected) unless ``--accept-problems``; 4 when
the store refused the night's results (they are kept under ``<home>/unsaved/<night>/``, with the ``nightly readd``
command that re-adds them); 5 when the deployment's store did not answer (S3 unreachable, timing out or failing with 5xx:
at the night's start, nothing ran; run it again once it answers); 130 when interrupted by Ctrl-C or SIGTERM, wherever it lands (running tests are killed and recorded
as ``interrupted``, the Dagster run ends CANCELED, never NOT_STARTED); 141 when the reader of stdout went away (``--list-only | head``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import time
import uuid
from pathlib import Path

from pipelines.cli import flags
from pipelines.cli.flags import FlagError, add_timeout_floor, timeout_floor
from pipelines.core.select import CADENCES, Selection, split_csv, why_nothing
from pipelines.interrupts import from_interrupt, lost_interrupt

EXIT_TEST_FAILED, EXIT_PROBLEMS, EXIT_NOT_STORED, EXIT_INTERRUPTED = 1, 3, 4, 130


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run one night (catalog, plan, inputs, tests, calibration, report)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cadence", default="nightly", choices=CADENCES,
                   help="which scope (default: nightly): nightly skips long/ft-long tests, pr skips nightly-only "
                        "ones, weekly and release run all")
    p.add_argument("--labels", action="append", help="only tests with one of these labels (a,b)")
    p.add_argument("--suite", action="append", dest="suites", help="only these suites")
    p.add_argument("--repo", type=flags.path_text, help="a repo name in assets/repos.yaml (default: its `default`) or any checkout path")
    p.add_argument("--deployment", help="deployment in assets/cluster.yaml (default: $NIGHTLY_DEPLOYMENT, else local)")
    p.add_argument("--home", type=flags.path, help="state folder (default: $NIGHTLY_HOME or .nightly/)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment for every test (e.g. MINIRL_FAIL=test_grpo); only the names reach "
                        "Dagster's run storage, the values stay in this process")
    add_timeout_floor(p)
    p.add_argument("--list-only", action="store_true", help="print the plan and stop")
    p.add_argument("--dry-run", action="store_true",
                   help="Kubernetes deployments: print every pod the night would create as multi-document YAML "
                        "(like kubectl --dry-run=client -o yaml) and stop; nothing is created, but it reads what "
                        "a night reads first: each pool's image digest, the nodes' GPU driver when a kubeconfig "
                        "reaches the cluster, and on S3 state (production) the estimates there (S3 read access)")
    p.add_argument("--accept-problems", action="store_true",
                   help="exit 0 despite catalog problems, unplanned tests or an empty selection")
    p.set_defaults(func=run)


def _parse_env(pairs: list[str]) -> dict[str, str]:
    """``--env`` pairs; a name a pod or a shell would refuse stops here, not on every pod of the night."""
    from pipelines.core.specs_schema import env_name_problem

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise FlagError(f"--env {pair!r}: expected KEY=VALUE with KEY made of letters, digits and _; "
                            "e.g. --env MINIRL_FAIL=test_grpo")
        bad = env_name_problem(key)
        if bad:
            raise FlagError(f"--env {pair!r}: {bad}")
        out[key] = value
    return out


def problems_of(night, runset) -> list[str]:
    """What makes a night not green even when every launched test passed, as its record will keep it
    (an empty selection is its own line, `nothing_to_run`, which says which flag to change)."""
    from pipelines.execute import night_problems

    return night_problems(night.problems_for(runset), runset)


def nothing_to_run(night, args: argparse.Namespace, selection) -> str:
    """Why no test will run, naming the flag that emptied the selection (same with and without --list-only)."""
    why = why_nothing(night.catalog.tests, Selection(cadence=args.cadence, labels=selection.labels,
                                                     suites=selection.suites))
    return f"nightly: nothing to run: {why or 'every selected test is disabled or on hardware no pool runs'}"


def run(args: argparse.Namespace) -> int:
    from pipelines.cli.flags import error_status, unanswered
    from pipelines.storage.state import Unreachable

    try:
        return _run(args)
    except Unreachable as exc:  # no flag or input is wrong: a scheduler retries on this status, not on 2
        print(f"nightly run: error:\n{exc}{unanswered(exc, 'the night')}", file=sys.stderr)
        return error_status(exc)


def _run(args: argparse.Namespace) -> int:
    from pipelines.cli.plan_view import print_plan, recent_error, timeout_advice
    from pipelines.core.runset import RunSelection
    from pipelines.night import Night, NightSettings, default_home
    from pipelines.storage.state import writable_home

    home = writable_home((args.home or default_home()).resolve())  # before any work: exit 2 if it is not
    if args.repo and Path(args.repo).is_dir():
        args.repo = str(Path(args.repo).resolve())  # the Dagster run resolves it again, maybe elsewhere
    env = _parse_env(args.env)
    args.timeout_floor = timeout_floor(args.timeout_floor)  # None: the repo's floor
    selection = RunSelection(cadence=args.cadence, labels=split_csv(args.labels), suites=split_csv(args.suites))
    night = Night(NightSettings(home=home, repo=args.repo, deployment=args.deployment, cadence=args.cadence,
                                extra_env=tuple(sorted(env.items())), timeout_floor_s=args.timeout_floor))
    print(f"nightly: repo {night.repo_spec.name} ({night.repo_spec.path}), deployment {night.deployment.name}, "
          f"cadence {args.cadence}, state {_state_where(night, home)}", flush=True,
          file=sys.stderr if args.dry_run else sys.stdout)
    for note in night.catalog.assumptions:
        print(f"assumed: {note}", file=sys.stderr if args.dry_run else sys.stdout)
    for problem in night.estimate_warnings:
        print(f"warning: {problem}", file=sys.stderr)
    runset = night.runset(None, selection)
    from pipelines.launch.local import gpu_lock_problem  # the host's GPU lock folder, checked as the home is

    refused = "" if args.dry_run else gpu_lock_problem(night.deployment.launcher, runset.run)
    if refused:
        print(f"nightly run: error:\n{refused}", file=sys.stderr)
        return 2
    plan = night.plan(runset.run)
    if args.dry_run:
        return _dry_run(night, runset, plan)
    print_plan(plan, {t.id: t for t in runset.run}, runset.disabled, recent=recent_error(night),
               advice=timeout_advice(night, plan, {t.id: t for t in night.registered.tests}))
    for t, why in runset.skipped:
        if t.enabled:
            print(f"  {'-':>5}  {t.id:<48} {why}")
    problems = problems_of(night, runset)
    for p in problems:
        print(f"problem: {p}", file=sys.stderr)
    night.history.read()  # an unreadable history store fails here, before any test runs
    night.quarantine_doc()  # and an unusable quarantine document (its quarantines would not hold)
    if lost_interrupt() is not None:  # a signal while it planned, whose KeyboardInterrupt a finalizer swallowed
        raise KeyboardInterrupt
    if not runset.run:
        print(nothing_to_run(night, args, selection), file=sys.stderr)
        return EXIT_PROBLEMS if not args.accept_problems else 0
    if args.list_only:
        return EXIT_PROBLEMS if problems and not args.accept_problems else 0
    refused = _credentials(night)
    if refused:
        print(f"nightly run: error:\n{refused}", file=sys.stderr)
        return 2
    return _execute(night, args, selection, env, home)


def _credentials(night) -> str | None:
    """A Kubernetes night checks its API credentials before Dagster starts: a missing or broken
    kubeconfig is one message here, not a failed first step with a stack in the middle of the night."""
    if night.deployment.launcher != "kubernetes":
        return None
    from pipelines.launch.kubernetes.connect import KubeconfigError, core_v1_api

    try:
        core_v1_api()
    except KubeconfigError as exc:
        return str(exc)
    return None


def _dry_run(night, runset, plan) -> int:
    """The night's pods as YAML on stdout (the plan is not printed: the output is for kubectl)."""
    if night.deployment.launcher != "kubernetes":
        print(f"nightly run: --dry-run shows the pods of a Kubernetes deployment; {night.deployment.name} runs "
              "local processes (use --list-only, or --deployment production)", file=sys.stderr)
        return 2
    from pipelines.launch.infra import probe
    from pipelines.launch.kubernetes.dryrun import render_night_pods

    night.pin_images(probe(night.deployment))
    print(render_night_pods(plan, night.deployment, night.request, requirements=night.requirements_for(runset.run),
                            conversion=night.specs.conversion, run_id=night.run_id, repo=night.repo_spec.path,
                            **night.pod_settings()), end="")
    return 0


def ui_command(home: Path) -> str:
    """The command that opens this state folder's Dagster UI, as the closing lines name it: ``nightly ui``
    exists in every install (checkout, ``nix run``, ``result/bin``, the images), ``make ui`` only in a
    checkout; ``--home`` only when the night's folder is not the one ``nightly ui`` opens by default."""
    from pipelines.night import default_home

    if home.resolve() == default_home():
        return "`nightly ui`"
    return f"`nightly ui --home {shlex.quote(str(home))}`"


def _state_where(night, home: Path) -> str:
    """Where the night's state lives: the home folder, or S3 (the folder then only holds scratch)."""
    if night.deployment.storage != "s3":
        return str(home)
    return f"{night.state.uri('runs').removesuffix('/runs')} (history and records; {home} holds scratch)"


def _execute(night, args, selection, env: dict[str, str], home: Path) -> int:
    from pipelines.cli.run_console import interruptions_unlogged, night_console, sigint_for_this_process_only
    from pipelines.core.report import table
    from pipelines.definitions import build_definitions
    from pipelines.defs.jobs import selection_config
    from pipelines.defs.keys import TAG_CALIBRATION, TAG_REASON
    from pipelines.defs.resources import NightlyResource
    from pipelines.defs.tags import range_tags, request_tags
    from pipelines.instance import open_instance
    from pipelines.interrupts import signals_seen
    from pipelines.night import unsaved_folder

    os.environ.update(env)  # the run reads the values by name (env_from): they never enter run storage
    ui = ui_command(home)
    resource = NightlyResource(home=str(home), repo=args.repo or "", deployment=args.deployment or "")
    defs = build_definitions(catalog=night.catalog, nightly=resource)
    instance = open_instance(home)
    keys = sorted(t.id for t in night.catalog.tests)
    job = defs.resolve_job_def(args.cadence if args.cadence in ("nightly", "weekly") else "tests")
    job = job.with_logger_defs({"console": night_console})  # an interruption is said once, below
    pools = [p.name for p in night.deployment.pools]
    tags = {**range_tags(keys), **request_tags(night.deployment.name, selection, pools),
            TAG_CALIBRATION: "inline", TAG_REASON: "nightly run (command line)"}
    run_config = {**selection_config(selection, env_from=sorted(env),
                                    timeout_floor_s=args.timeout_floor or 0),  # 0: the repo's floor
                  "loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    run_id = str(uuid.uuid4())  # known before Dagster creates the run, so an interrupt before it starts can end it
    result = None
    signalled: set[int] = set()
    t0, started = time.monotonic(), time.time()
    print("\nnightly: running (progress below; each line is one finished step or test)", flush=True)
    try:
        with sigint_for_this_process_only(), interruptions_unlogged(), signals_seen() as signalled:  # Ctrl-C: said once
            with contextlib.suppress(KeyboardInterrupt):  # outside Dagster's own handling: said below
                result = job.execute_in_process(run_config=run_config, instance=instance, tags=tags,
                                                raise_on_error=False, run_id=run_id)
    except Exception as exc:  # raise_on_error=False covers the steps, not Dagster's own storage (a full disk)
        if (failure := storage_failure(exc)) is not None:
            return _storage_failed(home, started, failure, exc)
        # a signal's KeyboardInterrupt a library turned into its own error (pydantic's SchemaError while Dagster
        # set the run up): an interruption, said as one below, not that library's traceback
        if not signalled or not from_interrupt(exc):
            raise
    lost = lost_interrupt()  # one a finalizer swallowed after the night's last safe point: a signal all the same
    run = instance.get_run_by_id(run_id)
    if result is None and run is None:  # interrupted before Dagster made the run: said as during the plan
        raise KeyboardInterrupt
    # None: Dagster let the interrupt out before its handler was in place (the run NOT_STARTED) or after it ended
    interrupted = bool(signalled) or result is None or lost is not None
    status = run.status.value if run else "?"
    kept = unsaved_folder(home, run_id)  # the store refused the results (credentials expired mid-night)
    if kept is not None and status != "CANCELED" and not interrupted:  # no calibration, no report
        readme = (kept / "README.txt").read_text(encoding="utf-8").rstrip("\n")
        print(f"nightly run: error: {readme}", file=sys.stderr)
        return EXIT_NOT_STORED
    summary = None
    if kept is None:
        with contextlib.suppress(ValueError):
            summary = night.summary(run_id)
    # a record ended early by an error of the run itself (status "failed"), with no signal seen, is no interruption
    stopped_early = (summary or {}).get("interrupted") and (summary or {}).get("status") != "failed"
    if status == "CANCELED" or stopped_early or interrupted:
        # like a run cancelled in the UI (its sensor calibrates it): what finished is calibrated and reported;
        # a signal Dagster kept to itself (the run FAILURE "interrupted unexpectedly", or even SUCCESS) is one too
        _mark_canceled(instance, run_id)  # NOT_STARTED, if the signal came first, would be its status for ever
        if summary is None and kept is None and night.state.get(f"runs/{run_id}.json") is None:
            print(f"nightly: interrupted before the night's first test started: nothing of it was recorded (Dagster "
                  f"run {run_id} CANCELED); to resume, run the same `nightly run` again", file=sys.stderr)
            return EXIT_INTERRUPTED
        report = None
        if summary is not None:
            try:
                report = _calibrate(defs, instance, run_id, ui)[1]
            except KeyboardInterrupt:  # a second Ctrl-C: stop calibrating, say the same two lines
                report = None
        if kept is not None:  # its README was said above, by the run
            where = f"the store refused the night's results, which are kept as said above: {kept}"
            resume = "re-add them as that folder's README.txt says, then run the same `nightly run` again"
        else:
            where = f"finished tests are kept in history and the night's record {night.state.uri(f'runs/{run_id}.json')}"
            resume = ("run the same `nightly run` again (it runs the whole selection; interrupted attempts never "
                      "feed calibration)")
        killed = what_the_signal_did(summary if kept is None else _kept_record(kept, run_id))
        print(f"nightly: interrupted: {killed}; {where} (Dagster run "
              f"{run_id} CANCELED)" + (f"; its report: {report}" if report else "") + f"\nnightly: to resume, "
              f"{resume}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if summary is None or not result.success:
        print(f"nightly: the night's run {result.run_id} ended {status}; see {ui} -> Runs", file=sys.stderr)
    if summary is None:
        return EXIT_TEST_FAILED
    try:
        calib, report = _calibrate(defs, instance, run_id, ui)
    except KeyboardInterrupt:  # the night is done and recorded: say so, not Dagster's stack traces
        print(f"nightly: interrupted while calibrating: the night finished and is recorded in "
              f"{night.state.uri(f'runs/{result.run_id}.json')} (Dagster run {result.run_id}); its calibration "
              f"was cut short\nnightly: the sensor calibrate_missed_runs calibrates it and writes its report once the "
              f"daemon runs on this instance (`nightly ui`); `nightly calibrate` shows the proposals now",
              file=sys.stderr)
        return EXIT_INTERRUPTED

    estimates = night.estimates()
    rows = night.report_rows(summary, estimates)  # est_time as the night ran it; proposals from the history it wrote
    print()
    print(table(rows))
    print()
    print(makespan_line(summary, time.monotonic() - t0))
    for note in summary["notes"]:
        print(f"note: {note}")
    for line in held_lines(estimates, night):
        print(line)
    for near in night.checks(estimates, summary.get("run_id"))[1]:  # tonight's attempts, as the report judges them
        print(f"near timeout: {near}")
    _print_calibration(calib, report, ui)
    print(f"dagster runs: {result.run_id} (night), {calib.run_id} (calibration); {ui} to browse")
    for line in verdict_lines(summary, night.state):
        print(line)
    verdict = summary.get("verdict") or {}
    for tid in verdict.get("excused_quarantined", ()):
        print(f"note: {tid} failed but is quarantined as flaky (`nightly quarantine list`); it does not fail the night")
    bad = [r for r in rows if r.outcome not in ("passed", "skipped", "unplanned")
           and r.test_id not in verdict.get("excused_quarantined", ())]
    if bad or not calib.success or summary.get("status") == "failed":  # a night an error stopped is never green
        return EXIT_TEST_FAILED
    problems = summary.get("problems") or ()  # as the record keeps them, which the report's verdict reads too
    if problems and not args.accept_problems:
        print(f"nightly: every launched test passed, but the night had {len(problems)} problem(s) (above); "
              "fix them or pass --accept-problems", file=sys.stderr)
        return EXIT_PROBLEMS
    return 0


def what_the_signal_did(record: dict | None) -> str:
    """What the signal did to the night, as its record says: the running tests it killed, none running,
    or the night already ended (its tests all finished: the signal came after the last, or was taken only
    then); never that tests were killed when none was."""
    if record is None:
        return "which tests were running is not known (the night's record could not be read)"
    attempts = record.get("attempts") or []
    killed = sorted({a.get("test_id") for a in attempts if a.get("outcome") == "interrupted"})
    tests = sorted({a.get("test_id") for a in attempts})
    if not record.get("interrupted") and record.get("status") == "finished":
        return (f"the signal arrived after the night had ended: its {len(tests)} test(s) had all finished and none "
                "was interrupted")
    if killed:
        named = ", ".join(killed[:3]) + (f" and {len(killed) - 3} more" if len(killed) > 3 else "")
        return f"running tests were killed and recorded as `interrupted` ({len(killed)}: {named})"
    if attempts:
        return (f"no test was running when the night stopped ({len(tests)} had finished); no test started after "
                "the signal")
    return "no test had started (the night was preparing its inputs)"


def _kept_record(kept: Path, run_id: str) -> dict | None:
    """The night's record as kept under ``<home>/unsaved/`` when the store refused it; None if unreadable."""
    import json

    from pipelines.storage.state import LocalStateStore, StateError

    try:
        text = LocalStateStore(kept / "state").get(f"runs/{run_id}.json")
        return json.loads(text) if text else None
    except (OSError, ValueError, StateError):
        return None


def storage_failure(exc: BaseException) -> BaseException | None:
    """The storage error behind ``exc`` (it or what caused it): a database error of Dagster's instance
    (SQLite's "disk I/O error", "database or disk is full", a PostgreSQL gone), or a disk that is full,
    read-only or failing; None for anything else, which is a bug to show with its stack."""
    import errno
    import sqlite3

    from sqlalchemy.exc import SQLAlchemyError

    return next((e for e in _chain(exc) if isinstance(e, sqlite3.Error | SQLAlchemyError) or (
        isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO))), None)


def _chain(exc: BaseException | None):
    """``exc`` and what caused it, or what it was raised while handling, in turn (each once)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _storage_failed(home: Path, started: float, failure: BaseException, exc: BaseException) -> int:
    """``nightly run`` when Dagster's own storage failed mid-night: one message, exit 4, and where the
    night's results are (what the run kept, or the samples themselves), never Dagster's stack."""
    from pipelines.night import ResultsNotStored, unsaved_since

    what = " ".join(str(failure).split("\n")[0].split())  # sqlalchemy adds [SQL: ...] lines
    said = (f"nightly run: error: the Dagster instance's storage failed mid-night ({type(failure).__name__}: "
            f"{what}); check the disk of {home} (full?): the night stopped there and its Dagster run is not "
            "marked ended.")
    kept = unsaved_since(home, started)
    refused = next((e for e in _chain(exc) if isinstance(e, ResultsNotStored)), None)  # what the run could not keep
    if kept is not None:
        said += "\n" + (kept / "README.txt").read_text(encoding="utf-8").rstrip("\n")
    elif refused is not None:
        said += f"\n{refused}"
    else:
        said += f" Results of this night may not be stored; `nightly history show --home {home}` lists what was."
    print(said.rstrip("\n"), file=sys.stderr)
    return EXIT_NOT_STORED


def makespan_line(summary: dict, whole_s: float) -> str:
    """The predicted against the actual makespan: the simulated nights' median beside their p90, as
    `nightly plan`'s header pairs them (the schedule's makespan on the medians is another, shorter
    figure); the makespan alone for a night planned without durations (no simulated nights)."""
    from pipelines.core.plan.predict import predicted_text
    from pipelines.core.report import actual_lower_bound
    from pipelines.execute import replanned_text

    predicted = predicted_text(summary.get("predicted_median_s") or 0, summary.get("predicted_p90_s") or 0,
                               summary["predicted_makespan_s"]) + replanned_text(summary)

    # the plan's bound is from predicted durations: a night faster than predicted ends below it
    bound = actual_lower_bound(summary)
    return (f"{predicted}, actual {summary['actual_makespan_s']:.1f}s, plan's lower bound "
            f"{summary['lower_bound_s']:.1f}s (from predicted durations)"
            + (f", lower bound from actual durations {bound:.1f}s" if bound is not None else "")
            + f"; whole night {whole_s:.1f}s")


#: log lines shown under each test that did not pass (the report page shows more)
VERDICT_TAIL_LINES = 5


def verdict_lines(summary: dict, store=None) -> list[str]:
    """The night's verdict, as the report states it, then one line per test that did not simply pass
    (why, its node, where its log is) with the log's last lines: a CI job's log must say why the night
    is red, since the HTML report stays on the runner. ``store``: the state store the logs are read from,
    and the nights before this one: the verdict also names the earlier failures not run tonight, as the
    page and `nightly report` say it (built without them, the line said a bare "OK: every test passed")."""
    from pipelines.core.report import build_report, failure_why, tail_lines
    from pipelines.reporting.inputs import earlier_nights, log_tails

    data = build_report(summary, earlier_nights(store, summary) if store is not None else (),
                        log_tails=log_tails(summary, store) if store is not None else None)
    lines = [f"verdict: {data.verdict}"]
    for f in (*data.failures, *data.infra):
        lines.append(f"{f.outcome.upper()} {f.test_id}: {failure_why(f)}" + (f"; node {f.node}" if f.node else "")
                     + (f"; log {f.log_path}" if f.log_path else ""))
        lines += [f"  | {line}" for line in tail_lines(f.log_tail, VERDICT_TAIL_LINES).splitlines()]
    return lines


def held_lines(estimates, night) -> list[str]:
    """One line per proposal the step guard held, from the est_time the night planned with (the
    calibrated one in force, else the registered one), as `nightly calibrate` says it."""
    from pipelines.cli.plan_view import night_calibration_where

    where = night_calibration_where(night)
    return [f"held for acceptance: {e.test_id}: est_time {e.baseline} -> {e.held} (more than max_step_factor in "
            f"one step; add it to `accept:` in {where} to apply it)"
            for e in estimates if e.held is not None]


def _print_calibration(calib, report: str | None, ui: str) -> None:
    """Where the calibration put the report, evidence, patch and estimates, as its run recorded them
    (the patch line says when there is nothing to apply); what it did not write is said, not printed as a path."""
    from pipelines.defs.keys import CALIBRATED

    mats = calib.asset_materializations_for_node(CALIBRATED.path[-1]) if calib.success else []
    if not mats:
        print(f"calibration: failed (Dagster run {calib.run_id}): no report, evidence, patch or estimates were "
              f"written; its step's error is in {ui} -> Runs; `nightly calibrate` recomputes the proposals")
        return
    meta = {k: v.value for k, v in mats[0].metadata.items()}
    print(f"report: {report or f'not written (see the calibration run in {ui} -> Runs)'}")
    print(f"evidence: {meta['evidence']}\npatch: {meta['patch']}\nestimates: {meta['estimates']}")


def _mark_canceled(instance, run_id: str) -> None:
    """End a run a signal interrupted CANCELED, as a run cancelled in the UI, whatever Dagster made of it:
    FAILURE ("interrupted unexpectedly"), SUCCESS (the signal never reached a checkpoint) or NOT_STARTED
    (interrupted while Dagster set it up, where it would otherwise stay for ever)."""
    import dagster as dg

    run = instance.get_run_by_id(run_id)
    if run is not None and run.status != dg.DagsterRunStatus.CANCELED:
        instance.report_run_canceled(run, "interrupted (SIGINT/SIGTERM) while `nightly run` ran it")


def _calibrate(defs, instance, run_id: str, ui: str):
    """The calibration job for the night's run (est_time proposals and its report), in this process:
    (the job's result, the report's location or None). A SIGINT/SIGTERM meanwhile ends the calibration
    run CANCELED and is raised on as KeyboardInterrupt, said by the caller (no stack traces: the night's
    console and the interruption filters, as while the night ran)."""
    from pipelines.cli.run_console import interruptions_unlogged, night_console, sigint_for_this_process_only
    from pipelines.defs.keys import TAG_SOURCE_RUN
    from pipelines.defs.runs import process_tags
    from pipelines.interrupts import signals_seen

    calib_id = str(uuid.uuid4())  # known before Dagster creates the run, so an early interrupt can still end it
    try:
        with sigint_for_this_process_only(), interruptions_unlogged(), signals_seen() as signalled:
            job = defs.resolve_job_def("calibration").with_logger_defs({"console": night_console})  # no interrupt stacks
            calib = job.execute_in_process(
                instance=instance, raise_on_error=False, run_id=calib_id,
                tags={TAG_SOURCE_RUN: run_id, **process_tags(calib_id)},  # a killed process's run is failed by the next run
                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
            )
    except KeyboardInterrupt:
        _mark_canceled(instance, calib_id)
        raise
    if signalled:
        _mark_canceled(instance, calib_id)
        raise KeyboardInterrupt
    if not calib.success:
        print(f"nightly: calibration run {calib.run_id} failed; see {ui} -> Runs", file=sys.stderr)
        return calib, None
    mats = calib.asset_materializations_for_node("night_report")
    return calib, (mats[0].metadata["report"].value if mats else None)
