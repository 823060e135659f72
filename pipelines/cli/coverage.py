"""``nightly coverage``: do sibling tests' configuration matrices still cover every required cell?

  nightly coverage --repo PATH [--groups FILE] [--cadence C] [--json]
      prove each group's cells covered (exit 1 if not, 2 for an unreadable, invalid or missing groups
      file, or a --groups file that declares no group for the repo); with --cadence, only tests that
      cadence runs count
  nightly coverage --repo PATH [--groups FILE] [--cadence C] --against REV [--json]
      the cells covered at REV and lost since (exit 1 if any)
  nightly coverage design --dim NAME=V1,V2 ... [--strength 2 | --require A,B] [--tests N [--budget K]]
                          [--est-time S] [--gpus G] [--seed N] [--json]
      the fewest configurations that cover every cell (exit 1 if N x K is too small, 2 for a flag
      out of range)

Groups of sibling tests and their dimensions live in assets/coverage.yaml (or in the tests'
``# coverage-group: NAME`` comments); docs/coverage.md explains both.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from pipelines.cli import flags
from pipelines.cli.flags import FlagError
from pipelines.core.coverage import (
    Catalogued,
    CoverageReport,
    Design,
    GroupCoverage,
    LostCell,
    RegistryReading,
    TreeSource,
    as_of,
    assign,
    catalogued,
    check_repo,
    declared_then,
    design,
    locate,
    lost_cells,
    renamed,
)
from pipelines.core.select import CADENCES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("coverage", help="check that sibling tests' matrices cover every required cell; design matrices",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repo", type=flags.path_text, help="framework checkout (a path) or a repo name in assets/repos.yaml (default: its `default`)")
    p.add_argument("--groups", type=flags.path, metavar="FILE", help="groups file (default: assets/coverage.yaml)")
    p.add_argument("--against", metavar="REV", help="report the cells covered at git revision REV and no longer covered")
    p.add_argument("--cadence", choices=CADENCES, help="count only the tests this cadence runs, as its night would "
                                                        "(default: every registered, enabled test)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)
    inner = p.add_subparsers(dest="coverage_command", metavar="design")
    d = inner.add_parser("design", help="the fewest configurations covering every required cell",
                         description="Search for the fewest configurations (a covering array) that cover every "
                                     "required combination of dimension values, optionally dealt to N sibling tests.")
    d.add_argument("--dim", action="append", required=True, metavar="NAME=V1,V2,...", help="a dimension and its values (repeat)")
    d.add_argument("--strength", type=int, help="cover every combination of this many dimensions, at most the number "
                                                "of --dim (default 2: pairs; not with --require)")
    d.add_argument("--require", action="append", default=[], metavar="A,B",
                   help="cover these dimension tuples instead of --strength (repeat)")
    d.add_argument("--tests", type=int, metavar="N", help="deal the configurations to N sibling tests")
    d.add_argument("--budget", type=int, metavar="K", help="at most K configurations per test (needs --tests)")
    d.add_argument("--est-time", type=float, metavar="S", help="seconds one configuration runs (> 0): prints GPU-seconds per night")
    d.add_argument("--gpus", type=int, default=1, help="GPUs one configuration uses (default 1)")
    d.add_argument("--seed", type=int, default=0, help="search seed (the result is deterministic for a seed)")
    # SUPPRESS: an unset --json here must not overwrite `coverage --json design ...`
    d.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the design as JSON")
    d.set_defaults(func=run_design)


# ---- check and --against ------------------------------------------------------------------


class GitSource:
    """Files at one git revision of the checkout, read with ``git show`` (argv lists, no shell)."""

    def __init__(self, repo: Path, rev: str):
        if not rev or rev.startswith("-"):
            raise FlagError(f"--against: {rev!r} is not a revision; give a commit, tag or branch")
        self.repo, self.rev = repo, rev
        done = self._git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        if done.returncode != 0:
            raise FlagError(f"--against: {rev!r} is not a commit of {repo}; give a commit, tag or branch of it "
                            f"(`git -C {repo} log` lists them)")

    def _git(self, *args: str) -> subprocess.CompletedProcess:
        """Text output, but a file's bytes for ``git show``: its readers decode them as Python does."""
        try:
            return subprocess.run(["git", "-C", str(self.repo), *args], capture_output=True, text=args[0] != "show",
                                  check=False)
        except FileNotFoundError as exc:
            raise FlagError("--against: needs git on PATH; install git or leave out --against") from exc

    def read(self, path: str) -> bytes | None:
        done = self._git("show", f"{self.rev}:./{path}")
        return done.stdout if done.returncode == 0 else None

    def files_mentioning(self, text: str, roots: Sequence[str]) -> list[str]:
        done = self._git("grep", "-l", "-F", "-e", text, self.rev, "--", *roots)
        prefix = f"{self.rev}:"
        return sorted(line[len(prefix):] for line in done.stdout.splitlines() if line.startswith(prefix) and line.endswith(".py"))

    def changed(self) -> tuple[set[str], dict[str, str]]:
        """Repo-relative files that differ between the revision and the working tree (committed,
        staged or not, deleted, and untracked ones; both names of a renamed file), and the files
        renamed since, name then -> name now, as git's rename detection sees them (committed or
        staged: ``git mv``); two git calls, not one per file. Without the renames a sibling renamed
        since was never read at the revision, so the cells it took with it went unreported."""
        diff = self._git("diff", "--name-status", "--relative", "--find-renames", "-z", self.rev, "--")
        new = self._git("ls-files", "--others", "--exclude-standard", "-z")
        for done in (diff, new):
            if done.returncode != 0:
                raise FlagError(f"--against: git could not compare {self.rev} with the working tree of {self.repo} "
                                f"({done.stderr.strip()}); check the checkout with `git -C {self.repo} status`")
        changed = {p for p in new.stdout.split("\0") if p}
        moved: dict[str, str] = {}
        fields = iter(diff.stdout.split("\0"))
        for status in fields:  # STATUS\0PATH\0, or for a rename or copy STATUS\0OLD\0NEW\0
            if not status:
                continue
            paths = [next(fields, "")] + ([next(fields, "")] if status[0] in "RC" else [])
            changed.update(p for p in paths if p)
            if status[0] == "R" and all(paths):
                moved[paths[0]] = paths[1]
        return changed, moved


