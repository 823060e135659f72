"""Across nights: per-test duration trends from history, and what changed since the last night.

Trends read the history store's samples in one pass (100 nights x 1,000 tests is 100,000 samples),
keeping each test's last attempt per run. Changes compare a night summary (the JSON each night
writes) with the nights before it: each test with the last night that ran it, whatever that night
selected; every field they read may be missing from older summaries.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median

from pipelines.core.model import Sample

#: what describes the environment a night ran in (a change there explains a lot): top-level fields,
#: and per pool under ``infra`` (the launcher's probe: image digest, driver, pod spec digest)
ENVIRONMENT_FIELDS = ("image_digest", "image", "driver")
INFRA_FIELDS = ("image_digest", "driver", "spec")


#: the night's extra environment (``--env``, a run's ``env_from``) as its record keeps it: the variable
#: names and a hash (``env_digest``), never the values
EXTRA_ENV = "extra environment"


def environment(summary: Mapping) -> dict[str, str]:
    """The night's environment as ``{"image_digest (h200)": "sha256:...", ...}``; {} when not recorded."""
    out = {f: str(summary[f]) for f in ENVIRONMENT_FIELDS if summary.get(f)}
    if summary.get("env"):
        out[EXTRA_ENV] = str(summary["env"])
    infra = summary.get("infra")
    for pool, probe in sorted(infra.items()) if isinstance(infra, Mapping) else ():
        if isinstance(probe, Mapping):
            out.update({f"{f} ({pool})": str(probe[f]) for f in INFRA_FIELDS if probe.get(f)})
    return out


@dataclass(frozen=True)
class TrendPoint:
    run_id: str
    started_at: str
    elapsed_s: float
    outcome: str
    #: the night's position in the window (0: its oldest night), the same for every test: a test first run
    #: in the window's second night starts at 1, and a night a test did not run is a gap. None: not known
    night: int | None = None


@dataclass(frozen=True)
class Trend:
    """One test's last attempt in each of the last nights it ran in, oldest first."""

    test_id: str
    points: tuple[TrendPoint, ...]
    #: how many nights the window holds (the x axis every test shares); 0: not known
    nights: int = 0

    @property
    def change(self) -> float | None:
        """Last passing duration over the median of the earlier passing ones (1.0 = unchanged)."""
        passed = [p.elapsed_s for p in self.points if p.outcome == "passed"]
        if len(passed) < 2 or median(passed[:-1]) <= 0:
            return None
        return passed[-1] / median(passed[:-1])


def duration_trends(samples: Sequence[Sample], test_ids: Sequence[str] | None = None,
                    last_nights: int = 14, nights: Sequence[str] | None = None) -> dict[str, Trend]:
    """Each test's trend over the last ``last_nights`` nights (infra errors and skips left out). Each point
    keeps its night's position in that window, so that every test's points line up by night.

    ``nights``: the run ids that count as nights, oldest first (the report passes its repo's night
    records): one history store serves every repo, so counting every run in it let other repos' runs
    push this repo's nights out of the window. None: every run in ``samples``, ordered by start."""
    wanted = None if test_ids is None else set(test_ids)
    start: dict[str, str] = {}
    last: dict[tuple[str, str], Sample] = {}
    for s in samples:  # a run starts at its earliest known start: a sample without one says nothing of when
        if s.started_at and (not start.get(s.run_id) or s.started_at < start[s.run_id]):
            start[s.run_id] = s.started_at
        else:
            start.setdefault(s.run_id, "")  # a run known only without times sorts first, as before
        if s.outcome not in ("passed", "failed", "timed_out") or (wanted is not None and s.test_id not in wanted):
            continue
        key = (s.run_id, s.test_id)
        old = last.get(key)
        if old is None or (s.attempt, s.started_at) >= (old.attempt, old.started_at):
            last[key] = s
    order = list(dict.fromkeys(nights)) if nights is not None else sorted(start, key=lambda r: (start[r], r))
    runs = order[-last_nights:] if last_nights else []
    rank = {r: i for i, r in enumerate(runs)}
    series: dict[str, list[tuple[int, Sample]]] = defaultdict(list)
    for (run_id, test_id), s in last.items():
        if run_id in rank:
            series[test_id].append((rank[run_id], s))
    return {t: Trend(t, tuple(TrendPoint(s.run_id, s.started_at, s.elapsed_s, s.outcome, night)
                              for night, s in sorted(xs, key=lambda x: x[0])), len(runs))
            for t, xs in series.items()}


