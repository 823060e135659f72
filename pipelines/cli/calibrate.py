"""``nightly calibrate``: propose est_time from the duration history, with evidence and a patch.

  nightly calibrate [--repo PATH] [--policy bucket125|p90|median] [--deployment D | --store FILE]
                    [--evidence FILE] [--patch FILE] [--write]

Prints one row per test (current, proposed, delta, samples, reason), the drift list (changes of
at least 30 s and 30 %) and tests whose last run used over 90 % of its timeout. Without
``--write`` nothing in the checkout changes (the dry run); ``--write`` rewrites the literal
est_time of files with exactly one registration for the test's hardware. Output paths are
checked before anything is written, and the checkout is rewritten last; a bad path or a failed
write exits 2 naming the path. ``--write`` also stores the proposals where the next night plans
from (the deployment's ``estimates/<repo>.json``, as the night's calibration does): a template
test has no est_time in any file, so that is where its calibrated one goes.

The step guard (``max_step_factor``) judges each proposal from the est_time in force, the one in
that estimates file when the last calibration set it for the same file, as the night does; the
table's ``current`` and the patch start from the registered value, the literal in the file. A dry
run with ``--store FILE`` reads no deployment's estimates (it says so) and judges from the
registered values, as does a dry run whose estimates cannot be read (a warning). ``--store`` with
``--write`` is refused: the estimates would go to ``$NIGHTLY_DEPLOYMENT``'s deployment from a file that
is not its history. ``--store FILE --patch PATCH`` records the rewrites in FILE and in the history of
``$NIGHTLY_DEPLOYMENT``'s deployment (else the default), whose nights read it: once PATCH is applied, the
patched files' samples there stay current. A ``--store`` file that does not exist is refused (exit 2),
not read as empty.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from pipelines.cli import flags
from pipelines.cli import history as history_cli
from pipelines.cli.flags import error_status, unanswered


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="propose est_time from measured durations; evidence CSV and patch",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    history_cli.add_common(p)
    p.add_argument("--policy", choices=("bucket125", "p90", "median"),
                   help="default: the repo's calibration.policy in assets/repos.yaml, else its framework family's "
                        "(SGLang: p90 of the newest 16 passes within 7 days; otherwise bucket125); another policy keeps the "
                        "repo's accept: list, guards and raise_on_timeout, and uses its own window and samples")
    p.add_argument("--evidence", type=flags.path_text, metavar="FILE", help="write the evidence CSV here")
    p.add_argument("--patch", type=flags.path_text, metavar="FILE", help="write the unified diff here (apply with `git apply FILE`)")
    p.add_argument("--write", action="store_true",
                   help="rewrite the est_time literals in the checkout, and store the proposals where the next "
                        "night plans from (the deployment's estimates/<repo>.json; a template test's only place); "
                        "not with --store")
    p.set_defaults(func=run)


def _table(estimates) -> str:
    from pipelines.core.calibrate.evidence import seconds

    rows = [("test", "hw", "current", "proposed", "delta", "samples", "reason")]
    for e in estimates:
        rows.append((e.test_id, e.hardware, seconds(e.registered), seconds(e.registered_proposed),
                     seconds(e.registered_delta, True) if e.samples_used else "", str(e.samples_used), e.reason))
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    right = {2, 3, 4, 5}
    return "\n".join(
        "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r[:6])) + "  " + r[6]
        for r in rows
    )


def _on(e) -> str:
    """`` [h200]`` after a test id; nothing for a test registered for no hardware in particular."""
    return f" [{e.hardware}]" if e.hardware else ""


def _fail(message: str, exc: BaseException | None = None) -> int:
    """Print the error; 2, or 5 when ``exc`` says the deployment's store did not answer (flags.error_status)."""
    print(f"nightly calibrate: error: {message}{unanswered(exc)}", file=sys.stderr)
    return error_status(exc)


