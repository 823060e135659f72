"""``nightly plan``: tonight's schedule before anything runs, and how close it is to optimal.

Reads the repo's registrations, applies the selection flags (cadence, labels, suites, backend,
changed paths), packs the tests onto the deployment's pools and prints per pool the predicted
makespan, the lower bound and their ratio, GPU utilization, each node's timeline and each test's
timeout. ``--shards SUITE=N`` shows the framework's static shards beside it (split on the est_time
in the files, as its runner reads them; shard k is its ``--auto-partition-id k``); ``--json`` prints
the plan for machines; ``--gantt FILE`` draws it.

Exit status: 0 planned (also when the changed paths select no test: nothing to plan); 2 a flag
or an input file is wrong (the message says how to fix it); 3 the selection flags matched no
test (the message names the flag and lists what exists).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from pipelines.cli import flags
from pipelines.cli.flags import FlagError, add_timeout_floor, timeout_floor
from pipelines.cli.plan_gantt import gantt_arg, gantt_path, write_gantt
from pipelines.cli.plan_view import (
    StaticShards,
    hardware_summary,  # noqa: F401 - callers import it from here
    hardware_text,
    left_out_by_flags,
    plan_json,
    print_text,
    recent_error,
    skipped_hardware_reason,
    timeout_advice,
)
from pipelines.core.model import Catalog, CatalogError
from pipelines.core.plan import (
    override_pools,
    parse_pool_arg,
    shards_plan,
    static_shards,
)
from pipelines.core.select import (
    CADENCES,
    Selection,
    SelectionError,
    repo_relative,
    select,
    split_csv,
    why_nothing,
)
from pipelines.core.specs import PoolSpec, RepoSpec, Specs, load_specs

#: the selection flags matched no test (the message names the flag and what exists); as `nightly run`
EXIT_NOTHING_SELECTED = 3


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="pack the selected tests onto the GPU pools and show the schedule",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repo", type=flags.path_text, help="framework checkout (a path) or a repo name in assets/repos.yaml "
                                  "(default: its `default`)")
    p.add_argument("--deployment", help="deployment in assets/cluster.yaml whose pools to use (default: "
                                      "$NIGHTLY_DEPLOYMENT, else its `default`)")
    p.add_argument("--home", type=flags.path, help="state folder whose history, calibrated estimates, quarantines "
                                                   "and catalog cache the plan reads, as `nightly run --home` does "
                                                   "(default: $NIGHTLY_HOME or .nightly/)")
    p.add_argument("--pool", action="append", default=[], metavar="NAME=NxG",
                   help="pool NAME with N nodes of G GPUs, replacing the deployment's (e.g. h200=4x8)")
    p.add_argument("--suite", action="append", dest="suites", help="only these suites (a,b)")
    p.add_argument("--backend", metavar="B", help="only this backend, any the catalog reads (cuda, rocm, cpu, or the "
                                                  "framework's own: amd, npu, ...); one no test has lists those that exist")
    p.add_argument("--cadence", default="nightly", choices=CADENCES, help="which scope (default: nightly)")
    p.add_argument("--labels", action="append", help="only tests with one of these labels (a,b)")
    changed = p.add_mutually_exclusive_group()
    changed.add_argument("--changed", nargs="+", metavar="FILE",
                         help="only what these changed files can break (repo-relative paths)")
    changed.add_argument("--git-range", metavar="A..B", help="the files changed between two revisions (git diff "
                                                             "--name-only A..B); a single revision is refused")
    p.add_argument("--shards", action="append", default=[], metavar="SUITE=N",
                   help="also show the framework's static LPT shards (N shards for SUITE)")
    add_timeout_floor(p)
    p.add_argument("--no-improve", action="store_true",
                   help="the base order only, without the search and the noise check: wide-first (longest-first on "
                        "each test's median x sqrt(GPUs), the median from history, else est_time / 1.25), "
                        "placed by the list schedule; the night itself runs the improved plan")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--gantt", type=gantt_arg, metavar="FILE",
                   help="write a Gantt chart of the plan to FILE (.png, .svg or .pdf; no suffix: .png): a row per "
                        "GPU and, per node, a cpu row for its 0-GPU tests; creates FILE's folder, not folders above it")
    p.set_defaults(func=run)


def load_catalog(path: Path, spec: RepoSpec | None, specs: Specs, cache_dir: Path | None = None) -> Catalog:
    """The catalog as the night reads it (``Night.registered``: models.yaml/datasets.yaml and the same
    cache: ``cache_dir``, else the default state's), so the plan reports the problems a run would;
    imported here so this module loads without it."""
    from pipelines.cli.catalog import default_cache_dir
    from pipelines.core.catalog import load_catalog as load

    return load(path, spec, specs, cache_dir=cache_dir or default_cache_dir())


def _repo(specs, value: str | None) -> tuple[Path, RepoSpec | None]:
    return specs.locate_repo(value)


def changed_in_range(repo: Path, rev_range: str) -> list[str]:
    """Repo-relative paths ``git diff --name-only A..B`` reports (argv list, never a shell). Only a
    range: ``git diff HEAD`` compares the working tree with one revision, not two commits."""
    if rev_range.startswith("-"):
        raise SelectionError(f"--git-range {rev_range!r}: expected A..B (two revisions)")
    if ".." not in rev_range:
        raise SelectionError(f"--git-range {rev_range!r}: expected a range A..B (two revisions, e.g. "
                             f"origin/main..{rev_range or 'HEAD'}); one revision would compare the working tree with "
                             "it, not two commits: for uncommitted changes give --changed FILE...")
    argv = ["git", "-C", str(repo), "diff", "--name-only", "--relative", rev_range, "--"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise SelectionError("--git-range needs git on PATH") from exc
    if out.returncode != 0:
        raise SelectionError(f"--git-range {rev_range}: git diff failed: {out.stderr.strip()}")
    return [line for line in out.stdout.splitlines() if line.strip()]


def _check_new_pools(tests, pools, deployment, overrides) -> None:
    """A pool ``--pool`` adds that no test would run on is a typo (h20=2x8 meant h200), not a plan."""
    from pipelines.core.plan.cluster import pools_no_test_uses

    added = [o.name for o in overrides if o.name not in {p.name for p in deployment.pools}]
    unused = pools_no_test_uses(tests, pools, added)
    if unused:
        have = ", ".join(p.name for p in deployment.pools) or "none"
        needed = ", ".join(sorted({hardware_text(t) for t in tests if hardware_text(t)})) or "none"
        raise FlagError(f"--pool: no registered test runs on the new pool(s) {', '.join(unused)} (a new pool runs "
                        f"the hardware of its name); reshape one of deployment {deployment.name}'s pools ({have}) or "
                        f"name the hardware the tests need ({needed})")


def _pairs(values: list[str], flag: str) -> dict[str, int]:
    out = {}
    for v in values:
        key, sep, n = v.partition("=")
        if not sep or not key or not n.isdigit() or int(n) <= 0:
            raise SelectionError(f"{flag} {v!r}: expected SUITE=N with N a positive number")
        out[key] = int(n)
    return out


def _split(sh) -> dict[str, list[frozenset[str]]]:
    """Which tests each shard holds (what differs between two splits of the same tests): a shard's
    tests in another order are the same shard (its runner runs them all, one after another)."""
    return {suite: [frozenset(t.id for t in shard) for shard in ss] for suite, ss in sh.items()}


def _not_sharded(shards: dict[str, int], planned, chosen, not_here, held, unplanned,
                 deployment: str) -> tuple[tuple[str, str], ...]:
    """(suite, why) for each ``--shards`` suite none of whose tests is planned here, so it has no
    static shards to show: the deployment skips its hardware, its tests are disabled, held,
    unplanned, or the other flags select none of them."""
    out = []
    for suite in shards:
        if any(t.suite == suite for t in planned):
            continue
        mine = [t for t in chosen if t.suite == suite]
        counts = [(sum(1 for t in mine if not t.enabled), "disabled"),
                  (sum(1 for t in mine if t.id in not_here), "on hardware "
                   f"{', '.join(sorted({hardware_text(t) for t in mine if t.id in not_here}))} that deployment "
                   f"{deployment} skips (skip_hardware)"),
                  (sum(1 for t in mine if t.id in held), "quarantined"),
                  (sum(1 for t in mine if t.id in unplanned), "unplanned (see above)")]
        why = "; ".join(f"{n} {what}" for n, what in counts if n) or "the other flags select none of its tests"
        out.append((suite, f"no test of it is planned here ({why}), so it has no static shards to show"))
    return tuple(out)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except CatalogError:
        raise  # the dispatcher prints located problems
    except (SelectionError, FlagError, ValueError) as exc:
        print(f"nightly plan: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    specs = load_specs()
    path, spec = _repo(specs, args.repo)
    deployment = specs.deployment(args.deployment)
    overrides = [parse_pool_arg(v) for v in args.pool]
    twice = sorted({o.name for o in overrides if sum(1 for x in overrides if x.name == o.name) > 1})
    if twice:
        given = ", ".join(v for v in args.pool if parse_pool_arg(v).name in twice)
        raise FlagError(f"--pool: pool {', '.join(twice)} given more than once ({given}); give each pool once")
    pools: tuple[PoolSpec, ...] = override_pools(deployment.pools, overrides)
    shards = _pairs(args.shards, "--shards")
    given_floor = timeout_floor(args.timeout_floor)
    gantt = gantt_path(args.gantt) if args.gantt else None  # before planning: a bad name fails fast
    from pipelines.night import Night, NightSettings, default_home, with_calibrated

    home = (args.home or default_home()).resolve()  # the state a `nightly run --home` of the same folder reads
    catalog = load_catalog(path, spec, specs, home / "cache")
    registered = {t.id: t for t in catalog.tests}  # est_time as the files say: what the framework's runner reads
    _check_new_pools(catalog.tests, pools, deployment, overrides)
    # plan with the estimates the next night will use (an unconfigured checkout's are under its folder name)
    night = Night(NightSettings(home=home, repo=spec.name if spec else str(path), deployment=args.deployment,
                                timeout_floor_s=given_floor))
    calibrated = night.calibrated()
    catalog = with_calibrated(catalog, calibrated, night.rewrites_for(catalog.tests, calibrated))
    for problem in night.estimate_warnings:
        print(f"warning: {problem}", file=sys.stderr)
    changed = None
    if args.changed is not None:
        # absolute paths resolved like the root, so a path through a symlinked checkout stays inside it
        changed = repo_relative([os.path.realpath(c) if os.path.isabs(c) else c for c in args.changed],
                                str(path.resolve()))
    elif args.git_range:
        changed = tuple(changed_in_range(path, args.git_range))
    selection = Selection(cadence=args.cadence, labels=split_csv(args.labels), suites=split_csv(args.suites),
                          backend=args.backend, changed=changed)
    chosen = select(catalog.tests, selection, catalog.discovery)  # a test_*.py outside its roots is library code
    why = "" if chosen else why_nothing(catalog.tests, dataclasses.replace(selection, changed=None))
    if why:  # the flags matched nothing (changed paths that select nothing are an answer, not a mistake)
        print(f"nightly plan: nothing selected: {why}", file=sys.stderr)
        return EXIT_NOTHING_SELECTED
    unknown = [s for s in shards if s not in {t.suite for t in catalog.tests}]
    if unknown:
        raise SelectionError(f"--shards: unknown suite(s) {', '.join(unknown)}")
    # as `nightly run` does: hardware the deployment knowingly never runs is skipped, not unplanned
    not_here = {t.id for t in chosen if t.enabled and hardware_text(t) in set(deployment.skip_hardware)}
    held = night.quarantine_holds(t for t in chosen if t.enabled and t.id not in not_here)  # as `nightly run`
    runnable = [t for t in chosen if t.enabled and t.id not in not_here and t.id not in held]
    for suite, n in shards.items():
        # bounded by the suite's registered tests, not tonight's selection: a CI job passes the
        # framework's fixed shard count together with --changed or --labels
        most = max(1, sum(1 for t in catalog.tests if t.suite == suite and t.enabled))
        if n > most:
            raise FlagError(f"--shards {suite}={n}: more shards than the suite has enabled tests ({most}); the "
                            f"rest would hold runners with nothing to run; give N from 1 to {most}")
    skipped = [(t, t.disabled) if not t.enabled else (t, held.get(t.id) or skipped_hardware_reason(hardware_text(t)))
               for t in chosen if not t.enabled or t.id in not_here or t.id in held]
    floor, factor = night.timeout_floor_s, night.repo_spec.timeout_factor  # --timeout-floor, else the repo's
    # as `nightly run` and the night plan: the same function, so the same durations and predictions
    plan = night.plan(runnable, pools=pools, improve=not args.no_improve)
    static = None
    if shards:
        planned = [t for t in runnable if t.id not in plan.unplanned]
        # the framework's split: its runner reads the est_time written in the files, not nightly-e2e's
        # calibrated estimates (those reach it once the calibration's patch is applied: shown apart)
        sh = static_shards([registered.get(t.id, t) for t in planned], shards)  # unlisted suites: 1 shard
        calibrated = static_shards(planned, shards)
        # on the durations the plan itself used (its medians), so "vs static shards" compares splits, not
        # the plan's medians with the shards' padded est_time
        medians = {tid: median for tid, median, _p90, _source in plan.expected}
        static = StaticShards(sh, shards_plan(sh, timeout_floor_s=floor, timeout_factor=factor, durations=medians),
                              calibrated if _split(calibrated) != _split(sh) else None,
                              _not_sharded(shards, planned, chosen, not_here, held, plan.unplanned, deployment.name))
    tests = {t.id: t for t in catalog.tests}
    if gantt:
        write_gantt(plan, pools, gantt)
    left_out = left_out_by_flags(catalog.tests, selection, catalog.discovery)
    if args.json:
        print(json.dumps(plan_json(plan, pools, tests, skipped, catalog, static, left_out,
                                   advice=timeout_advice(night, plan, registered),
                                   warnings=[f"warning: {p}" for p in night.estimate_warnings]), indent=1))
    else:
        print_text(catalog, plan, pools, tests, skipped, static, changed, recent=recent_error(night), left_out=left_out,
                   advice=timeout_advice(night, plan, registered))
    if gantt:
        print(f"gantt chart: {gantt}", file=sys.stderr if args.json else sys.stdout)  # stdout stays JSON
    return 0
