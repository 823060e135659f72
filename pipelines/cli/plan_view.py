"""The plan as a CI maintainer reads it: ``nightly run``'s table, ``nightly plan``'s text and JSON."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipelines.core.calibrate.evidence import seconds
from pipelines.core.model import Catalog, Plan, Test
from pipelines.core.plan import Shards, shard_sum, shards_gpus


@dataclass(frozen=True)
class StaticShards:
    """``nightly plan --shards``: the framework's split (on the est_time in the files, which its runner
    reads), that split as a Plan on this plan's durations, and the split nightly-e2e's calibrated
    est_time would give once its patch is applied (None when it is the same split)."""

    shards: Shards
    plan: Plan
    calibrated: Shards | None = None
    #: (suite, why) for each ``--shards`` suite with no test planned here (none shown for it)
    not_shown: tuple[tuple[str, str], ...] = ()


def print_plan(plan: Plan, tests: Mapping[str, Test], skipped: Sequence[Test] = (), pools: Sequence = (),
               recent: str = "", advice: Mapping[str, str] | None = None) -> None:
    """``nightly run``'s table (``--list-only`` too): with `nightly plan`'s notes of where the durations
    come from, its row marks and the recent prediction error (``recent``), from the same functions."""
    spread = (f" (median of simulated nights {plan.predicted_median_s:.1f}s, p90 {plan.predicted_p90_s:.1f}s)"
              if plan.predicted_median_s else "")
    print(f"plan: {len(plan.assignments)} tests, predicted makespan {plan.makespan_s:.1f}s{spread}, "
          f"lower bound {plan.lower_bound_s:.1f}s, ratio {plan.ratio:.3f}")
    for line in header_notes(plan, recent):
        print(f"  {line}")
    marks = duration_marks(plan)
    print(f"  {'order':>5}  {'test':<48} {'gpus':>4} {'pool/node':<10} {'start':>7} {'end':>7} {'est':>6} {'timeout':>7}")
    for a in plan.ordered():
        t = tests.get(a.test_id)
        est = f"{t.est_time}{'*' if t and t.uncalibrated else ''}" if t else "?"
        print(f"  {a.priority:>5}  {a.test_id:<48} {a.gpus:>4} {a.pool + '/' + str(a.node):<10} "
              f"{a.start_s:>7.1f} {a.end_s:>7.1f} {est:>6} {a.timeout_s:>7}{marks.get(a.test_id, '')}")
    for t in skipped:
        print(f"  {'skip':>5}  {t.id:<48} disabled: {t.disabled}")
    for tid in plan.unplanned:
        print(f"  {'-':>5}  {tid:<48} not planned: {_why_unplanned(tests.get(tid), pools)}")
    for line in timeout_warnings(plan, advice):
        print(line)


def timeout_warnings(plan: Plan, advice: Mapping[str, str] | None = None) -> list[str]:
    """Tests whose expected duration (the median of their history) is past their timeout: the runner will
    kill them there every night until est_time is raised (the plan counts them up to the timeout).
    ``advice``: what raises it, per test (:func:`timeout_advice`); without one, `nightly calibrate`."""
    return [timeout_line(w) for w in will_time_out(plan, advice)]


def timeout_line(w: Mapping) -> str:
    """The warning for one of :func:`will_time_out`'s tests."""
    return (f"warning: {w['test_id']}: expected {w['expected_s']:.0f} s > timeout {w['timeout_s']} s: will time out; "
            f"{w['advice']}")


def will_time_out(plan: Plan, advice: Mapping[str, str] | None = None) -> list[dict]:
    """The tests :func:`timeout_warnings` names, as ``nightly plan --json`` gives them: id, expected
    duration, timeout and what raises it."""
    limits = {a.test_id: a.timeout_s for a in plan.assignments}
    return [{"test_id": tid, "expected_s": round(median, 3), "timeout_s": limits[tid],
             "advice": (advice or {}).get(tid, "run `nightly calibrate`")}
            for tid, median, _p90, _source in plan.expected if 0 < limits.get(tid, 0) < median]