def run(args: argparse.Namespace) -> int:
    from pipelines.core.calibrate import calibrate, drift, near_timeout, output_problem, plan_patch
    from pipelines.core.calibrate.evidence import held, seconds
    from pipelines.core.calibrate.policies import repo_policy
    from pipelines.core.history import HistoryError
    from pipelines.storage.history import successions
    from pipelines.storage.state import StateError

    # every output is checked before anything is read or written: a bad path costs nothing
    outputs = [(args.evidence, "--evidence"), (args.patch, "--patch")]
    problems = [m for f, flag in outputs if f and (m := output_problem(f, flag))]
    if args.evidence and args.patch and Path(args.evidence).resolve() == Path(args.patch).resolve():
        problems.append(f"{args.patch}: --patch: the same file as --evidence; give each its own path")
    if args.store is not None and args.write:
        # the estimates would go to $NIGHTLY_DEPLOYMENT's (or the default) deployment, from a file of no
        # deployment: a mistyped or unrelated file would replace production's estimates
        problems.append(f"{args.store}: --store with --write: --write stores the proposals as a deployment's "
                        "estimates (what its nights plan from) and records the rewrites in its history, and "
                        f"{args.store} is no deployment's history; calibrate the deployment from its own history "
                        "(--deployment D --write), or write a patch from this file's history (--patch PATCH, then "
                        "`git apply PATCH`)")
    if problems:
        return _fail("\n".join(problems))
    path, spec, specs = history_cli.resolve_repo(args.repo)
    catalog = history_cli.load_catalog_for(path, spec, specs)
    tests = list(catalog.tests)
    for assumed in catalog.assumptions:  # as `nightly catalog`, `plan` and `run` say them
        print(f"assumed: {assumed}", file=sys.stderr)
    for problem in catalog.problems:
        print(f"{problem}", file=sys.stderr)
    if not tests:  # a mistyped folder, or every file broken: an empty table would look like "nothing to do"
        from pipelines.cli.catalog import next_step

        return _fail(f"no test in {catalog.repo}: {next_step(catalog, 0, False)}")
    from pipelines.night import unread_tests

    unread = unread_tests(catalog, path)
    broken = {p.path for p in catalog.problems}
    if broken:
        print(f"nightly calibrate: warning: {len(broken)} file(s) not read (the problems above): their tests are "
              "not calibrated now, and their stored estimates are kept as they were; fix them and calibrate again",
              file=sys.stderr)
    policy, params, note = repo_policy(spec, path, args.policy)
    if note:
        print(f"{'policy' if args.policy else 'assumed'}: {note}")
    floor, factor = (spec.timeout_floor_s, spec.timeout_factor) if spec else (1800, 1.25)
    try:
        store = history_cli.open_store(args.store, args.deployment, args.home)
        samples = store.read()
        rewrites = successions(store)
    except HistoryError as exc:
        return _fail(str(exc), exc)
    night_repo = (spec.name if spec else str(path), tests)
    try:
        in_force = _in_force(args, *night_repo)
    except StateError as exc:  # --write would store over estimates it could not read
        return _fail(f"{exc}; nothing was written", exc)
    try:
        estimates = calibrate(tests, samples, policy, params, successions=rewrites, in_force=in_force)
    except ValueError as exc:
        return _fail(str(exc))
    print(f"calibrate: {catalog.repo}, policy {policy}, {len(samples)} samples in {getattr(store, 'path', store)}")
    print(_table(estimates))
    drifted = drift(estimates)
    print(f"\ndrift (>= 30 s and 30 %): {len(drifted) or 'none'}")
    for e in drifted:
        # the file's est_time as written (SGLang's 12.5), as the patch shows it
        print(f"  {e.test_id}{_on(e)}: {seconds(e.registered)} -> {seconds(e.registered_proposed)} "
              f"({seconds(e.registered_delta, True)} s)")
    waiting = held(estimates)
    from pipelines.cli.plan_view import calibration_where
    from pipelines.core.specs import unconfigured_name

    where = (calibration_where(spec.name, spec.path, True) if spec is not None
             else calibration_where(unconfigured_name(path), path, False))
    print(f"held for acceptance (more than max_step_factor in one step; add the test to `accept:` in {where} "
          f"to apply it): {len(waiting) or 'none'}")
    for e in waiting:
        base = e.registered if e.in_force is None else e.in_force
        print(f"  {e.test_id}{_on(e)}: {seconds(base)} -> {e.held} held ({seconds(e.held - base, True)} s)"
              + (" (from the calibrated est_time in force)" if e.in_force is not None else ""))
    near = near_timeout(tests, samples, floor, factor, estimates=estimates)
    print(f"near timeout (last run > 90 % of max({floor}, {factor:g} x est_time), est_time the proposed one or the "
          f"file's when that gives the shorter timeout): {len(near) or 'none'}")
    for n in near:
        print(f"  {n}")
    plan = plan_patch(path, tests, estimates)
    status = _write_outputs(args, path, plan, estimates, store, night_repo, unread)
    for p, why in plan.skipped:
        print(f"left alone: {p}: {why}")
    for p, why in plan.unpatchable if args.patch else ():
        print(f"left out of the patch: {p}: {why}")
    return status


