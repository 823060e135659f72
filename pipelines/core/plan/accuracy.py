"""How far the plan's predictions were from what happened, over recent nights.

A prediction a maintainer can trust is one whose error is shown next to it. Each night stores
what the plan predicted (makespan median and p90, each test's median) and what happened (the
makespan, each passed test's elapsed); this module turns the recent nights into a few figures:
the makespan's signed and absolute error, how often the night ended within the p90, and the
per-test error (typical and worst tests).

Only predictions from history measure the duration model. A test planned on ``est_time / 1.25``
(no passing run yet) is left out of the per-test error, and a night planned mostly that way (more
than half of its planned GPU-seconds) out of the makespan error, said with how many: the example's
first night (every test new, 64 s predicted against 28 s) once read "off by 72 %" for two weeks.
Records from before the sources were kept count as they did.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pipelines.core.model import Plan

#: nights the report looks back over
RECENT_NIGHTS = 14
#: a night more than this share of whose planned GPU-seconds were est_time / 1.25 is left out of the
#: makespan error: its prediction measured est_time's padding, not the duration model
MOSTLY_FALLBACK = 0.5


@dataclass(frozen=True)
class NightPrediction:
    """One night's predictions and outcome, as the night summary stores them."""

    night: str
    predicted_median_s: float
    predicted_p90_s: float
    actual_s: float
    #: (test_id, predicted median s, actual elapsed s) of each test that passed
    tests: tuple[tuple[str, float, float], ...] = ()
    #: (test_id, source) for each of ``tests``: where its prediction came from ("history", "timeouts",
    #: "fallback" = est_time / 1.25; ``Plan.expected``); () in records from before it was kept
    sources: tuple[tuple[str, str], ...] = ()
    #: share of the plan's GPU-seconds (planned duration x GPUs, a CPU test as one GPU) that were
    #: est_time / 1.25; 0.0 in records from before it was kept
    fallback_share: float = 0.0


@dataclass(frozen=True)
class PredictionError:
    """The error of the predictions over ``nights`` recent nights (0 when there were none)."""

    nights: int
    #: mean of (predicted median - actual) / actual: > 0 predicts long
    makespan_bias: float
    #: mean of |predicted median - actual| / actual
    makespan_error: float
    #: nights whose actual makespan was at most the predicted p90
    within_p90: int
    #: per-test |log(predicted / actual)| turned back into a ratio - 1: the median over all tests
    test_error: float
    tests: int
    #: (test_id, mean |error| as a ratio - 1, runs) of the worst-predicted tests, worst first
    worst: tuple[tuple[str, float, int], ...] = ()
    #: recent nights left out of the makespan error: planned mostly on est_time / 1.25 (MOSTLY_FALLBACK)
    left_out: int = 0
    #: per-test predictions left out of the per-test error: est_time / 1.25, not history
    fallback_tests: int = 0


def night_record(night: str, plan: Plan, actual_makespan_s: float,
                 elapsed_passed: Mapping[str, float]) -> NightPrediction:
    """The record to store for a night planned with durations: ``elapsed_passed`` maps the
    test id of each passed attempt to its elapsed seconds (other outcomes say nothing)."""
    expected = {tid: med for tid, med, *_ in plan.expected}
    source = {tid: src for tid, *_, src in plan.expected}
    tests = tuple((tid, expected[tid], float(e)) for tid, e in sorted(elapsed_passed.items())
                  if tid in expected and expected[tid] > 0 and e > 0)
    planned = [((a.end_s - a.start_s) * max(a.gpus, 1), source.get(a.test_id)) for a in plan.assignments]
    total = sum(gpu_s for gpu_s, _ in planned)
    guessed = sum(gpu_s for gpu_s, src in planned if src == "fallback")
    return NightPrediction(night, plan.predicted_median_s, plan.predicted_p90_s, float(actual_makespan_s), tests,
                           tuple((tid, source[tid]) for tid, *_ in tests),
                           round(guessed / total, 6) if total > 0 else 0.0)