def calibration_where(name: str, path, configured: bool) -> str:
    """Where a repo's ``calibration:`` settings (``accept:``, ``raise_on_timeout``) go. An unconfigured
    checkout has no entry to hold them: it needs one, and then goes by the entry's name, so what its
    state holds under its unconfigured name (``minirl-3f9a1c``) is said too (docs/catalog.md)."""
    if configured:
        return f"`calibration:` of repo {name} in assets/repos.yaml"
    return (f"`calibration:` of a new entry for this checkout (`path: {path}`) in assets/repos.yaml (this checkout "
            f"has none; with one it goes by the entry's name, and its estimates and quarantines kept under {name} "
            "stay there: `nightly calibrate --write` brings the estimates back from history)")


def night_calibration_where(night) -> str:
    """:func:`calibration_where` of the night's repo."""
    spec = night.repo_spec
    return calibration_where(spec.name, spec.path, spec.name in night.specs.repos)


def timeout_advice(night, plan: Plan, registered: Mapping[str, Test]) -> dict[str, str]:
    """What lengthens the timeout of each test :func:`timeout_warnings` names, from what `nightly calibrate`
    would propose for it (the same policy, history and est_time in force): `nightly calibrate` only where
    it raises est_time; else why it keeps it and what does (the repo's ``raise_on_timeout`` for a test that
    only timed out, the step guard's ``accept:`` list, or est_time raised by hand in its file).
    ``registered``: the tests with est_time as their files write it, which calibration starts from."""
    from pipelines.core.calibrate.policies import bucket_round, calibrate
    from pipelines.storage.history import successions

    limits = {a.test_id: a.timeout_s for a in plan.assignments}
    late = {tid: (median, source) for tid, median, _p90, source in plan.expected if 0 < limits.get(tid, 0) < median}
    tests = [registered[tid] for tid in late if tid in registered]
    if not tests:
        return {}
    spec = night.repo_spec
    estimates = calibrate(tests, night.history_at_start, spec.policy, spec.policy_params,
                          successions=successions(night.history), in_force=night.in_force(tests))
    raises = bool(spec.policy_params.get("raise_on_timeout"))
    where = night_calibration_where(night)
    by_id = {t.id: t for t in tests}
    out = {}
    for e in estimates:
        t, (median, source) = by_id[e.test_id], late[e.test_id]
        base = e.current if e.in_force is None else e.in_force
        if e.proposed > base:
            out[e.test_id] = f"run `nightly calibrate` (it proposes est_time {e.proposed} s; --write applies it)"
        elif e.held is not None:
            out[e.test_id] = (f"`nightly calibrate` holds its proposal of {e.held} s for acceptance (a step past "
                              f"max_step_factor); add {e.test_id} to `accept:` in {where}")
        elif source == "timeouts" and not raises and t.fmt != "template":
            # what raise_on_timeout would set: the bucket of 1.25x the kill, as policies._timeout_raise
            need = bucket_round(math.ceil(1.25 * median))
            out[e.test_id] = (f"`nightly calibrate` keeps est_time {seconds(base)}: the repo's calibration policy "
                              f"({spec.policy}) does not raise est_time after a timeout; set `raise_on_timeout: "
                              f"true` in {where}, or raise est_time in {t.path} by hand (e.g. to {need} s)")
        else:
            why = e.reason.split(";")[0].split(" (")[0]
            by_hand = f"; raise est_time in {t.path} by hand" if t.fmt != "template" else ""
            out[e.test_id] = f"`nightly calibrate` keeps est_time {seconds(base)} ({why}){by_hand}"
    return out


def _why_unplanned(t: Test | None, pools: Sequence) -> str:
    from pipelines.core.plan.planner import unplanned_reason

    if t is not None and pools:
        return unplanned_reason(t, pools)
    gpus = f", or its nodes have fewer than {t.gpus} GPUs" if t is not None and t.gpus > 1 else ""
    return f"no pool runs its hardware{gpus}"


