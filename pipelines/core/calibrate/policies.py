"""Calibration policies: from measured passing durations to a proposed est_time.

Every policy sees the same evidence: passed, uncapped samples of the test's current file
revision on its hardware (its digest, or one calibrate's own est_time rewrite led from). Failed, timed-out, infra-error and capped samples say nothing about
how long the test takes; samples of another file revision are counted as stale and not used.
Samples of nights run with extra environment (``Sample.env``: ``--env``, a run's ``env_from``:
debugging, failure injection) are no evidence at all, for the policy, the timeout raise and the
release of an est_time in force alike: one such night would move est_time for good. Each
estimate's reason counts them. A pass far longer than the test's others counts for every policy
(only one far shorter is left out, see guards.py): est_time is a timeout, and bucket125's max or
p90's top rank without a run that really passed would kill the next such run.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pipelines.core.calibrate.guards import bound_proposal, screen_relative, screen_samples
from pipelines.core.calibrate.lineage import Lineage, Succession
from pipelines.core.model import MAX_EST_TIME_S, Estimate, Sample, Test, names_no_gpu_type

#: Defaults per policy; bucket125 looks at every sample of the current revision (framework M's rule).
#: ``raise_on_timeout`` (off by default): see :func:`_timeout_raise`.
#: Every policy also takes the poison guards in ``GUARDS`` (see pipelines.core.calibrate.guards).
GUARDS: dict[str, object] = {"max_est_time_s": MAX_EST_TIME_S, "max_step_factor": 4.0, "ceiling_s": None,
                             "outlier_factor": 10.0, "accept": ()}
DEFAULTS: dict[str, dict[str, object]] = {
    "bucket125": {"max_samples": None, "window_days": None, "min_samples": 1, "factor": 1.25,
                  "raise_on_timeout": False, **GUARDS},
    "p90": {"max_samples": 15, "window_days": 21, "min_samples": 3, "raise_on_timeout": False, **GUARDS},
    "median": {"max_samples": 15, "window_days": 21, "min_samples": 3, "raise_on_timeout": False, **GUARDS},
}


def bucket_round(raw: int) -> int:
    """Framework M's buckets: up to the next 10 s when <= 200 s, else the next 100 s. A raw of 0 (a
    sub-second pass the runner logs as ``elapsed=0``) is in the first bucket too: no est_time is 0 s."""
    step = 10 if raw <= 200 else 100
    return -(-max(raw, 1) // step) * step


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile: always one of the measured values, never an interpolation."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _ceil(x: float) -> int:
    return math.ceil(round(x, 6))


def _bucket125(values: list[float], p: Mapping) -> tuple[int, str]:
    """Framework M's rule on the elapsed its runner logs, rounded to whole seconds: a night's 8.209 s pass
    is the log's ``elapsed=8`` (8 x 1.25 = 10 s), not 10.26 -> 11 -> 20 s; so one run gives one est_time
    whether it was measured here or imported from the framework's own log."""
    top = max(values)
    logged = round(top)
    raw = _ceil(logged * float(p["factor"]))
    said = f"{top:g} s" if logged == top else f"{top:g} s ({logged} s as the runner logs it)"
    return bucket_round(raw), f"max {said} x {p['factor']:g} = {raw} s, rounded up to {bucket_round(raw)} s"


def _p90(values: list[float], p: Mapping) -> tuple[int, str]:
    v = percentile(values, 0.9)
    return _ceil(v), f"p90 {v:g} s"


def _median(values: list[float], p: Mapping) -> tuple[int, str]:
    v = statistics.median(values)
    return _ceil(v), f"median {v:g} s"


POLICIES: dict[str, Callable[[list[float], Mapping], tuple[int, str]]] = {
    "bucket125": _bucket125, "p90": _p90, "median": _median,
}

#: the least each policy proposes from any passing run, a 0 s one included (framework M logs whole
#: seconds: a sub-second CPU test passes with ``elapsed=0``): bucket125's first bucket (10 s), else a
#: whole second; never 0, which a framework M catalog refuses. The step guard counts a move up to it as
#: no step (guards.bound_proposal): a test registered at 1 s must be able to reach 10 s under bucket125.
SMALLEST: dict[str, int] = {"bucket125": bucket_round(1), "p90": 1, "median": 1}


def parse_time(value: str) -> datetime | None:
    """An ISO-8601 start time as an aware datetime (naive means UTC); None when absent or unreadable."""
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


#: a framework family's own calibration rule, used when a repo sets no policy (framework M's is bucket125):
#: SGLang takes p90 of the newest <= 16 passing samples within 7 days, at least 3
FAMILY_POLICY: dict[str, tuple[str, dict[str, object]]] = {
    "sglang": ("p90", {"max_samples": 16, "window_days": 7, "min_samples": 3}),
}