def check_groups_flag(path: Path | None) -> None:
    """``--groups`` must be a file: a mistyped path would otherwise check no groups and pass."""
    if path is not None and not path.is_file():
        what = "not a file" if path.exists() else "no such file"
        raise FlagError(f"--groups: {path}: {what}; give the groups file (default: assets/coverage.yaml; "
                        "docs/coverage.md describes it)")


def registered_tests(repo: str | None, cadence: str | None = None) -> tuple[Catalogued, bool]:
    """The catalog's tests (as ``nightly catalog`` reads them, its cache too): only a registered,
    enabled test's configurations cover a cell (and, given ``cadence``, one that cadence runs); and
    whether it read them from a workflow template. Its own problems are ``nightly catalog``'s to list."""
    from pipelines.cli.plan import load_catalog
    from pipelines.core.specs import load_specs

    specs = load_specs()
    path, spec = specs.locate_repo(repo)
    tests = load_catalog(path, spec, specs).tests
    return catalogued(tests, cadence=cadence), any(t.fmt == "template" for t in tests)


def registry_reading(repo: str | None) -> RegistryReading:
    """The dialect and implicit CPU folders ``load_catalog`` reads a registry checkout with."""
    from pipelines.core.catalog import registry_reading as reading
    from pipelines.core.specs import load_specs, unconfigured_spec

    path, spec = load_specs().locate_repo(repo)
    dialect, _, _, spec = reading(path, spec or unconfigured_spec(path), spec is not None)
    return RegistryReading(dialect, tuple(spec.implicit_cpu_dirs))


def run(args: argparse.Namespace) -> int:
    check_groups_flag(args.groups)
    where = locate(args.repo, groups_file=args.groups)
    if args.groups is not None and not where.groups:
        raise FlagError(f"--groups: {args.groups} declares no groups for {where.name} (repos.{where.name}.groups); "
                        f"declare them under that name (its name in repos.yaml, else its folder name) or give "
                        "the file that does (docs/coverage.md)")
    catalog, template = registered_tests(args.repo, args.cadence)
    now = check_repo(where, catalog=catalog)
    lost: tuple[LostCell, ...] = ()
    heirs: dict[str, tuple[str, ...]] = {}
    if args.against is not None:
        before = GitSource(where.repo, args.against)
        # one `git diff` for what changed since; the dialect is chosen only if a group member did
        changed, moved = before.changed()
        was = declared_then(where, moved)  # a member renamed since is read under its name then
        known = as_of(catalog, was, before, changed, template, lambda: registry_reading(args.repo), args.cadence)
        then = check_repo(was, before, adopt=True, catalog=known)
        lost = lost_cells(then.groups, now.groups, before, TreeSource(where.repo), moved)
        heirs = renamed(then.groups, now.groups, moved)
    if args.json:
        # with --against, ok answers the question asked, "was nothing lost?", as the exit code does
        ok = not lost if args.against is not None else now.ok
        out = {"repo": str(where.repo), "groups_file": str(where.groups_file), "cadence": args.cadence, "ok": ok,
               "groups": [group_json(g) for g in now.groups], "problems": [str(p) for p in now.problems]}
        if args.against is not None:
            out.update(against=args.against, lost=[lost_json(c) for c in lost], renamed={k: list(v) for k, v in heirs.items()})
        print(json.dumps(out, indent=2))
    elif args.against is not None:
        print_lost(args.against, lost, heirs)
        uncovered, problems = totals(now)
        print(f"now: {uncovered} uncovered cell(s), {problems} problem(s)"
              + ("; `nightly coverage` without --against lists them" if uncovered or problems else ""))
    else:
        print_report(where.name, where.repo, where.groups_file, now, where.configured)
    if args.against is not None:
        return 1 if lost else 0
    return 0 if now.ok else 1