def _write_outputs(args: argparse.Namespace, repo: Path, plan, estimates, store, night_repo: tuple,
                   unread: Callable[[str], bool] | None = None) -> int:
    """The rewrites' record, evidence, patch, the estimates the next night plans with, then the
    checkout. A recorded succession is harmless if the patch is never applied; a patch or rewrite
    without one would make the history stale. A failure stops there, and test files already
    rewritten are put back."""
    from pipelines.core.calibrate import (
        evidence_csv,
        output_problem,
        remove_stale_patch,
        write_atomic,
        write_problem,
    )
    from pipelines.core.history import HistoryError
    from pipelines.core.model import CatalogError
    from pipelines.storage.history import record_successions

    targets = [repo / p for p in plan.edits] if args.write else []
    problems = [m for t in targets if (m := output_problem(t, "--write"))]
    if problems:
        return _fail("\n".join(problems))
    if (args.write or args.patch) and plan.edits:
        # before any patch or test file exists: the rewritten files' samples must stay current (lineage.py)
        try:
            deployment = _deployment_history(args, store)
            also = [deployment[1]] if deployment is not None else []
            warnings = [w for where in (store, *also) if (w := record_successions(where, plan.successions()))]
        except (HistoryError, CatalogError) as exc:
            return _fail(f"{exc} No evidence, patch or test file was written.", exc)
        for warning in warnings:
            print(f"nightly calibrate: warning: {warning}", file=sys.stderr)
        if deployment is not None:
            print(f"rewrites recorded: in {args.store} and in the history of deployment {deployment[0]} "
                  f"({getattr(deployment[1], 'path', deployment[1])}), which its nights read, so the patched files' "
                  "samples stay current there")
    files = [(args.evidence, evidence_csv(estimates))]
    if args.patch and plan.patched:
        files.append((args.patch, plan.diff()))
    for dest, text in [(Path(f), text) for f, text in files if f]:
        try:
            write_atomic(dest, text)
        except OSError as exc:
            return _fail(write_problem(dest, exc))
    if args.evidence:
        print(f"evidence: {args.evidence}")
    if args.patch and plan.patched:
        print(f"patch: {args.patch} ({len(plan.patched)} files)")
    elif args.patch:
        # git apply refuses a patch with no diff in it ("No valid patches in input")
        print(f"patch: nothing to change; {args.patch} not written{remove_stale_patch(args.patch)}")
    refused = _store_estimates(args, *night_repo, estimates, unread=unread)
    if refused:
        return refused
    return _rewrite(args, repo, plan)


def _deployment_history(args: argparse.Namespace, store) -> tuple[str, object] | None:
    """With ``--store FILE``: (name, history store) of the deployment (``$NIGHTLY_DEPLOYMENT``, else the
    default; ``--home``) whose nights will run the patched checkout, unless FILE is its history. Its samples
    of the rewritten files are keyed by their digests as well, and only a succession recorded there keeps
    them current once the patch is applied (``git apply``); one in FILE alone helps nobody's nights."""
    from pipelines.core.history import FileHistoryStore
    from pipelines.core.specs import load_specs

    if args.store is None:
        return None
    there = history_cli.open_store(None, None, args.home)
    if isinstance(there, FileHistoryStore) and isinstance(store, FileHistoryStore) and \
            there.path.resolve() == store.path.resolve():
        return None
    return load_specs().deployment(None).name, there