def plan_json(plan: Plan, pools, tests: dict[str, Test], skipped, catalog: Catalog, static=None,
              left_out: Sequence[tuple[Test, str]] = (), advice: Mapping[str, str] | None = None,
              warnings: Sequence[str] = ()) -> dict:
    """The plan as ``nightly plan --json`` prints it; ``warnings``: what the text form says on stderr
    before it (estimates that could not be read), with the tests that will time out after them."""
    shapes = {p.name: p for p in pools}
    expected = {tid: (median, p90, source) for tid, median, p90, source in plan.expected}
    notes = dict(plan.duration_notes)
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
                         "expected_basis": notes.get(a.test_id, ""),
                         "path": tests[a.test_id].path if a.test_id in tests else ""} for a in plan.ordered()],
        "unplanned": [{"test_id": tid, "hardware": hardware_text(tests.get(tid)),
                       "reason": _why_unplanned(tests.get(tid), pools)} for tid in plan.unplanned],
        "skipped": [{"test_id": t.id, "reason": why} for t, why in skipped],
        "problems": [str(p) for p in catalog.problems],
        "left_out": [{"test_id": t.id, "reason": why} for t, why in left_out],
        "will_time_out": (late := will_time_out(plan, advice)),
        "warnings": [*warnings, *map(timeout_line, late)],
    }
    if static:
        sh, splan = static.shards, static.plan
        out["static_shards"] = {
            "makespan_s": splan.makespan_s, "basis": "expected_s" if plan.expected else "est_time",
            "est_makespan_s": float(_est_makespan(sh)), "gpus": shards_gpus(sh), "shards": _shards_json(sh)}
        if static.calibrated:
            out["static_shards"]["calibrated_shards"] = _shards_json(static.calibrated)
        out["static_shards"]["not_shown"] = [{"suite": suite, "reason": why} for suite, why in static.not_shown]
    return out


def _seconds(x: float) -> int | float:
    """A shard's est_time sum as the files give it: whole seconds stay whole, SGLang's ``45.2 + 40`` is 85.2."""
    return int(x) if float(x).is_integer() else round(x, 3)


def _shards_json(sh: Shards) -> list[dict]:
    """``shard`` is the framework's ``--auto-partition-id`` (0-based), ``est_s`` the sum of its est_time."""
    return [{"suite": s, "shard": k, "tests": [t.id for t in shard], "est_s": _seconds(shard_sum(shard))}
            for s, ss in sh.items() for k, shard in enumerate(ss)]


def shard_lines(sh: Shards) -> list[str]:
    """One line per shard, numbered as the framework's runner numbers it: ``1/2`` is ``--auto-partition-id 0``."""
    return [f"    {suite} shard {k + 1}/{len(ss)} (--auto-partition-id {k}): {_seconds(shard_sum(shard)):>6}s  "
            f"{', '.join(t.id for t in shard)}" for suite, ss in sh.items() for k, shard in enumerate(ss)]


def _est_makespan(sh) -> int | float:
    """The static shards' makespan on raw est_time (the framework's own figure, padded by 1.25)."""
    return _seconds(max((shard_sum(shard) for ss in sh.values() for shard in ss), default=0))


def shards_basis(plan: Plan) -> str:
    """The durations both sides of "vs static shards" are on (the same, or the figure measures the padding)."""
    if not plan.expected:
        return "both on est_time"
    return "both on each test's expected duration (median from history, else est_time / 1.25)"


def skipped_hardware_reason(hardware: str) -> str:
    """The words `nightly run` uses for a test the deployment skips (core/runset.resolve_run)."""
    return f"not run here: this deployment skips hardware {hardware!r} (skip_hardware)"


def hardware_text(t: Test | None) -> str:
    """The hardware a test names (its own field, else its suite's suffix); "" for no test."""
    from pipelines.core.plan import hardware_of

    return hardware_of(t) if t else ""


