"""``nightly plan``: tonight's schedule before anything runs, and how close it is to optimal.

Reads the repo's registrations, applies the selection flags (cadence, labels, suites, backend,
changed paths), packs the tests onto the deployment's pools and prints per pool the predicted
makespan, the lower bound and their ratio, GPU utilization, each node's timeline and each test's
timeout. ``--shards SUITE=N`` shows the framework's static shards beside it; ``--json`` prints
the plan for machines; ``--gantt FILE`` draws it.

Exit status: 0 planned (also when the changed paths select no test: nothing to plan); 2 a flag
or an input file is wrong (the message says how to fix it); 3 the selection flags matched no
test (the message names the flag and lists what exists).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from pipelines.cli.flags import FlagError, add_timeout_floor, timeout_floor
from pipelines.cli.plan_gantt import gantt_path, write_gantt
from pipelines.core.model import Catalog, CatalogError, Plan, Test
from pipelines.core.plan import (
    make_plan,
    override_pools,
    parse_pool_arg,
    shards_gpus,
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
from pipelines.core.specs import PoolSpec, RepoSpec, load_specs

#: the selection flags matched no test (the message names the flag and what exists); as `nightly run`
EXIT_NOTHING_SELECTED = 3


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="pack the selected tests onto the GPU pools and show the schedule",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repo", help="framework checkout (a path) or a repo name in assets/repos.yaml "
                                  "(default: its `default`)")
    p.add_argument("--deployment", help="deployment in assets/cluster.yaml whose pools to use (default: its `default`)")
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
    changed.add_argument("--git-range", metavar="A..B", help="the files changed in this git range")
    p.add_argument("--shards", action="append", default=[], metavar="SUITE=N",
                   help="also show the framework's static LPT shards (N shards for SUITE)")
    add_timeout_floor(p)
    p.add_argument("--no-improve", action="store_true", help="plain longest-first list schedule only")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--gantt", type=Path, metavar="FILE",
                   help="write a Gantt chart of the plan to FILE (.png, .svg or .pdf; no suffix: .png); "
                        "creates FILE's folder, not folders above it")
    p.set_defaults(func=run)


def load_catalog(path: Path, spec: RepoSpec | None) -> Catalog:
    """The catalog stage (imported here so this module loads without it)."""
    from pipelines.cli.catalog import default_cache_dir
    from pipelines.core.catalog import load_catalog as load

    return load(path, spec, cache_dir=default_cache_dir())


def _repo(specs, value: str | None) -> tuple[Path, RepoSpec | None]:
    return specs.locate_repo(value)


def changed_in_range(repo: Path, rev_range: str) -> list[str]:
    """Repo-relative paths ``git diff --name-only A..B`` reports (argv list, never a shell)."""
    if rev_range.startswith("-"):
        raise SelectionError(f"--git-range {rev_range!r}: expected A..B (two revisions)")
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
        needed = ", ".join(sorted({_hw(t) for t in tests if _hw(t)})) or "none"
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
    pools: tuple[PoolSpec, ...] = override_pools(deployment.pools, overrides)
    shards = _pairs(args.shards, "--shards")
    given_floor = timeout_floor(args.timeout_floor)
    gantt = gantt_path(args.gantt) if args.gantt else None  # before planning: a bad name fails fast
    catalog = load_catalog(path, spec)
    _check_new_pools(catalog.tests, pools, deployment, overrides)
    # plan with the estimates the next night will use (an unconfigured checkout's are under its folder name)
    from pipelines.night import Night, NightSettings, with_calibrated

    night = Night(NightSettings(repo=spec.name if spec else str(path), deployment=args.deployment))
    catalog = with_calibrated(catalog, night.calibrated())
    for problem in night.estimate_warnings:
        print(f"warning: {problem}", file=sys.stderr)
    changed = None
    if args.changed is not None:
        changed = repo_relative(args.changed, str(path.resolve()))
    elif args.git_range:
        changed = tuple(changed_in_range(path, args.git_range))
    selection = Selection(cadence=args.cadence, labels=split_csv(args.labels), suites=split_csv(args.suites),
                          backend=args.backend, changed=changed)
    chosen = select(catalog.tests, selection)
    why = "" if chosen else why_nothing(catalog.tests, dataclasses.replace(selection, changed=None))
    if why:  # the flags matched nothing (changed paths that select nothing are an answer, not a mistake)
        print(f"nightly plan: nothing selected: {why}", file=sys.stderr)
        return EXIT_NOTHING_SELECTED
    unknown = [s for s in shards if s not in {t.suite for t in catalog.tests}]
    if unknown:
        raise SelectionError(f"--shards: unknown suite(s) {', '.join(unknown)}")
    # as `nightly run` does: hardware the deployment knowingly never runs is skipped, not unplanned
    not_here = {t.id for t in chosen if t.enabled and _hw(t) in set(deployment.skip_hardware)}
    runnable = [t for t in chosen if t.enabled and t.id not in not_here]
    for suite, n in shards.items():
        most = max(1, sum(1 for t in runnable if t.suite == suite))
        if n > most:
            raise FlagError(f"--shards {suite}={n}: more shards than the suite has selected tests ({most}); the rest "
                            f"would hold runners with nothing to run; give N from 1 to {most}")
    skipped = [(t, t.disabled) if not t.enabled else (t, skipped_hardware_reason(_hw(t))) for t in chosen
               if not t.enabled or t.id in not_here]
    floor = given_floor if given_floor is not None else (spec.timeout_floor_s if spec else 1800)
    factor = spec.timeout_factor if spec else 1.25
    from pipelines.core.plan.durations import duration_model  # order and predictions from measured durations
    from pipelines.storage.history import successions  # calibrate's est_time rewrites keep history current

    plan = make_plan(runnable, pools, timeout_floor_s=floor, timeout_factor=factor, improve=not args.no_improve,
                     durations=duration_model(runnable, night.history.read(), successions=successions(night.history)))
    static = None
    if shards:
        sh = static_shards([t for t in runnable if t.id not in plan.unplanned], shards)  # unlisted suites: 1 shard
        static = (sh, shards_plan(sh, timeout_floor_s=floor, timeout_factor=factor))
    tests = {t.id: t for t in catalog.tests}
    if gantt:
        write_gantt(plan, pools, gantt)
    if args.json:
        print(json.dumps(plan_json(plan, pools, tests, skipped, catalog, static), indent=1))
    else:
        print_text(catalog, plan, pools, tests, skipped, static, changed)
    if gantt:
        print(f"gantt chart: {gantt}", file=sys.stderr if args.json else sys.stdout)  # stdout stays JSON
    return 0


def plan_json(plan: Plan, pools, tests: dict[str, Test], skipped, catalog: Catalog, static=None) -> dict:
    shapes = {p.name: p for p in pools}
    expected = {tid: (median, p90, source) for tid, median, p90, source in plan.expected}
    out = {
        "repo": catalog.repo,
        "makespan_s": plan.makespan_s,
        "predicted_median_s": plan.predicted_median_s,
        "predicted_p90_s": plan.predicted_p90_s,
        "lower_bound_s": plan.lower_bound_s,
        "ratio": round(plan.ratio, 6),
        "pools": [{"pool": name, "nodes": shapes[name].nodes, "gpus_per_node": shapes[name].gpus_per_node,
                   "makespan_s": m, "lower_bound_s": lb, "ratio": round(m / lb, 6) if lb else 1.0,
                   "gpu_utilization": round(u, 6)} for name, m, lb, u in plan.pools],
        "assignments": [{"test_id": a.test_id, "pool": a.pool, "node": a.node, "start_s": a.start_s,
                         "end_s": a.end_s, "gpus": a.gpus, "timeout_s": a.timeout_s, "priority": a.priority,
                         "est_time": tests[a.test_id].est_time if a.test_id in tests else None,
                         "est_source": tests[a.test_id].est_source if a.test_id in tests else "",
                         "expected_s": expected.get(a.test_id, (None,))[0],
                         "expected_p90_s": expected.get(a.test_id, (None, None))[1],
                         "expected_from": expected.get(a.test_id, (None, None, "est_time"))[2],
                         "path": tests[a.test_id].path if a.test_id in tests else ""} for a in plan.ordered()],
        "unplanned": [{"test_id": tid, "hardware": _hw(tests.get(tid))} for tid in plan.unplanned],
        "skipped": [{"test_id": t.id, "reason": why} for t, why in skipped],
        "problems": [str(p) for p in catalog.problems],
    }
    if static:
        sh, splan = static
        out["static_shards"] = {
            "makespan_s": splan.makespan_s, "gpus": shards_gpus(sh),
            "shards": [{"suite": s, "shard": k, "tests": [t.id for t in shard], "est_s": sum(t.est_time for t in shard)}
                       for s, ss in sh.items() for k, shard in enumerate(ss)]}
    return out


def skipped_hardware_reason(hardware: str) -> str:
    """The words `nightly run` uses for a test the deployment skips (core/runset.resolve_run)."""
    return f"not run here: this deployment skips hardware {hardware!r} (skip_hardware)"


def _hw(t: Test | None) -> str:
    from pipelines.core.plan import hardware_of

    return hardware_of(t) if t else ""


def hardware_summary(plan: Plan, pools, tests: dict[str, Test]) -> list[str]:
    """Unplanned tests per hardware with the pool (or alias) to add, and aliases assumed onto the default pool."""
    from pipelines.core.plan.cluster import pool_hardware

    lines: list[str] = []
    by_hw: dict[str, list[Test]] = {}
    for tid in plan.unplanned:
        t = tests.get(tid)
        if t is not None:
            by_hw.setdefault(_hw(t) or "?", []).append(t)
    if by_hw:
        lines.append(f"\n  unplanned: {len(plan.unplanned)} test(s) need hardware no pool runs:")
        default = pools[0].name if pools else "POOL"
        for hw, ts in sorted(by_hw.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            gpus = max(t.gpus for t in ts)
            alias = f", or list {hw} as an alias of pool {default}" if all(t.backend == "cuda" for t in ts) else ""
            lines.append(f"    {hw:<14} {len(ts):>4} test(s), up to {gpus} GPUs: add a pool with `hardware: [{hw}]` in "
                         f"assets/cluster.yaml (or --pool {hw}=NODESxGPUS){alias}")
            lines += [f"      {t.id}" for t in ts[:5]] + ([f"      ... and {len(ts) - 5} more"] if len(ts) > 5 else [])
    listed = {hw for p in pools for hw in pool_hardware(p)}
    assumed: dict[str, int] = {}
    for a in plan.assignments:
        t = tests.get(a.test_id)
        hw = _hw(t) if t else ""
        if t and t.gpus and hw and hw not in listed:
            assumed[hw] = assumed.get(hw, 0) + 1
    for hw, n in sorted(assumed.items()):
        lines.append(f"\n  {n} test(s) of runner config {hw} (no GPU type) planned on the default pool "
                     f"{pools[0].name}; list {hw} under another pool's `hardware:` in assets/cluster.yaml to move them")
    return lines


def _hms(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def duration_basis(plan: Plan) -> str:
    """Where the durations the plan and its prediction use come from (history or est_time / 1.25)."""
    if not plan.expected:
        return ""
    guessed = sum(1 for *_, source in plan.expected if source == "fallback")
    measured = len(plan.expected) - guessed
    if not guessed:
        return f"every test's duration from its history ({measured} tests)"
    if not measured:
        return ("every duration is est_time / 1.25: history has no passing run of these test files on this "
                "hardware yet, so the prediction sharpens after the first night")
    return (f"durations from history for {measured} tests, est_time / 1.25 for {guessed} without a passing run "
            "of their current file (marked below)")


def print_text(catalog: Catalog, plan: Plan, pools, tests, skipped, static, changed) -> None:
    shapes = {p.name: p for p in pools}
    spread = (f"; median of simulated nights {plan.predicted_median_s:.0f}s, p90 {plan.predicted_p90_s:.0f}s"
              if plan.predicted_median_s else "")
    print(f"plan for {catalog.repo}: {len(plan.assignments)} tests; predicted makespan {plan.makespan_s:.0f}s "
          f"({_hms(plan.makespan_s)}{spread}), lower bound {plan.lower_bound_s:.0f}s, ratio {plan.ratio:.3f}")
    basis = duration_basis(plan)
    if basis:
        print(f"  {basis}; timeouts stay on est_time")
    if changed is not None:
        print(f"  selected by {len(changed)} changed path(s)"
              + ("" if plan.assignments or plan.unplanned or skipped else "; they select no test: nothing to plan"))
        from pipelines.core.select import is_test_file, normalize_path

        listed = {normalize_path(t.path) for t in catalog.tests}
        for path in changed:
            if is_test_file(path) and normalize_path(path) not in listed:
                print(f"  {path}: no registration or template job lists this test file; it selects nothing "
                      "(list it in a job or register it to run it)")
    print(f"\n  {'pool':<10} {'nodes':>9} {'tests':>5} {'makespan':>9} {'lower bd':>9} {'ratio':>6} {'GPU util':>8}")
    for name, m, lb, u in plan.pools:
        n = sum(1 for a in plan.assignments if a.pool == name)
        shape = f"{shapes[name].nodes}x{shapes[name].gpus_per_node}"
        print(f"  {name:<10} {shape:>9} {n:>5} {m:>8.0f}s {lb:>8.0f}s {(m / lb if lb else 1):>6.3f} {u:>7.1%}")
    sources = {tid: source for tid, _m, _p, source in plan.expected}
    guessed = {tid for tid, source in sources.items() if source == "fallback"}
    if len(guessed) == len(sources):
        guessed = set()  # the header says so once; no row marks on a first night
    for name, *_ in plan.pools:
        for node in range(shapes[name].nodes):
            rows = sorted((a for a in plan.assignments if a.pool == name and a.node == node),
                          key=lambda a: (a.start_s, a.priority))
            busy = max((a.end_s for a in rows), default=0.0)
            print(f"\n  {name}/node {node}: {len(rows)} tests, busy until {busy:.0f}s")
            print(f"    {'prio':>4} {'start':>7} {'end':>7} {'gpus':>4} {'timeout':>7}  test")
            for a in rows:
                t = tests.get(a.test_id)
                mark = " (uncalibrated estimate)" if t and t.uncalibrated else ""
                if a.test_id in guessed:
                    mark += " (no history: est_time / 1.25)"
                print(f"    {a.priority:>4} {a.start_s:>7.0f} {a.end_s:>7.0f} {a.gpus:>4} {a.timeout_s:>7}  {a.test_id}{mark}")
    for line in hardware_summary(plan, pools, tests):
        print(line)
    disabled = [(t, why) for t, why in skipped if not t.enabled]
    if disabled:
        print("\n  skipped (disabled):")
        for t, why in disabled:
            print(f"    {t.id}: {why}")
    elsewhere = [(t, why) for t, why in skipped if t.enabled]
    if elsewhere:
        print(f"\n  skipped by the deployment: {len(elsewhere)} test(s) on hardware it never runs (skip_hardware in "
              "assets/cluster.yaml; remove the hardware there to plan them):")
        for t, why in elsewhere:
            print(f"    {t.id}: {why}")
    if catalog.problems:
        print("\n  problems:")
        for p in catalog.problems:
            print(f"    {p}")
    if static:
        sh, splan = static
        print(f"\n  static shards (the framework's split): {shards_gpus(sh)} GPUs held, makespan {splan.makespan_s:.0f}s")
        for suite, ss in sh.items():
            for k, shard in enumerate(ss):
                print(f"    {suite} shard {k + 1}/{len(ss)}: {sum(t.est_time for t in shard):>6}s  "
                      f"{', '.join(t.id for t in shard)}")
        if splan.makespan_s:
            gpus = sum(p.nodes * p.gpus_per_node for p in pools if p.name in {a.pool for a in plan.assignments})
            print(f"  this plan: {plan.makespan_s:.0f}s on {gpus} GPUs "
                  f"({plan.makespan_s / splan.makespan_s - 1:+.1%} vs static shards)")
