"""``nightly catalog``: list a framework's registered e2e tests, like its own runner's listing.

Reads the repository without importing test code. Problems go to stderr as
``path:line: field: message``; ``--strict`` makes any problem exit 1. ``--json`` prints a list of
objects with the fields id, path, backend, suite, gpus, est_time, labels, nightly, disabled,
requirements. Without ``--repo`` the default repo of assets/repos.yaml is read.

Any checkout works unconfigured: the registry dialect comes from the framework's own registry
module (the file defining ``register_*_ci``), and the dialect, roots and every other assumption
are printed to stderr as ``assumed: ...``; ``--roots`` overrides the roots. An empty result
exits 1 and says what to try next. Results per file are cached by content under
``$NIGHTLY_HOME/cache/`` (``--no-cache`` reads every file again).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipelines.cli import flags
from pipelines.core.model import Catalog, CatalogError, Test
from pipelines.core.select import CADENCES, Selection, SelectionError, select, split_csv

JSON_FIELDS = ("id", "path", "backend", "suite", "gpus", "est_time", "labels", "nightly", "disabled", "requirements")
_HEADER = ("id", "backend", "suite", "gpus", "est_time", "labels", "nightly", "disabled", "requirements")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("catalog", help="list the registered tests of a framework repository",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repo", type=flags.path, help="framework checkout (default: the default repo of assets/repos.yaml)")
    p.add_argument("--suite", action="append", dest="suites", metavar="S", help="only this suite (repeatable)")
    p.add_argument("--roots", action="append", metavar="DIR,DIR",
                   help="folders holding the test files (default: assets/repos.yaml, else the dialect's runner's)")
    p.add_argument("--backend", metavar="B", help="only this backend (cuda, rocm, cpu, or the framework's own: amd, npu, ...)")
    p.add_argument("--labels", action="append", metavar="a,b", help="only tests with one of these labels")
    p.add_argument("--cadence", choices=CADENCES, help="only tests this cadence runs")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--strict", action="store_true", help="exit 1 when the catalog has any problem")
    p.add_argument("--no-cache", action="store_true", help="read every file again instead of reusing cached results")
    p.set_defaults(func=run)


def _load(repo: Path | None, roots: tuple[str, ...] | None = None, cache: bool = True) -> Catalog:
    """The catalog of ``repo``, with its assets/ spec when it is a configured repo."""
    from pipelines.core.catalog import load_catalog
    from pipelines.core.model import CatalogError
    from pipelines.core.specs import load_specs

    cache_dir = default_cache_dir() if cache else None
    try:
        specs = load_specs()
    except CatalogError as exc:
        if repo is None:
            raise
        print(f"nightly catalog: assets/ specs not loaded, reading {repo.resolve()} unconfigured:\n{exc}", file=sys.stderr)
        return load_catalog(repo.resolve(), roots=roots, cache_dir=cache_dir)
    path, spec = specs.locate_repo(repo)
    return _with_history(load_catalog(path, spec, specs if spec else None, roots=roots, cache_dir=cache_dir), path)


def default_cache_dir() -> Path:
    """``$NIGHTLY_HOME/cache`` (``<project>/.nightly/cache`` when unset), as a night uses."""
    import os

    from pipelines.core.specs import DEFAULT_ASSETS_DIR

    return Path(os.environ.get("NIGHTLY_HOME") or DEFAULT_ASSETS_DIR.parent / ".nightly") / "cache"


def next_step(catalog: Catalog, selected: int, filtered: bool) -> str:
    """What to try when nothing is listed (never another framework's names)."""
    if catalog.tests and filtered:
        return (f"nothing matches the selection among {len(catalog.tests)} tests; drop or change --suite/--backend/"
                "--labels/--cadence (the table without them lists what exists)")
    if catalog.fmt == "template":  # the template names its files: --roots changes nothing there
        return (f"no test loaded; fix the {len(catalog.problems)} problem(s) above (each says how)" if catalog.problems
                else "no test loaded: the workflow template lists no entry; add {'test_file': ...} entries to its "
                     "test lists")
    if catalog.problems and any(p.field != "roots" for p in catalog.problems):
        return (f"no test loaded; fix the {len(catalog.problems)} problem(s) above (each says how), or pass --roots "
                "if the runner collects files elsewhere")
    return ("no test file found; pass --roots DIR with the folder(s) your CI runner collects tests from, or set "
            "`roots:` (and `dialect:`) for this repo in assets/repos.yaml")


def _with_roots_flag(line: str) -> str:
    """The catalog names only assets/repos.yaml for changing the roots (``run`` and ``plan`` have no --roots);
    this command also has its flag."""
    from pipelines.core.catalog.scan import ROOTS_SETTING

    return line.replace(ROOTS_SETTING, f"{ROOTS_SETTING} or pass --roots", 1)


def _with_history(catalog: Catalog, path: Path) -> Catalog:
    """Template tests register no est_time: list the one the next night plans with, as ``run`` does."""
    from pipelines.night import Night, NightSettings, with_calibrated

    calibrated = Night(NightSettings(repo=str(path))).calibrated()
    unregistered = {t.id for t in catalog.tests if t.uncalibrated}
    return with_calibrated(catalog, {tid: e for tid, e in calibrated.items() if tid in unregistered})


def to_json(tests: list[Test]) -> list[dict]:
    return [{"id": t.id, "path": t.path, "backend": t.backend, "suite": t.suite, "gpus": t.gpus, "est_time": t.est_time,
             "labels": list(t.labels), "nightly": t.nightly, "disabled": t.disabled,
             "requirements": list(t.requirements)} for t in tests]


def _short(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def table(tests: list[Test]) -> str:
    """Fixed-width rows a CI maintainer can scan; uncalibrated estimates are marked."""
    rows = [_HEADER] + [
        (t.id, t.backend, t.suite, str(t.gpus), f"{t.est_time}" + (" uncalibrated" if t.uncalibrated else ""),
         ",".join(t.labels) or "-", "yes" if t.nightly else "-", _short(t.disabled or "-"), " ".join(t.requirements) or "-")
        for t in tests
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def configuration_lines(repo: str | None, tests: list[Test]) -> list[str]:
    """Each listed test's matrix configurations (``nightly coverage`` reads them), one line per row."""
    from pipelines.core.coverage import configurations_by_test

    try:
        configs = configurations_by_test(repo, tests={t.path for t in tests})  # the catalog says what a test is
    except (CatalogError, OSError) as exc:  # the listing stands without them
        return [f"configurations not read: {exc}"]
    out = []
    for path in sorted({t.path for t in tests} & set(configs)):
        for c in configs[path]:
            out.append(f"{path}: config {c.name}: " + ", ".join(f"{k}={v}" for k, v in c.fields if k != "name"))
    return out


def run(args: argparse.Namespace) -> int:
    roots = split_csv(args.roots) or None
    catalog = _load(args.repo, roots, cache=not args.no_cache)
    selection = Selection(cadence=args.cadence, labels=split_csv(args.labels), suites=split_csv(args.suites),
                          backend=args.backend)
    try:
        tests = select(catalog.tests, selection)
    except SelectionError as exc:
        print(f"nightly catalog: error: {exc}", file=sys.stderr)
        return 2
    for note in catalog.assumptions:
        print(f"assumed: {_with_roots_flag(note)}", file=sys.stderr)
    for problem in catalog.problems:
        print(_with_roots_flag(str(problem)), file=sys.stderr)
    uncalibrated = [t.id for t in tests if t.uncalibrated]
    if args.json and uncalibrated:  # the table marks each row; the JSON fields are fixed
        print(f"uncalibrated: {len(uncalibrated)} test(s) have the default est_time until a night's history "
              f"gives one: {', '.join(uncalibrated)}", file=sys.stderr)
    if args.json:
        print(json.dumps(to_json(tests), indent=1))
    else:
        print(table(tests))
        unresolved = [(t.id, u) for t in tests for u in t.unresolved]
        for test_id, u in unresolved:
            print(f"{test_id}: {u}")
        for line in configuration_lines(args.repo, tests):
            print(line)
        n_gpu = sum(1 for t in tests if t.gpus)
        print(f"{len(tests)} tests ({n_gpu} on GPUs, {sum(not t.enabled for t in tests)} disabled) of "
              f"{len(catalog.tests)} in {catalog.repo}; {len(catalog.requirements)} requirements; "
              f"{len(catalog.problems)} problems")
    if not tests:
        filtered = bool(selection.suites or selection.labels or selection.backend or selection.cadence)
        print(f"nightly catalog: {next_step(catalog, len(tests), filtered)}", file=sys.stderr)
        return 1
    if args.strict and catalog.problems:
        print(f"nightly catalog: --strict: {len(catalog.problems)} problem(s)", file=sys.stderr)
        return 1
    return 0