def record_to_json(r: NightPrediction) -> dict:
    """The night summary's ``prediction`` entry (plain JSON types)."""
    source = dict(r.sources)
    return {"night": r.night, "predicted_median_s": r.predicted_median_s, "predicted_p90_s": r.predicted_p90_s,
            "actual_s": r.actual_s, "fallback_share": r.fallback_share,
            "tests": [{"test_id": t, "predicted_s": p, "actual_s": a, **({"source": source[t]} if t in source else {})}
                      for t, p, a in r.tests]}


#: ``FILE:LINE`` of a field of a night record, by its path in the record (``("prediction", "tests", 3,
#: "actual_s")``): the caller knows the file and its text, this pure module only the field
Locate = Callable[[tuple], str]


def record_from_json(d: dict, where: str | Locate) -> NightPrediction:
    """Read back :func:`record_to_json`; ``where`` locates a bad field: one place for every field
    (``summary.json:1``), or a :data:`Locate` that gives each field its own line."""
    locate: Locate = where if callable(where) else (lambda _path: where)
    fix = "rewrite the night's summary or drop its prediction entry"
    if not isinstance(d, dict):
        raise ValueError(f"{locate(('prediction',))}: prediction: expected an object with predicted_median_s, "
                         f"predicted_p90_s, actual_s and tests, got {d!r:.60}; {fix}")
    if not isinstance(d.get("tests") or [], list):
        raise ValueError(f"{locate(('prediction', 'tests'))}: prediction.tests: expected a list of {{test_id, "
                         f"predicted_s, actual_s}}, got {d['tests']!r:.60}; {fix}")

    def num(obj: dict, key: str, at: tuple) -> float:
        v = obj.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{locate((*at, key))}: {_field((*at, key))}: {v!r} is not a number of seconds >= 0; "
                             f"{fix}")
        return float(v)

    tests, sources = [], []
    for i, t in enumerate(d.get("tests") or []):
        at = ("prediction", "tests", i)
        if not isinstance(t, dict) or not isinstance(t.get("test_id"), str):
            raise ValueError(f"{locate((*at, 'test_id') if isinstance(t, dict) else at)}: {_field((*at, 'test_id'))}: "
                             "missing or not a string; each entry needs test_id, predicted_s and actual_s")
        tests.append((t["test_id"], num(t, "predicted_s", at), num(t, "actual_s", at)))
        if "source" in t:  # kept since the per-test error counts only predictions from history
            if not isinstance(t["source"], str):
                raise ValueError(f"{locate((*at, 'source'))}: {_field((*at, 'source'))}: {t['source']!r:.60} is not "
                                 f"text (history, timeouts or fallback); {fix}")
            sources.append((t["test_id"], t["source"]))
    top = ("prediction",)
    share = num(d, "fallback_share", top) if "fallback_share" in d else 0.0  # older records: counted, as they were
    if share > 1:
        raise ValueError(f"{locate((*top, 'fallback_share'))}: prediction.fallback_share: {share!r} is not a share "
                         f"from 0 to 1; {fix}")
    return NightPrediction(str(d.get("night", "")), num(d, "predicted_median_s", top),
                           num(d, "predicted_p90_s", top), num(d, "actual_s", top), tuple(tests), tuple(sources),
                           share)