def hardware_summary(plan: Plan, pools, tests: dict[str, Test]) -> list[str]:
    """Unplanned tests per hardware with the pool (or alias) to add, and aliases assumed onto the default pool."""
    from pipelines.core.plan.cluster import pool_hardware
    from pipelines.core.plan.planner import too_wide

    lines: list[str] = []
    by_hw: dict[str, list[Test]] = {}
    wide: list[tuple[Test, str]] = []
    for tid in plan.unplanned:
        t = tests.get(tid)
        why = too_wide(t, pools) if t is not None else None
        if why:
            wide.append((t, why))
        elif t is not None:
            by_hw.setdefault(hardware_text(t) or "?", []).append(t)
    if wide:
        lines.append(f"\n  unplanned: {len(wide)} test(s) need more GPUs on one node than their pool's nodes have:")
        lines += [f"    {t.id}: {why}" for t, why in wide]
    if by_hw:
        lines.append(f"\n  unplanned: {sum(map(len, by_hw.values()))} test(s) need hardware no pool runs:")
        default = pools[0].name if pools else "POOL"
        for hw, ts in sorted(by_hw.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            gpus = max(t.gpus for t in ts)
            alias = f", or list {hw} as an alias of pool {default}" if all(t.backend == "cuda" for t in ts) else ""
            lines.append(f"    {hw:<14} {len(ts):>4} test(s), up to {gpus} GPUs: add a pool with `hardware: [{hw}]` in "
                         f"assets/cluster.yaml (or --pool {hw}=NODESxGPUS){alias}")
            lines += [f"      {t.id}" for t in ts[:5]] + ([f"      ... and {len(ts) - 5} more"] if len(ts) > 5 else [])
    listed = {hw for p in pools for hw in pool_hardware(p)}
    assumed: dict[tuple[str, str], int] = {}
    for a in plan.assignments:
        t = tests.get(a.test_id)
        hw = hardware_text(t) if t else ""
        if t and t.gpus and hw and hw not in listed:
            assumed[(hw, a.pool)] = assumed.get((hw, a.pool), 0) + 1
    for (hw, pool), n in sorted(assumed.items()):
        lines.append(f"\n  {n} test(s) of runner config {hw} (no GPU type) planned on pool {pool}, the first whose "
                     f"nodes hold them; list {hw} under another pool's `hardware:` in assets/cluster.yaml to move them")
    return lines


def _hms(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def duration_basis(plan: Plan) -> str:
    """Where the durations the plan and its prediction use come from: passing runs in history, the timeout
    of a test that only timed out, or est_time / 1.25."""
    if not plan.expected:
        return ""
    sources = [source for *_, source in plan.expected]
    guessed, timed_out = sources.count("fallback"), sources.count("timeouts")
    measured = len(sources) - guessed - timed_out
    if measured == len(sources):
        return f"every test's duration from its history ({measured} tests)"
    if guessed == len(sources):
        return ("every duration is est_time / 1.25: history has no passing run of these test files on this "
                "hardware yet, so the prediction sharpens after the first night")
    parts = [f"durations from history for {measured} tests"] if measured else []
    if timed_out:
        parts.append(f"at least their timeout for {timed_out} that timed out without a passing run")
    if guessed:
        parts.append(f"est_time / 1.25 for {guessed} without a passing run of their current file")
    return ", ".join(parts) + " (marked below)"


def duration_marks(plan: Plan) -> dict[str, str]:
    """Test id -> the row mark saying what its duration rests on, for each test not planned on its
    passing runs; none when every test is est_time / 1.25 without any run (the header says it once)."""
    notes = dict(plan.duration_notes)
    if not notes or (len(notes) == len(plan.expected) and all(n.startswith("no history") for n in notes.values())):
        return {}
    return {tid: f" ({note})" for tid, note in notes.items()}


def header_notes(plan: Plan, recent: str = "") -> list[str]:
    """The lines under a plan's header, for `nightly plan` and `nightly run` alike: where the durations
    come from, and ``recent``, the prediction error over the repo's recent nights ("" before any)."""
    basis = duration_basis(plan)
    return ([f"{basis}; timeouts stay on est_time"] if basis else []) + ([recent] if recent else [])


def recent_error(night) -> str:
    """How far the predictions were off over the repo's recent nights on this deployment (what the
    night report shows in full); "" before the first recorded night. A damaged record is a warning."""
    from pipelines.core.plan.accuracy import error_lines, prediction_error
    from pipelines.reporting.inputs import recent_predictions
    from pipelines.storage.state import StateError

    try:
        records, problems = recent_predictions(night.state, night.repo_spec.name, night.deployment.name)
    except StateError as exc:  # the plan stands without it
        print(f"warning: prediction error of recent nights not read: {exc}", file=sys.stderr)
        return ""
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    error = prediction_error(records)
    return error_lines(error)[0] if error.nights or error.left_out else ""


def left_out_by_flags(tests: Sequence[Test], selection, discovery) -> list[tuple[Test, str]]:
    """The tests ``selection``'s changed paths select that its other flags leave out, each with the
    flag that does and why: a changed registered file selects itself, so "no test" would be wrong."""
    from pipelines.core.select import Selection, in_cadence, select

    if selection.changed is None:
        return []
    kept = {t.id for t in select(tests, selection, discovery)}
    out = []
    for t in select(tests, Selection(changed=selection.changed), discovery):
        if t.id in kept:
            continue
        if selection.backend and t.backend != selection.backend:
            why = f"--backend {selection.backend} leaves it out (its backend is {t.backend})"
        elif selection.suites and t.suite not in selection.suites and not set(t.also_suites) & set(selection.suites):
            why = f"--suite {','.join(selection.suites)} leaves it out (its suite is {t.suite})"
        elif selection.labels and not set(selection.labels) & set(t.labels):
            why = (f"--labels {','.join(selection.labels)} leaves it out (its labels: "
                   f"{', '.join(t.labels) or 'none'})")
        elif not in_cadence(t, selection.cadence):
            why = cadence_reason(t, selection.cadence)
        else:
            continue
        out.append((t, why))
    return out


def cadence_reason(test: Test, cadence: str) -> str:
    """Why ``--cadence`` does not run ``test`` (``select.in_cadence`` is False), and which cadence does."""
    from pipelines.core.select import CADENCES, NIGHTLY_EXCLUDED_LABELS, in_cadence

    runs = [c for c in CADENCES if in_cadence(test, c)]
    then = f"; --cadence {' or '.join(runs)} runs it" if runs else ""
    if test.nightly_rule == "exclusive" and cadence in ("pr", "nightly"):
        return (f"--cadence {cadence} leaves it out: in this framework nightly runs exactly the nightly=True tests "
                f"and pr the others (it has nightly={test.nightly}){then}")
    if cadence == "pr" and test.nightly:
        return f"--cadence pr leaves it out: it is nightly=True, which pr skips{then}"
    long = sorted(set(test.labels) & NIGHTLY_EXCLUDED_LABELS)
    return (f"--cadence {cadence} leaves it out: its label {', '.join(long) or '(none)'} (framework M's runner "
            f"skips long and ft-long tests on {cadence}){then}")


def print_text(catalog: Catalog, plan: Plan, pools, tests, skipped, static, changed, recent: str = "",
               left_out: Sequence[tuple[Test, str]] = (), advice: Mapping[str, str] | None = None) -> None:
    """``recent``: the prediction error over the repo's recent nights (one line; "" before any);
    ``left_out``: tests the changed paths selected that other flags left out (:func:`left_out_by_flags`)."""
    shapes = {p.name: p for p in pools}
    spread = (f"; median of simulated nights {plan.predicted_median_s:.0f}s, p90 {plan.predicted_p90_s:.0f}s"
              if plan.predicted_median_s else "")
    print(f"plan for {catalog.repo}: {len(plan.assignments)} tests; predicted makespan {plan.makespan_s:.0f}s "
          f"({_hms(plan.makespan_s)}{spread}), lower bound {plan.lower_bound_s:.0f}s, ratio {plan.ratio:.3f}")
    for line in header_notes(plan, recent):
        print(f"  {line}")
    if changed is not None:
        nothing = not (plan.assignments or plan.unplanned or skipped)
        if left_out:
            print(f"  selected by {len(changed)} changed path(s); the other flags leave out {len(left_out)} test(s) "
                  "they select" + (" (nothing left to plan):" if nothing else ":"))
            for t, why in left_out:
                print(f"    {t.id}: {why}")
        else:
            print(f"  selected by {len(changed)} changed path(s)"
                  + ("; they select no test: nothing to plan" if nothing else ""))
        from pipelines.core.select import is_test_file, normalize_path

        listed = {normalize_path(t.path) for t in catalog.tests}
        for path in changed:
            if is_test_file(path, catalog.discovery) and normalize_path(path) not in listed:
                print(f"  {path}: no registration or template job lists this test file; it selects nothing "
                      "(list it in a job or register it to run it)")
    print(f"\n  {'pool':<10} {'nodes':>9} {'tests':>5} {'makespan':>9} {'lower bd':>9} {'ratio':>6} {'GPU util':>8}")
    for name, m, lb, u in plan.pools:
        n = sum(1 for a in plan.assignments if a.pool == name)
        shape = f"{shapes[name].nodes}x{shapes[name].gpus_per_node}"
        print(f"  {name:<10} {shape:>9} {n:>5} {m:>8.0f}s {lb:>8.0f}s {(m / lb if lb else 1):>6.3f} {u:>7.1%}")
    marks = duration_marks(plan)  # the header says it once on a first night: no row marks then
    for name, *_ in plan.pools:
        for node in range(shapes[name].nodes):
            rows = sorted((a for a in plan.assignments if a.pool == name and a.node == node),
                          key=lambda a: (a.start_s, a.priority))
            busy = max((a.end_s for a in rows), default=0.0)
            print(f"\n  {name}/node {node}: {len(rows)} tests, busy until {busy:.0f}s")
            print(f"    {'prio':>4} {'start':>7} {'end':>7} {'gpus':>4} {'timeout':>7}  test")
            for a in rows:
                t = tests.get(a.test_id)
                mark = (" (uncalibrated estimate)" if t and t.uncalibrated else "") + marks.get(a.test_id, "")
                print(f"    {a.priority:>4} {a.start_s:>7.0f} {a.end_s:>7.0f} {a.gpus:>4} {a.timeout_s:>7}  {a.test_id}{mark}")
    late = timeout_warnings(plan, advice)
    if late:
        print()
        for line in late:
            print(f"  {line}")
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
        sh, splan = static.shards, static.plan
        raw = f" on this plan's durations, {_est_makespan(sh)}s of est_time (the shard sums below)" if plan.expected else ""
        print(f"\n  static shards (the framework's split, on the est_time in the test files): {shards_gpus(sh)} GPUs "
              f"held, makespan {splan.makespan_s:.0f}s{raw}")
        for line in shard_lines(sh):
            print(line)
        for suite, why in static.not_shown:
            print(f"    --shards {suite}: {why}")
        if static.calibrated:
            print("  on nightly-e2e's calibrated est_time instead (the split once the calibration's patch is applied "
                  "to the files; until then the framework's runner splits as above):")
            for line in shard_lines(static.calibrated):
                print(line)
        if splan.makespan_s:
            gpus = sum(p.nodes * p.gpus_per_node for p in pools if p.name in {a.pool for a in plan.assignments})
            print(f"  this plan: {plan.makespan_s:.0f}s on {gpus} GPUs "
                  f"({plan.makespan_s / splan.makespan_s - 1:+.1%} vs static shards; {shards_basis(plan)})")
