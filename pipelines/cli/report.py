"""``nightly report``: the morning-after report of a night as one self-contained HTML page.

  nightly report [--night ID] [--home DIR] [--repo R] [--deployment D] [--out FILE]
                 [--open] [--json] [--screenshot PNG] [--uncovered CELL ...]

Reads ``<home>/nights/<night>.json`` (the newest unless --night, which also takes a run id:
``runs/<id>.json``; with --repo, the newest of that repo), the repo's nights before it (each test
is compared with the last of them that ran it), the deployment's history store and the repo's catalog;
writes ``<home>/reports/<night>.html`` and prints its path (with an S3 deployment, the same keys in
its bucket). Exit 2 for a night that cannot be read or a flag that cannot be used. ``--json`` prints every section as JSON instead (for scripts; not with
--out, --open or --screenshot, which act on the page); ``--open`` opens
the page in a browser; ``--screenshot`` also saves a PNG of it made by headless Chromium.
"""

from __future__ import annotations

import argparse
import os
import sys
import webbrowser
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.cli import flags
from pipelines.cli.flags import FlagError, error_status, unanswered
from pipelines.core.model import CatalogError
from pipelines.storage.state import StateError

if TYPE_CHECKING:
    from pipelines.core.specs import RepoSpec, Specs


def default_home() -> Path:
    from pipelines.core.specs import DEFAULT_ASSETS_DIR

    return Path(os.environ.get("NIGHTLY_HOME") or DEFAULT_ASSETS_DIR.parent / ".nightly").resolve()


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--home", type=flags.path, help="state folder (default: $NIGHTLY_HOME or .nightly/)")
    p.add_argument("--repo", type=flags.path_text, help="a repo name in assets/repos.yaml (default: its `default`) or any checkout path")
    p.add_argument("--deployment", help="deployment in assets/cluster.yaml: where history and the state (night "
                                        "summaries, reports, quarantine file) live (default: "
                                        "$NIGHTLY_DEPLOYMENT, else local)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="the night report as a self-contained HTML page (or JSON)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(p)
    p.add_argument("--night", metavar="ID", help="the night to report: its name in <home>/nights/ or a run id "
                                                 "(runs/<id>.json) (default: the newest night)")
    p.add_argument("--out", type=flags.path, metavar="FILE", help="write the page here (default: <home>/reports/<night>.html)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    p.add_argument("--json", action="store_true", help="print every section as JSON and write no page (so not with --out, --open or --screenshot)")
    p.add_argument("--screenshot", type=flags.path, metavar="PNG", help="also save a screenshot of the page (headless Chromium)")
    p.add_argument("--uncovered", action="append", default=[], metavar="CELL",
                   help="also list this matrix cell as uncovered (repeatable); the cells the repo's declared "
                        "coverage groups leave uncovered are listed anyway")
    p.set_defaults(func=run)


def repo_context(home: Path, repo: str | None, deployment: str | None):
    """(repo name, ReportInputs, state store) from assets/, the catalog and the deployment's stores.

    A catalog that cannot be read is a warning (the report still shows what the summary holds).
    """
    from pipelines.cli import history as history_cli
    from pipelines.core.calibrate import calibrate
    from pipelines.core.flaky import FlakyRules
    from pipelines.core.specs import legacy_checkout, load_specs, repo_name
    from pipelines.reporting.inputs import ReportInputs, stored_estimates
    from pipelines.reporting.state import load_doc
    from pipelines.storage.history import history_store, lineage
    from pipelines.storage.state import state_store

    specs = load_specs()
    name, checkout, configured = recorded_name(specs, repo)
    tests, spec, path = [], None, None
    try:
        path, spec, _ = history_cli.resolve_repo(repo)
        checkout, configured = path, spec
        name = repo_name(path, spec)  # an unconfigured checkout's state is under its own name, never a namesake's
        tests = list(history_cli.load_catalog_for(path, spec, specs).tests)
    except CatalogError as exc:
        print(f"nightly: warning: no catalog, the report shows only what the night recorded:\n{exc}", file=sys.stderr)
    where = specs.deployment(deployment)
    history = history_store(where, home)
    samples = history.read()
    store = state_store(where, home)
    estimates = stored_estimates(store, name, warn=lambda text: print(f"nightly report: warning: {text}", file=sys.stderr))
    # the night's calibration; recomputed when there is none
    if estimates is None:
        from pipelines.core.calibrate.policies import repo_policy  # as `nightly calibrate` and the night
        from pipelines.storage.history import successions  # calibrate's own rewrites keep history current

        policy, params, _ = repo_policy(spec, path)
        estimates = []
        if tests:
            from pipelines.night import Night, NightSettings

            # the step guard judges from the est_time in force, as the night's calibration does
            in_force = Night(NightSettings(home=home, repo=name if spec else str(path), deployment=deployment)).in_force(tests)
            estimates = calibrate(tests, samples, policy, params, successions=successions(history), in_force=in_force)
    rules = FlakyRules.for_repo(spec)
    legacy = legacy_checkout(checkout, configured, specs.repos) if checkout else None  # a gone one's too
    return name, ReportInputs(
        samples=samples, tests=tests, estimates=estimates, rules=rules,
        quarantine=load_doc(store, name, legacy), repo_path=path if tests else None,  # coverage: against the night's selection
        timeout_floor_s=spec.timeout_floor_s if spec else 1800, timeout_factor=spec.timeout_factor if spec else 1.25,
        repo=name, legacy_checkout=legacy, rewrites=lineage(history),  # quarantines outlast est_time rewrites
    ), store


def recorded_name(specs: Specs, repo: str | None) -> tuple[str, Path | None, RepoSpec | None]:
    """(name, checkout, its spec) the nights and state of ``--repo`` go by when its checkout is gone (no
    catalog): a configured repo's name as that repo; anything else is a path, relative ones against the
    working folder as when the checkout was there (``fw`` as ``./fw``): a configured repo's path as that
    repo, any other as an unconfigured checkout there went by (never its folder name alone: that is
    another repo's)."""
    from pipelines.core.specs import repo_name

    if not repo:
        return "default", None, None
    if repo in specs.repos:
        return repo, specs.repos[repo].path, specs.repos[repo]
    path = Path(repo).resolve()
    spec = next((s for s in specs.repos.values() if s.path.resolve() == path), None)
    return repo_name(path, spec), path, spec


def night_repo(home: Path, night: str | None, deployment: str | None) -> str | None:
    """Without --repo, the repo of the night to report (the newest night of any repo by default):
    its name when assets/repos.yaml has it, else the checkout path the night recorded, there or gone
    (its name is the path's: recorded_name); None when the night names neither (an older record: the
    default repo)."""
    from pipelines.core.specs import load_specs
    from pipelines.reporting.inputs import locate_night
    from pipelines.storage.state import state_store

    specs = load_specs()
    _, _, summary = locate_night(state_store(specs.deployment(deployment), home), night)
    name, path = summary.get("repo"), summary.get("repo_path")
    if name and name in specs.repos:
        return str(name)
    return str(path) if path else (str(name) if name else None)


def run(args: argparse.Namespace) -> int:
    try:
        return _report(args)
    except StateError as exc:  # the state store (local folder or S3) cannot be read or written
        print(f"nightly report: error: {exc}{unanswered(exc)}", file=sys.stderr)
        return error_status(exc)


def check_paths(args: argparse.Namespace) -> None:
    """``--out`` and ``--screenshot`` name files: a folder, or a place no file can be written (under a
    file, in a folder this user cannot write), is refused before anything is read or drawn (and before
    a browser starts). ``--json`` writes no page, so a flag that acts on the page is refused with it:
    a script would otherwise find no file where it asked for one."""
    page_flags = [flag for flag, given in (("--out", args.out), ("--screenshot", args.screenshot),
                                           ("--open", args.open)) if given]
    if args.json and page_flags:
        raise FlagError(f"--json: prints the report as JSON and writes no page, so {' and '.join(page_flags)} "
                        f"would do nothing; leave out {' and '.join(page_flags)}, or --json for the page")
    for flag, path, what, example in (("--out", args.out, "the page's", "night.html"),
                                      ("--screenshot", args.screenshot, "the PNG's", "night.png")):
        if path is None:
            continue
        if path.is_dir():
            raise FlagError(f"{flag}: {path} is a folder; give {what} file name, e.g. {flag} {path / example}")
        folder = path.absolute().parent
        while not folder.exists() and folder != folder.parent:  # the folders to make must be makeable
            folder = folder.parent
        why = (f"{folder} is not a folder" if not folder.is_dir()
               else f"{folder} is not writable" if not os.access(folder, os.W_OK | os.X_OK) else "")
        if why:
            raise FlagError(f"{flag}: cannot write {path} ({why}); give a writable path")


def _report(args: argparse.Namespace) -> int:
    import dataclasses

    from pipelines.core.report import to_json
    from pipelines.reporting.inputs import night_report, write_html

    check_paths(args)
    home = (args.home or default_home()).resolve()
    _, inputs, store = repo_context(home, args.repo or night_repo(home, args.night, args.deployment), args.deployment)
    data = night_report(store, args.night, dataclasses.replace(inputs, uncovered=(*inputs.uncovered, *args.uncovered)),
                        warn=lambda text: print(f"nightly report: warning: {text}", file=sys.stderr))
    if args.json:
        print(to_json(data))
        return 0
    try:
        where = write_html(store, data, args.out)
    except OSError as exc:  # --out is a local file; the store raises StateError
        if args.out is None:
            raise
        raise FlagError(f"--out: cannot write {args.out} ({exc.strerror or exc}); give a writable path") from exc
    print(f"report: {data.verdict}")
    print(f"report: {where}")
    path = Path(where)
    if (args.screenshot or args.open) and not path.is_file():  # the store is remote: draw a local copy
        path = Path(write_html(store, data, home / "reports" / f"{data.night or 'night'}.html"))
    if args.screenshot:
        from pipelines.reporting.browser import BrowserError, screenshot

        try:
            print(f"screenshot: {screenshot(path, args.screenshot)}")
        except BrowserError as exc:
            print(f"nightly report: error: {exc}", file=sys.stderr)
            return 2
    if args.open:
        webbrowser.open(path.as_uri())
    return 0