def _field(path: tuple) -> str:
    """``prediction.tests[3].actual_s``: a field as the problem names it."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def recorded_predictions(summaries: Iterable[Mapping], deployment: str | None = None,
                         locate: Callable[[Mapping], Locate] | None = None
                         ) -> tuple[list[NightPrediction], list[str]]:
    """The ``prediction`` entries of the whole nights among ``summaries`` (night summaries, any order)
    run on ``deployment`` (None: any), and a located problem for each damaged entry, which is left out.
    ``locate(summary)`` says where each field of that summary is (its file and line, read by the
    caller); without it a problem names ``nights/<night>.json:1``.

    A partial (``running``) or interrupted night is left out: its makespan is how long the run had
    gone, not the night the plan predicted. A night run with extra environment (``env``: ``nightly run
    --env``, a run's ``env_from``; failure injection, debugging) is left out too: a ``MINIRL_HANG`` kill
    or a 4x slower ``CUDA_LAUNCH_BLOCKING=1`` night says nothing of the plan, as it is no evidence for
    calibration or the duration model either. Another deployment's pools make another prediction. A
    record without a deployment (an older version) counts."""
    records: dict[str, NightPrediction] = {}
    problems: list[str] = []
    for s in summaries:
        entry = s.get("prediction")
        if entry is None or s.get("status", "finished") != "finished" or s.get("interrupted") is True:
            continue
        if s.get("env"):
            continue
        if deployment and s.get("deployment") not in (None, "", deployment):
            continue
        night = str(s.get("night", ""))
        try:
            r = record_from_json(entry, locate(s) if locate is not None else f"nights/{night}.json:1")
        except ValueError as exc:
            problems.append(f"{exc}; left out of the prediction error")
            continue
        records[r.night or night] = r
    return list(records.values()), problems


def prediction_error(records: Sequence[NightPrediction], recent: int = RECENT_NIGHTS,
                     worst: int = 5) -> PredictionError:
    """The error over the ``recent`` latest nights (by ``night``, which sorts by date) that had
    a prediction; nights planned without durations (predicted 0) are skipped. Of those, a night
    planned mostly on est_time / 1.25 (``fallback_share`` over MOSTLY_FALLBACK) is left out of the
    makespan error and counted in ``left_out``; the per-test error, over the same nights, counts
    only predictions from history (a test's ``fallback`` prediction is counted in ``fallback_tests``)."""
    window = sorted((r for r in records if r.predicted_median_s > 0 and r.actual_s > 0), key=lambda r: r.night)[-recent:]
    used = [r for r in window if r.fallback_share <= MOSTLY_FALLBACK]
    per_test: dict[str, list[float]] = {}
    guessed = 0
    for r in window:
        source = dict(r.sources)
        for tid, pred, actual in r.tests:
            if source.get(tid) == "fallback":
                guessed += 1
            elif pred > 0 and actual > 0:
                per_test.setdefault(tid, []).append(abs(math.log(pred / actual)))
    every = [e for es in per_test.values() for e in es]
    ranked = sorted(((tid, math.exp(statistics.fmean(es)) - 1, len(es)) for tid, es in per_test.items()),
                    key=lambda x: (-x[1], x[0]))
    rel = [(r.predicted_median_s - r.actual_s) / r.actual_s for r in used]
    return PredictionError(
        nights=len(used),
        makespan_bias=statistics.fmean(rel) if rel else 0.0,
        makespan_error=statistics.fmean(abs(x) for x in rel) if rel else 0.0,
        within_p90=sum(r.actual_s <= r.predicted_p90_s for r in used),
        test_error=math.exp(statistics.median(every)) - 1 if every else 0.0,
        tests=len(per_test),
        worst=tuple(ranked[:worst]),
        left_out=len(window) - len(used),
        fallback_tests=guessed,
    )


def error_lines(e: PredictionError) -> list[str]:
    """The report's lines: what a maintainer reads next to tonight's prediction."""
    if not e.nights and not e.left_out:
        return ["prediction error: no night with a prediction yet"]
    why = (f"{e.left_out} night(s) left out: planned mostly on est_time / 1.25 (more than half of their GPU-seconds "
           "from tests without a passing run yet), which measures est_time's padding, not the prediction")
    if not e.nights:
        lines = [f"prediction error: no night planned from history yet; {why}"]
    else:
        lines = [
            f"prediction error over the last {e.nights} night(s): makespan off by {e.makespan_error:.0%} on average "
            f"({'long' if e.makespan_bias > 0 else 'short'} by {abs(e.makespan_bias):.0%}), "
            f"within the p90 on {e.within_p90}/{e.nights}" + (f"; {why}" if e.left_out else ""),
        ]
    if e.tests:
        lines.append(f"per test: typical error {e.test_error:.0%} over {e.tests} test(s); worst: "
                     + ", ".join(f"{tid} {err:.0%} ({n} run{'s' if n != 1 else ''})" for tid, err, n in e.worst)
                     + (f"; {e.fallback_tests} prediction(s) from est_time / 1.25 left out" if e.fallback_tests else ""))
    return lines