def default_policy(dialect: str) -> tuple[str, dict[str, object], str]:
    """(policy, params, note) for a repo whose spec sets no policy: its framework family's rule, said aloud."""
    if dialect not in FAMILY_POLICY:
        return "bucket125", {}, ""
    policy, params = FAMILY_POLICY[dialect]
    shown = ", ".join(f"{k}={v}" for k, v in params.items())
    return policy, dict(params), (f"calibration policy {policy} ({shown}): the SGLang family's rule; "
                                  "set calibration.policy in assets/repos.yaml to change")


#: the ``calibration:`` settings that are no one policy's rule (what calibration refuses to learn
#: from, which tests are accepted, the timeout raise): they hold whichever policy runs
POLICY_INDEPENDENT: tuple[str, ...] = (*GUARDS, "raise_on_timeout")


def repo_policy(spec, path, override: str | None = None) -> tuple[str, dict[str, object], str]:
    """(policy, params, note) a repo is calibrated with: the one its repos.yaml entry sets, else its
    framework family's (:func:`default_policy`, the dialect configured or detected from the
    checkout) with the entry's own parameters (an ``accept:`` list) on top. One rule for
    ``nightly calibrate``, the night's calibration and ``nightly report``.

    ``override`` (``nightly calibrate --policy``) replaces the policy and drops only that policy's
    window and sample parameters: the repo's guards, ``accept:`` list and ``raise_on_timeout``
    still hold, so a test accepted for the night is not held when calibrating by hand."""
    policy, params, note = _configured_policy(spec, path)
    if override is None or override == policy:
        return policy, params, note
    kept = {k: v for k, v in params.items() if k in POLICY_INDEPENDENT}
    dropped = ", ".join(f"{k}={v}" for k, v in params.items() if k not in POLICY_INDEPENDENT)
    note = (f"--policy {override} instead of the repo's {policy}"
            + (f"; not used: {policy}'s {dropped}" if dropped else "")
            + (f"; kept: {', '.join(kept)}" if kept else ""))
    return override, kept, note


def _configured_policy(spec, path) -> tuple[str, dict[str, object], str]:
    if spec is not None and spec.policy_explicit:
        return spec.policy, dict(spec.policy_params), ""
    dialect = getattr(spec, "dialect", "auto") or "auto"
    if dialect == "auto":
        from pipelines.core.catalog.detect import choose  # reads the checkout's registry module

        dialect = choose(path)[0].name if path is not None and path.is_dir() else "m"
    policy, params, note = default_policy(dialect)
    return policy, {**params, **(spec.policy_params if spec is not None else {})}, note


def policy_params(policy: str, params: Mapping | None) -> dict:
    """The policy's defaults overridden by ``params``; unknown names are errors that list the known ones."""
    if policy not in POLICIES:
        raise ValueError(f"calibration: policy: unknown policy {policy!r}; use one of {', '.join(POLICIES)}")
    merged = dict(DEFAULTS[policy])
    for key, value in (params or {}).items():
        if key not in merged:
            raise ValueError(f"calibration: {key}: not a parameter of policy {policy!r}; "
                             f"known: {', '.join(merged)}")
        merged[key] = value
    return merged


@dataclass(frozen=True)
class _Evidence:
    used: list[Sample]
    stale: int
    ignored: int
    old: int  # dated before the window
    beyond: int  # past the newest max_samples
    undated: int  # used without a start time (a log without timestamps), as the oldest in stored order
    outliers: list[str]


def _select(test: Test, samples: Sequence[Sample], p: Mapping, now: datetime, digests: frozenset[str]) -> _Evidence:
    current = [s for s in samples if s.sha256 in digests]
    passed = [s for s in current if s.outcome == "passed" and not s.capped]
    good, outliers = screen_samples(passed, p)
    kept = good
    if p.get("window_days") is not None:
        # a sample without a start time (a log without the GitHub timestamp prefix) is not known to be
        # old: it counts, as the oldest
        since = now - timedelta(days=float(p["window_days"]))
        kept = [s for s in good if (t := parse_time(s.started_at)) is None or t >= since]
    old = len(good) - len(kept)
    # Newest last: by start time, undated ones first, ties in stored order.
    order = sorted(range(len(kept)), key=lambda i: (parse_time(kept[i].started_at) or datetime.min.replace(tzinfo=UTC), i))
    kept = [kept[i] for i in order]
    before = len(kept)
    if p.get("max_samples") is not None:
        kept = kept[-int(p["max_samples"]):]
    beyond = before - len(kept)
    # only implausibly short passes: a pass far above the others is what a timeout must cover (guards.py)
    kept, far = screen_relative(kept, p, drop_long=False)
    undated = sum(1 for s in kept if parse_time(s.started_at) is None)
    return _Evidence(kept, len(samples) - len(current), len(current) - len(passed), old, beyond, undated,
                     outliers + far)