def _config_json(config) -> dict:
    return {"test": config.test, "config": config.name, "path": config.path, "line": config.line}


def group_json(g: GroupCoverage) -> dict:
    return {
        "name": g.group.name,
        "origin": g.group.origin,
        "tests": list(g.tests),
        "dimensions": {d.name: list(d.labels) for d in g.dimensions},
        "cells": [{"label": c.label, "values": c.as_dict()} for c in g.cells],
        "covered_by": {c.label: [_config_json(x) for x in g.covered_by(c)] for c in g.cells},
        "uncovered": [c.as_dict() for c in g.uncovered],
        "problems": [str(p) for p in g.problems],
        "notes": [str(n) for n in g.notes],
        "idle": dict(g.idle),
    }


def lost_json(cell: LostCell) -> dict:
    return {"group": cell.group, "label": cell.cell.label, "cell": cell.cell.as_dict(),
            "was_covered_by": [{**_config_json(c), "change": change} for c, change in cell.was]}


def _table(rows: list[tuple[str, str]], indent: str = "  ") -> list[str]:
    width = max((len(a) for a, _ in rows), default=0)
    return [f"{indent}{a.ljust(width)}  {b}".rstrip() for a, b in rows]


def required_text(require: Sequence[tuple[str, ...]], strength: int) -> str:
    """What must be covered, in the header: ``backendxlayout`` per named tuple, else all pairs (or k-way)."""
    if require:
        return " and ".join("x".join(t) for t in require)
    return f"all {'pairs' if strength == 2 else f'{strength}-way combinations'}"


def print_report(name: str, repo: Path, groups_file: Path, report: CoverageReport, configured: bool = True) -> None:
    # the key the groups file is read under: a checkout in another folder than its repos.yaml entry
    # goes by its folder name, and a group declared under the repo's name would silently not apply
    key = f"repos.{name}" + ("" if configured else ": the folder name, as no repo of assets/repos.yaml is this checkout")
    print(f"coverage of {name} ({repo}); groups from {groups_file} ({key}) and # coverage-group: comments")
    if not report.groups:
        print(f"no groups: declare sibling tests under repos.{name}.groups in {groups_file} (docs/coverage.md)")
    for g in report.groups:
        required = required_text(g.group.require, g.group.strength)
        dims = ", ".join(f"{d.name} ({len(d.labels)})" for d in g.dimensions)
        if dims:
            print(f"\ngroup {g.group.name} ({g.group.origin}): {required} of {dims}")
        else:  # a group from comments whose rows could not be read has no dimensions to pair
            print(f"\ngroup {g.group.name} ({g.group.origin}): no configuration read, so no dimensions and no "
                  "cells to check")
        by_test: dict[str, list[str]] = {t: [] for t in g.tests}
        for row in g.rows:
            by_test.setdefault(row.config.test, []).append(row.config.name)
        idle = dict(g.idle)
        for line in _table([(t, ", ".join(names) or (f"(covers nothing: {idle[t]})" if t in idle else "(no configurations)"))
                            for t, names in by_test.items()]):
            print(line)
        rows = [("cell", "covered by")]
        for cell in g.cells:
            by = g.covered_by(cell)
            rows.append((cell.label, "; ".join(f"{c.path}:{c.line} {c.name}" for c in by) or "UNCOVERED"))
        for line in _table(rows) if g.cells else ():
            print(line)
        for problem in g.problems:
            print(f"  {problem}")
        for note in g.notes:
            print(f"  note: {note}")
        if g.cells:
            print(f"  {len(g.cells) - len(g.uncovered)} of {len(g.cells)} cells covered")
        if g.group.inferred and g.uncovered:  # every field its own dimension: correlated fields read as gaps
            print(f"  group {g.group.name} is declared only by # coverage-group: comments, so each field is a "
                  "dimension of its own; fields that vary together (one axis, as a diagonal split uses them) need "
                  f"a group under repos.{name} in {groups_file} with explicit dimensions (docs/coverage.md)")
    for problem in report.problems:
        print(problem)
    uncovered, problems = totals(report)
    notes = sum(len(g.notes) for g in report.groups)
    print(f"\n{len(report.groups)} group(s), {uncovered} uncovered cell(s), {problems} problem(s)"
          + (f", {notes} note(s) (rows not counted that could only add coverage; not a failure)" if notes else ""))