def _night(args: argparse.Namespace, repo: str):
    from pipelines.night import Night, NightSettings

    return Night(NightSettings(repo=repo, deployment=args.deployment, **({"home": args.home} if args.home else {})))


def _in_force(args: argparse.Namespace, repo: str, tests) -> dict[tuple[str, str], int]:
    """The calibrated est_time each test plans with now (the deployment's estimates/<repo>.json, for
    the test's current file or one calibrate's rewrite led from): the step guard judges from it, as
    the night's calibration does. A corrupt file or entry is a warning, and those tests are judged
    from the registered value.

    ``--store FILE`` (never with ``--write``) is a dry run over a local history file: no deployment's
    estimates are read (they may be on S3, needing credentials this run has no use for). A dry run
    whose estimates store cannot be read warns and judges from the registered values; only
    ``--write``, which would store over them, stops (StateError)."""
    from pipelines.core.model import CatalogError
    from pipelines.night import in_force_est_times
    from pipelines.storage.state import StateError

    if args.store is not None:
        print("est_time in force: not read with --store (a dry run over that file); steps are judged from the "
              "registered est_time")
        return {}
    night = _night(args, repo)
    try:
        calibrated = night.calibrated()
    except CatalogError as exc:
        print(f"nightly calibrate: warning: {exc}; steps are judged from the registered est_time", file=sys.stderr)
        return {}
    except StateError as exc:
        if args.write:
            raise
        print(f"nightly calibrate: warning: {exc}; steps are judged from the registered est_time", file=sys.stderr)
        return {}
    for problem in night.estimate_warnings:
        print(f"nightly calibrate: warning: {problem}", file=sys.stderr)
    return in_force_est_times(tests, calibrated, night.rewrites_for(tests, calibrated))


def _store_estimates(args: argparse.Namespace, repo: str, tests, estimates,
                     unread: Callable[[str], bool] | None = None) -> int:
    """``--write``: the proposals where the next night plans from, as the night's calibration stores
    them (``Night.store_estimates``: the deployment's ``estimates/<repo>.json``, locally or on S3).
    A template test has no est_time literal, so this is the only place its proposal can go.
    Returns 0, or the command's status when the store refused them."""
    from pipelines.storage.state import StateError

    count = sum(1 for e in estimates if e.samples_used or e.in_force is not None)
    if not args.write:
        print(f"would store estimates: {count} tests with evidence (--write stores them where the next night "
              "plans from)")
        return 0
    try:
        where = _night(args, repo).store_estimates(tests, estimates, unread=unread)
    except StateError as exc:
        return _fail(f"{exc}; the checkout was not changed", exc)
    print(f"estimates: {where} ({count} tests with evidence; the next night plans with them)")
    return 0


def _rewrite(args: argparse.Namespace, repo: Path, plan) -> int:
    """The checkout last: all of the plan's files, or (a write failing) none of them."""
    from pipelines.core.calibrate import write_atomic, write_problem

    done: list[str] = []
    for rel, (_, new) in plan.edits.items():
        if args.write:
            try:
                write_atomic(repo / rel, new)
            except OSError as exc:
                return _fail(write_problem(repo / rel, exc) + _put_back(repo, plan, done))
            done.append(rel)
        print(f"{'rewrote' if args.write else 'would rewrite'}: {rel}")
    return 0


def _put_back(repo: Path, plan, done: list[str]) -> str:
    """Restore the test files this run already rewrote; what could not be restored is named."""
    from pipelines.core.calibrate import write_atomic

    failed = []
    for rel in done:
        try:
            write_atomic(repo / rel, plan.edits[rel][0])
        except OSError as exc:
            failed.append(f"{rel} ({exc.strerror or exc})")
    if failed:
        return f"; these test files keep the new est_time, check them with `git diff`: {', '.join(failed)}"
    return f"; the {len(done)} test file(s) rewritten before it were put back" if done else ""