def _newest_kill(current: Sequence[Sample]) -> Sample | None:
    """The newest run of ``current`` (passed or timed out, by start time, undated ones oldest) when
    the timeout killed it, else None."""
    runs = [(parse_time(s.started_at) or datetime.min.replace(tzinfo=UTC), i, s) for i, s in enumerate(current)
            if s.outcome in ("passed", "timed_out")]
    if not runs:
        return None
    last = max(runs, key=lambda r: r[:2])[2]
    return last if last.outcome == "timed_out" else None


def _timeout_raise(current: list[Sample], proposed: int) -> tuple[int, str, Sample] | None:
    """A test whose newest run of this revision was killed by its timeout never yields a passing
    sample to calibrate from; it only says the test needs longer than that. Raise the estimate to
    the bucket of 1.25x the killed run's elapsed so the next timeout is about 1.56x longer."""
    last = _newest_kill(current)
    if last is None:
        return None
    raw = _ceil(last.elapsed_s * 1.25)
    floor = bucket_round(raw)
    if proposed >= floor:
        return None
    return floor, (f"raised: the newest run timed out after {last.elapsed_s:g} s, so 1.25 x that = {raw} s, rounded "
                   f"up to {floor} s"), last


def plain(samples: Sequence[Sample]) -> list[Sample]:
    """The samples of nights run without extra environment (``env == ""``): the only calibration
    evidence. A night with ``--env`` (``MINIRL_HANG``, ``CUDA_LAUNCH_BLOCKING``, a barrier) runs the
    tests as no plain night does; its durations and timeout kills are that night's, not the test's."""
    return [s for s in samples if not s.env]


def _estimate(test: Test, samples: Sequence[Sample], policy: str, p: Mapping, now: datetime,
              digests: frozenset[str], in_force: int | None = None) -> Estimate:
    kept = plain(samples)
    extra_env = len(samples) - len(kept)
    samples = kept
    ev = _select(test, samples, p, now, digests)
    values = [s.elapsed_s for s in ev.used]
    released = _released(test, [s for s in samples if s.sha256 in digests], values, p, in_force)
    if released:
        in_force = None  # judged from, and falling back to, the registered est_time
    keep = test.est_time if in_force is None else in_force  # what the next night plans with unless this moves it
    notes = []
    if ev.ignored:
        notes.append(f"{ev.ignored} failed/timed-out/infra samples ignored")
    if ev.old:
        notes.append(f"{ev.old} older than {p.get('window_days'):g} days")
    if ev.beyond:
        notes.append(f"{ev.beyond} beyond the newest {p.get('max_samples')}")
    if ev.undated:
        notes.append(f"{ev.undated} without a start time, used as the oldest")
    if ev.stale:
        notes.append(f"{ev.stale} stale (other " + ("revision of the file or its template entry)" if test.fmt == "template"
                                                    else "file revision)"))
    if ev.outliers:
        notes.append(f"{len(ev.outliers)} implausible left out")
    if extra_env:
        notes.append(f"{extra_env} from nights with extra environment ignored")
    stats = {}
    if values:
        stats = {"max_s": max(values), "p90_s": percentile(values, 0.9), "median_s": statistics.median(values)}
    k = int(p.get("min_samples") or 1)
    used = ev.used if len(values) >= k else []
    if not used:
        reason = f"too few samples: {len(values)} passed of the current file, {policy} needs {k}"
        proposed = keep
    else:
        proposed, how = POLICIES[policy](values, p)
        if proposed < SMALLEST[policy]:  # p90 or median of sub-second passes: 0 s is no est_time
            how += f", raised to {SMALLEST[policy]} s, the least {policy} proposes"
            proposed = SMALLEST[policy]
        reason = f"{policy}: {how} from {len(values)} passed"
        if released and proposed < test.est_time:  # killed at a lower est_time: not below the registered one
            proposed = test.est_time
    if released:
        reason = f"{reason}; {released}"
    # a template test's est_time is ours (framework S has none, and no per-test timeout to set by
    # hand): without the raise, a test longer than the first night's limit is killed every night
    raised = None
    if p.get("raise_on_timeout") or test.fmt == "template":
        plausible, _ = screen_samples([s for s in samples if s.sha256 in digests and s.outcome == "timed_out"], p)
        raised = _timeout_raise([s for s in samples if s.sha256 in digests and
                                 (s.outcome == "passed" or s in plausible)], proposed)
        if raised:
            # without passes the kill is the one sample used: "too few samples" beside samples=1 reads as a contradiction
            why = reason if used else (f"no {policy} proposal without it ({len(values)} passed of the current file, "
                                       f"needs {k})")
            proposed, reason = raised[0], f"{raised[1]}; {why}"
            used = [*used, raised[2]]
    if not used and not released:
        reason += "; keeps est_time"
    # a raise to what an observed timeout kill needs is bounded by that kill: never a poisoned number
    proposed, held, bound = bound_proposal(test, int(proposed), p, killed=bool(raised), in_force=in_force,
                                          smallest=SMALLEST[policy])
    if bound:
        reason = f"{reason}; {bound}"
    if notes:
        reason += " (" + "; ".join(notes) + ")"
    return Estimate(
        test_id=test.id, hardware=test.hardware, current=test.est_time, proposed=int(proposed),
        samples_used=len(used), reason=reason, stale_samples=ev.stale,
        sources=tuple(s.source for s in (used or ev.used)), held=held, outliers=tuple(ev.outliers),
        in_force=in_force, current_literal=_literal(test), **stats,
    )