def final_outcomes(summary: Mapping) -> dict[str, str]:
    """Each selected test's outcome: its last attempt's, or unplanned / not_run; skipped ones too."""
    last: dict[str, str] = {}
    for a in summary.get("attempts", ()):
        last[a["test_id"]] = a["outcome"]
    unplanned = set(summary.get("unplanned", ()))
    out = {t: last.get(t, "unplanned" if t in unplanned else "not_run") for t in summary.get("selected", ())}
    for t in summary.get("skipped", ()):
        out[t] = "skipped"
    for t, o in last.items():  # attempts of tests the summary did not list still count
        out.setdefault(t, o)
    return out


def est_times(summary: Mapping) -> dict[str, int]:
    """est_time per test as the night ran it (``est_time`` mapping, or ``tests`` records); {} when absent."""
    if isinstance(summary.get("est_time"), Mapping):
        return {k: int(v) for k, v in summary["est_time"].items()}
    return {t["id"]: int(t["est_time"]) for t in summary.get("tests", ()) if isinstance(t, Mapping) and "est_time" in t}


@dataclass(frozen=True)
class Comparison:
    """Before/after an environment change, over the tests both nights ran."""

    common: int
    passed_before: int
    passed_after: int
    #: median of (tonight / last night) elapsed over tests that passed both nights
    median_ratio: float | None


@dataclass(frozen=True)
class Changes:
    """Each test against the last earlier night that ran it; the environment against ``previous``."""

    #: the newest earlier night (the environment and the before/after comparison are against it)
    previous: str
    new_failures: tuple[str, ...] = ()
    still_failing: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()
    #: tests registered tonight but not at the last night of the same cadence that covered all of it, and
    #: the reverse; both empty unless both records cover every test of the cadence (``covered``)
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    #: (test, est_time last night, est_time tonight)
    est_time: tuple[tuple[str, int, int], ...] = ()
    #: (field, last night, tonight)
    environment: tuple[tuple[str, str, str], ...] = ()
    comparison: Comparison | None = None
    #: tests whose last run before tonight failed or hung and that have no attempt tonight (not selected,
    #: skipped, or never started: one a signal cut short, or an infra error, is in tonight's verdict as that)
    #: and that no whole-cadence night since has left out (deleted or renamed): still failing as far as anyone knows
    still_failing_not_run: tuple[str, ...] = ()


_BAD = ("failed", "timed_out")
#: outcomes that say how the test itself did (not_run, skipped, infra errors and interruptions do not)
_RAN = ("passed", "failed", "timed_out")
_FILTERS = ("labels", "suites", "pools", "tests")


def ran(summary: Mapping) -> set[str]:
    """The tests the night ran (passed, failed or hung: what "what changed" compares)."""
    return {t for t, o in final_outcomes(summary).items() if o in _RAN}


def covered(summary: Mapping) -> set[str] | None:
    """Every test registered for the night's cadence, as its record lists them (selected, skipped,
    unplanned), when its selection was the whole cadence (no labels, suites, pools or named tests);
    None when the record does not say (a pick, a narrowed run, an older record without ``selection``)."""
    selection = summary.get("selection")
    if not isinstance(selection, Mapping) or summary.get("cadence") in (None, "", "picked") or \
            any(selection.get(k) for k in _FILTERS):
        return None
    return {*summary.get("selected", ()), *summary.get("skipped", ()), *summary.get("unplanned", ())}


#: cadences that run every registered test (nightly leaves out ``long``, pr leaves out nightly-only tests)
_WHOLE_CADENCES = ("weekly", "release")


def _gone(test_id: str, ran_under: str | None, later: Sequence[tuple[str | None, set[str] | None]]) -> bool:
    """Whether a night after the one the test last ran in says it is no longer registered: one that
    covers its whole cadence (``later``: (cadence, :func:`covered`) per night) without listing it,
    where that cadence runs every test or is the one it last ran under (``ran_under``; a nightly
    night without a ``long`` test says nothing of that test)."""
    return any(c is not None and test_id not in c and cadence in (*_WHOLE_CADENCES, ran_under)
               for cadence, c in later)