def totals(report: CoverageReport) -> tuple[int, int]:
    """(uncovered cells, problems) over every group of the report."""
    return (sum(len(g.uncovered) for g in report.groups),
            len(report.problems) + sum(len(g.problems) for g in report.groups))


def print_lost(rev: str, lost: Sequence[LostCell], heirs: dict[str, tuple[str, ...]] | None = None) -> None:
    print(f"against {rev}: {len(lost)} cell(s) covered then are uncovered now" if lost
          else f"against {rev}: no cell covered then is uncovered now")
    for old, new in (heirs or {}).items():  # renamed since: its cells were judged against its tests' groups now
        print(f"  group {old} (at {rev}) is {', '.join(new)} now: no group has its name now, so its cells count "
              f"as covered where the group{'s' if len(new) > 1 else ''} holding its tests cover{'' if len(new) > 1 else 's'} them")
    for cell in lost:
        print(f"  {cell.group}: {cell.cell.label}")
        for config, change in cell.was:
            print(f"      was covered by {config.path}:{config.line} {config.name} ({change})")


# ---- design ---------------------------------------------------------------------------------


def _dims(values: Sequence[str]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for raw in values:
        name, _, vals = raw.partition("=")
        items = [v.strip() for v in vals.split(",") if v.strip()]
        if not name.strip() or not items or len(set(items)) != len(items):
            raise FlagError(f"--dim: {raw!r} is not NAME=V1,V2,... with distinct values; give e.g. --dim tp=1,2,4")
        if name.strip() in {n for n, _ in out}:
            raise FlagError(f"--dim: dimension {name.strip()!r} is given twice; give each dimension once")
        out.append((name.strip(), items))
    return out


#: each whole-number flag of ``design``: what it counts, and an example value
_COUNTS = {"--strength": ("how many dimensions each cell combines", 2), "--tests": ("the number of sibling tests", 2),
           "--budget": ("the most configurations one test may run", 2), "--gpus": ("the GPUs one configuration uses", 8)}


def check_design_flags(args: argparse.Namespace, dims: Sequence[tuple[str, Sequence[str]]]) -> int:
    """Every number ``design`` takes in its range before any search; returns the strength to use.

    Unchecked, a negative ``--est-time`` printed negative GPU-seconds and a ``--strength`` above
    the number of dimensions was silently lowered.
    """
    for flag, value in (("--strength", args.strength), ("--tests", args.tests), ("--budget", args.budget),
                        ("--gpus", args.gpus)):
        if value is not None and value < 1:
            what, example = _COUNTS[flag]
            raise FlagError(f"{flag}: {value} is not a positive whole number; give {what}, e.g. {flag} {example}")
    if args.est_time is not None and not (math.isfinite(args.est_time) and args.est_time > 0):
        raise FlagError(f"--est-time: {args.est_time:g} is not a positive number of seconds; give the seconds one "
                        "configuration runs, e.g. --est-time 600")
    if args.budget is not None and not args.tests:
        raise FlagError("--budget: needs --tests N (at most K configurations for each of N tests); add --tests")
    if args.strength is not None and args.require:  # design() covers the --require tuples only
        raise FlagError("--strength: cannot stand beside --require, which names the dimension tuples to cover "
                        "instead; give --require for those tuples only, or --strength for every combination of "
                        "that many dimensions")
    if args.strength is None:
        return min(2, len(dims))
    if args.strength > len(dims):
        raise FlagError(f"--strength: {args.strength} is more than the {len(dims)} dimensions given; "
                        f"give at most --strength {len(dims)}")
    return args.strength


#: the flags of the check, which `design` (no repo involved) would otherwise silently ignore
_CHECK_FLAGS = (("--repo", "repo"), ("--groups", "groups"), ("--against", "against"), ("--cadence", "cadence"))


def run_design(args: argparse.Namespace) -> int:
    given = [flag for flag, dest in _CHECK_FLAGS if getattr(args, dest, None) is not None]
    if given:
        raise FlagError(f"{', '.join(given)}: check a repo's groups, and `design` reads no repo; drop "
                        f"{'it' if len(given) == 1 else 'them'} or leave out `design`")
    dims = _dims(args.dim)
    names = {n for n, _ in dims}
    strength = check_design_flags(args, dims)
    require = [tuple(x.strip() for x in r.split(",")) for r in args.require]
    for t in require:
        if not set(t) <= names or len(set(t)) != len(t):
            raise FlagError(f"--require: {','.join(t)!r} must name distinct dimensions among {', '.join(sorted(names))}; "
                            "give e.g. --require " + ",".join(sorted(names)[:2]))
    cap = args.tests * args.budget if args.budget else None
    # a search over many dimensions takes tens of seconds: say what it is doing before it starts
    print(f"nightly coverage design: searching the fewest configurations covering {required_text(require, strength)} "
          f"of {len(dims)} dimensions (full product {math.prod(len(v) for _, v in dims):,}) ...",
          file=sys.stderr, flush=True)
    found = design(dims, strength, require, max_rows=cap, seed=args.seed)
    tests = args.tests or 1
    if tests > max(found.size, 1):  # a test with no configuration is no test; dealing to 100,000 never ended
        raise FlagError(f"--tests: {tests} is more than the {found.size} configurations the design needs; "
                        f"give at most --tests {found.size}")
    dealt = assign(found.rows, tests)
    owner = {i: t for t, rows in enumerate(dealt) for i in rows}
    test_name = [f"test-{t + 1}" for t in range(tests)]
    if args.json:
        print(json.dumps(design_json(found, dealt, test_name, owner, args), indent=2))
    else:
        print_design(found, dealt, test_name, owner, args, require)
    return 1 if found.uncovered else 0


def _seconds(found: Design, args: argparse.Namespace) -> dict | None:
    if args.est_time is None:
        return None
    per = args.est_time * args.gpus
    return {"design": found.size * per, "cartesian": found.cartesian * per, "saved": (found.cartesian - found.size) * per}


def design_json(found: Design, dealt, test_name, owner, args) -> dict:
    return {
        "size": found.size,
        "lower_bound": found.lower_bound,
        "cartesian": found.cartesian,
        "method": found.method,
        "assignments": {test_name[t]: [found.configuration(i) for i in rows] for t, rows in enumerate(dealt)},
        "covered_by": {c.label: [{"test": test_name[owner[i]], "configuration": i + 1} for i in found.covered_by(c)]
                       for c in found.cells if found.covered_by(c)},
        "uncovered": [c.as_dict() for c in found.uncovered],
        "gpu_seconds": _seconds(found, args),
    }


def print_design(found: Design, dealt, test_name, owner, args, require: Sequence[tuple[str, ...]]) -> None:
    required = required_text(require, found.strength)
    dims = ", ".join(f"{n} ({len(v)})" for n, v in found.dims)
    print(f"design: {required} of {dims}: {found.size} configurations "
          f"(lower bound {found.lower_bound}, full product {found.cartesian}; {found.method})")
    header = ["#", "test", *(n for n, _ in found.dims)]
    rows = [header] + [[str(i + 1), test_name[owner[i]], *found.configuration(i).values()]
                       for t in range(len(dealt)) for i in dealt[t]]
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    for r in rows:
        print("  " + "  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)).rstrip())
    print("proof:")
    proof = [(c.label, ", ".join(f"#{i + 1} ({test_name[owner[i]]})" for i in found.covered_by(c)) or "UNCOVERED")
             for c in found.cells]
    for line in _table(proof):
        print(line)
    if found.uncovered:
        print(f"uncovered: {len(found.uncovered)} cell(s) do not fit in {args.tests} test(s) x {args.budget}: "
              + "; ".join(c.label for c in found.uncovered))
    seconds = _seconds(found, args)
    if seconds:
        print(f"GPU-seconds per night: {seconds['design']:,.0f} ({found.size} x {args.est_time:g} s x {args.gpus} GPU) "
              f"against {seconds['cartesian']:,.0f} for the full product of {found.cartesian}; saves {seconds['saved']:,.0f}")