def _literal(test: Test) -> float | None:
    """The file's est_time as written when it is not whole seconds and ``est_time`` is still it rounded up
    (a test whose est_time was replaced by a calibrated one has no literal to show)."""
    lit = test.est_literal
    return lit if lit is not None and math.ceil(lit) == test.est_time else None


def _released(test: Test, current: Sequence[Sample], values: Sequence[float], p: Mapping,
              in_force: int | None) -> str:
    """Why the calibrated est_time in force no longer holds ("" while it does): it is kept only while
    passing evidence for it is inside the policy's window, and a timeout kill while it is below the
    registered est_time releases it. Else a kept value outlives its evidence: calibrated down to
    300 s, a test that now takes 1900 s is killed every night, never passes again, and stays at 300 s."""
    if in_force is None:
        return ""
    if not values:
        window = "" if p.get("window_days") is None else f" in the last {float(p['window_days']):g} days"
        return (f"released the calibrated est_time {in_force} s in force: no passing sample{window}; back to the "
                f"registered est_time {test.est_time} s")
    kill = _newest_kill(current)
    if kill is not None and in_force < test.est_time:
        return (f"released the calibrated est_time {in_force} s in force: the newest run was killed at the timeout "
                f"after {kill.elapsed_s:g} s; judged from the registered est_time {test.est_time} s again, never "
                "below it")
    return ""


def calibrate(tests: Sequence[Test], samples: Sequence[Sample], policy: str = "bucket125",
              params: Mapping | None = None, now: datetime | None = None,
              successions: Iterable[Succession] = (),
              in_force: Mapping[tuple[str, str], int] | None = None) -> list[Estimate]:
    """One estimate per test, keyed by (test id, hardware), in the order of ``tests``; samples of a
    digest that ``successions`` lead to the test's current one count as current (see lineage.py).

    ``in_force``: per (test id, hardware), the est_time the night plans with when a calibration set
    it (the estimates file's, for the test's current file); the step guard judges from it and a held
    test, or one with too few samples, keeps it, but only while a passing sample for it is inside the
    policy's window and no timeout kill says a value below the registered one is too short
    (:func:`_released`). ``current`` stays the registered value (the file's literal, which the
    patch rewrites)."""
    in_force = in_force or {}
    lineage = Lineage.of(successions)
    p = policy_params(policy, params)
    now = now or datetime.now(UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    by_key: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    anywhere = runs_anywhere(tests)
    for s in samples:
        by_key[(s.test_id, anywhere.get(s.test_id, s.hardware))].append(s)
    return [_estimate(t, by_key.get((t.id, t.hardware), []), policy, p, now, lineage.same_revision(t.sha256),
                      in_force.get((t.id, t.hardware)))
            for t in tests]


def runs_anywhere(tests: Iterable[Test]) -> dict[str, str]:
    """Test id -> its registered hardware, for the tests that name no GPU type (``names_no_gpu_type``):
    their runs are recorded with the hardware of the pool they ran on, but their est_time is one
    literal whatever runs them, so it is calibrated from their runs on every hardware (the slowest
    must fit its timeout), as it was before runs were keyed by the pool."""
    return {t.id: t.hardware for t in tests if names_no_gpu_type(t)}


def estimates_by_id(estimates: Sequence[Estimate]) -> dict[str, int]:
    """Calibrated est_time per test id, for the planner; tests without enough evidence are absent."""
    return {e.test_id: e.proposed for e in estimates if e.samples_used}