def night_changes(summary: Mapping, earlier: Sequence[Mapping]) -> Changes | None:
    """What changed since the nights before (``earlier``, oldest first); None when there are none.

    Each test is compared with the last earlier night that ran it under the same extra environment
    (a failure injected with ``--env`` is not fixed by the plain night after it), so a night that selected fewer
    tests (a label, a UI pick) or was interrupted neither drops nor re-flags anything: a test merely
    not run tonight is not removed, not fixed, and its last failure is listed as still failing (not
    run tonight). A test with an attempt tonight did run, even one cut short by an interruption or ended by
    an infra error: the night's verdict counts it as that, and it is not counted again as not run tonight.
    Added and removed come only from two records that each cover their whole cadence.
    """
    if not earlier:
        return None
    previous = earlier[-1]
    ran_now = {t: o for t, o in final_outcomes(summary).items() if o in _RAN}
    last: dict[str, str] = {}  # each test's outcome in the last earlier night under tonight's env that ran it
    last_at: dict[str, int] = {}  # and that night's index in ``earlier``
    est_before: dict[str, int] = {}
    env = summary.get("env") or ""
    for i in range(len(earlier) - 1, -1, -1):
        night = earlier[i]
        for t, o in final_outcomes(night).items() if (night.get("env") or "") == env else ():
            if o in _RAN and t not in last:
                last[t], last_at[t] = o, i
        for t, v in est_times(night).items():
            est_before.setdefault(t, v)
    new_failures = tuple(t for t, o in ran_now.items() if o in _BAD and last.get(t) not in _BAD)
    still = tuple(t for t, o in ran_now.items() if o in _BAD and last.get(t) in _BAD)
    fixed = tuple(t for t, o in ran_now.items() if o == "passed" and last.get(t) in _BAD)
    now_all = covered(summary)
    before_all = next((c for night in reversed(earlier) if night.get("cadence") == summary.get("cadence")
                       and (c := covered(night)) is not None), None) if now_all is not None else None
    added = tuple(sorted(now_all - before_all)) if now_all is not None and before_all is not None else ()
    removed = tuple(sorted(before_all - now_all)) if now_all is not None and before_all is not None else ()
    since = [(night.get("cadence"), covered(night)) for night in (*earlier, summary)]
    tried = {a.get("test_id") for a in summary.get("attempts", ()) if isinstance(a, Mapping)}  # started tonight
    not_run = tuple(sorted(t for t, o in last.items() if o in _BAD and t not in tried and t not in removed
                           and not _gone(t, since[last_at[t]][0], since[last_at[t] + 1:])))
    est = tuple((t, est_before[t], v) for t, v in sorted(est_times(summary).items())
                if t in est_before and est_before[t] != v)
    env_now, env_before = environment(summary), environment(previous)
    changed = tuple((f, env_before.get(f, "-"), env_now.get(f, "-")) for f in dict.fromkeys([*env_before, *env_now])
                    if env_before.get(f) != env_now.get(f))
    return Changes(
        previous=str(previous.get("night", "")), new_failures=new_failures, still_failing=still, fixed=fixed,
        added=added, removed=removed, est_time=est, environment=changed,
        comparison=compare(summary, previous) if changed else None, still_failing_not_run=not_run,
    )


def _elapsed(summary: Mapping) -> dict[str, float]:
    out = {}
    for a in summary.get("attempts", ()):
        if a["outcome"] == "passed" and a.get("elapsed_s") is not None:
            out[a["test_id"]] = float(a["elapsed_s"])
    return out


def compare(summary: Mapping, previous: Mapping) -> Comparison:
    """Pass counts and the median duration ratio over the tests both nights ran."""
    now, before = final_outcomes(summary), final_outcomes(previous)
    common = sorted(t for t in now if t in before and now[t] not in ("skipped",) and before[t] not in ("skipped",))
    e_now, e_before = _elapsed(summary), _elapsed(previous)
    ratios = [e_now[t] / e_before[t] for t in common if t in e_now and e_before.get(t)]
    return Comparison(len(common), sum(1 for t in common if before[t] == "passed"),
                      sum(1 for t in common if now[t] == "passed"), median(ratios) if ratios else None)
