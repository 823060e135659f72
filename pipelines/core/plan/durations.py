"""How long each test is expected to take tonight: a median and a spread, from history.

est_time is padded on purpose (max passing elapsed x 1.25, rounded up to a bucket) because it
sets the timeout. Ordering tests and predicting the night from that padded figure makes every
prediction long and hides what history knows, so the planner uses this model instead and
timeouts stay on est_time.

Each test's passing, uncapped samples of its current file digest on the hardware it is planned on
(for a test that names no GPU type, its pool's: ``on_hardware``), from nights
without extra environment (the same evidence calibration uses, including digests calibrate's own est_time rewrites led from) are fitted as a lognormal: the median is the geometric mean of the
newest samples and the spread (``sigma``, of log duration) is shrunk towards the spread pooled
over all tests with history, so two or three samples do not claim a precision they lack. The
spread is predictive: it includes the uncertainty of the median itself (``sigma^2 (1 + 1/n)``).
A test without such samples but whose current revision timed out (capped runs, the same filters)
is expected to run at least until its timeout again: the longest capped elapsed, with the pooled
spread, marked ``timeouts``. A test with neither falls back to ``est_time / 1.25`` (undoing the
padding) with a wide spread, marked ``fallback`` (also when its runs only failed: a failure ends
early and says nothing of how long a pass takes; ``failed`` counts them for the plan's words).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pipelines.core.calibrate.guards import screen_relative, screen_samples
from pipelines.core.calibrate.lineage import Lineage, Succession
from pipelines.core.calibrate.policies import GUARDS, plain
from pipelines.core.model import Sample, Test

#: the calibration rule's padding, undone for tests without history
PADDING = 1.25
#: spread assumed when no test has two usable samples (lognormal sigma of one run)
PRIOR_SIGMA = 0.25
#: spread of a fallback: est_time is a padded maximum or a hand-written guess, not a measurement
FALLBACK_SIGMA = 0.5
#: how many samples' worth of weight the pooled spread has against a test's own spread
PRIOR_WEIGHT = 2.0
#: newest samples used per test (older runs of the same digest still count, up to this many)
MAX_SAMPLES = 15
#: the shortest median the model gives (a fallback's floor too): sub-second runs plan as one second
MIN_MEDIAN_S = 1.0
#: standard normal quantile of 0.9
Z90 = 1.2815515655446004


@dataclass(frozen=True)
class Duration:
    """Expected duration of one test: lognormal with this median and ``sigma`` (of log seconds)."""

    test_id: str
    median_s: float
    sigma: float
    #: runs the figure rests on: passing runs ("history"), timed-out runs ("timeouts"), 0 ("fallback")
    samples: int
    #: "history" (fitted from passing runs), "timeouts" (no passing run, timed out: at least the capped
    #: elapsed) or "fallback" (est_time / 1.25: no passing or timed-out run of the test's current file)
    source: str
    #: failed runs of the current file among the newest without a pass ("timeouts" and "fallback" only)
    failed: int = 0

    @property
    def p90_s(self) -> float:
        return self.quantile(Z90)

    @property
    def note(self) -> str:
        """What the figure rests on when it is not the test's passing runs, in the plan's words ("" for history)."""
        if self.source == "timeouts":
            runs = self.samples + self.failed
            last = "its last run" if runs == 1 else f"its last {runs} runs"
            return (f"timed out in {last}: at least {self.median_s:.0f} s" if not self.failed
                    else f"timed out in {self.samples} of {last}, never passed: at least {self.median_s:.0f} s")
        if self.source == "fallback":
            return (f"no passing run ({self.failed} failed): est_time / {PADDING:g}" if self.failed
                    else f"no history: est_time / {PADDING:g}")
        return ""

    def quantile(self, z: float) -> float:
        """The duration ``z`` standard deviations of log time above the median."""
        return self.median_s * math.exp(z * self.sigma)


def fallback(test: Test, sigma: float = FALLBACK_SIGMA, failed: int = 0) -> Duration:
    """``est_time / 1.25``: the padding undone, nothing measured (at least one second); ``failed``: the
    failed runs of its current file (a failure ends early: its elapsed is no duration)."""
    return Duration(test.id, max(MIN_MEDIAN_S, test.est_time / PADDING), sigma, 0, "fallback", failed)


def usable(test: Test, samples: Iterable[Sample], lineage: Lineage | None = None,
           newest: int | None = None, hardware: str | None = None) -> list[float]:
    """Elapsed seconds of the test's passed, uncapped runs of its current digest (or one
    calibrate's est_time rewrite led from, per ``lineage``) on its hardware, from nights without
    extra environment (calibration's ``plain``: an ``--env`` night's durations are not the test's),
    that calibration would find plausible (its ``screen_samples`` and ``screen_relative`` with the
    default guards: not marked, not over a day, not ten times off the test's other runs), oldest
    first (by start time, then stored order); ``newest``: only the last so many, as calibration's window;
    ``hardware``: the hardware it is planned on (:func:`on_hardware`), default its own."""
    window = _newest(test, samples, lineage, newest,
                     lambda s: s.outcome == "passed" and not s.capped and s.elapsed_s > 0, hardware)
    kept, _ = screen_relative(window, GUARDS)
    return [s.elapsed_s for s in kept]


def on_hardware(test: Test, samples: Iterable[Sample], hardware: str | None = None) -> list[Sample]:
    """The test's runs on ``hardware`` (default its own): the pool's hardware for a test that names
    no GPU type (``plan.cluster.ran_on``). Its runs recorded before samples were keyed by the pool
    (hardware as registered, e.g. "") count as that hardware's until the test has a run keyed by it:
    most nights ran on one deployment, and the first run on the pool's hardware replaces them."""
    mine = [s for s in samples if s.test_id == test.id]
    if hardware is None or hardware == test.hardware:
        return [s for s in mine if s.hardware == test.hardware]
    keyed = [s for s in mine if s.hardware == hardware]
    return keyed or [s for s in mine if s.hardware == test.hardware]


def _newest(test: Test, samples: Iterable[Sample], lineage: Lineage | None, newest: int | None,
            wanted: Callable[[Sample], bool], hardware: str | None = None) -> list[Sample]:
    """The ``wanted`` runs of the test's current digest (or its lineage) on ``hardware``
    (:func:`on_hardware`), from nights without extra environment, that calibration's
    ``screen_samples`` keeps, oldest first (by start time, then stored order); ``newest``: only the
    last so many."""
    digests = (lineage or Lineage()).same_revision(test.sha256)
    mine = [s for s in plain(on_hardware(test, samples, hardware)) if s.sha256 in digests and wanted(s)]
    plausible, _ = screen_samples(mine, GUARDS)
    order = sorted(range(len(plausible)), key=lambda i: (plausible[i].started_at, i))
    return [plausible[i] for i in order][-newest:] if newest else [plausible[i] for i in order]


def unfinished(test: Test, samples: Iterable[Sample], lineage: Lineage | None = None,
               newest: int | None = None, hardware: str | None = None) -> tuple[list[float], int]:
    """For a test without a usable passing run: (elapsed of its timed-out runs, how many failed), among
    the newest ``newest`` runs of its current digest on its hardware from nights without extra
    environment that ended in a timeout or a failure (as :func:`usable` picks its passes; marked
    samples and those over the ceiling left out). A timed-out run's elapsed is its timeout: the test ran at least that long."""
    window = _newest(test, samples, lineage, newest, lambda s: s.capped or s.outcome in ("timed_out", "failed"),
                     hardware)
    timeouts = [s.elapsed_s for s in window if (s.capped or s.outcome == "timed_out") and s.elapsed_s > 0]
    return timeouts, sum(1 for s in window if not s.capped and s.outcome == "failed")


def duration_model(tests: Iterable[Test], samples: Iterable[Sample], *, max_samples: int = MAX_SAMPLES,
                   prior_sigma: float = PRIOR_SIGMA, prior_weight: float = PRIOR_WEIGHT,
                   fallback_sigma: float = FALLBACK_SIGMA,
                   successions: Iterable[Succession] = (),
                   hardware: Mapping[str, str] | None = None) -> dict[str, Duration]:
    """Test id -> Duration for every test, from ``samples`` (any mix of tests, digests, hardware);
    ``successions``: the history store's record of calibrate's est_time rewrites; ``hardware``: test id
    -> the hardware it is planned on (``plan.cluster.ran_on``; default each test's own)."""
    on = hardware or {}
    tests = list(tests)
    lineage = Lineage.of(successions)
    by_test: dict[str, list[Sample]] = {}
    for s in samples:
        by_test.setdefault(s.test_id, []).append(s)
    logs = {t.id: [math.log(e) for e in usable(t, by_test.get(t.id, ()), lineage, max_samples, on.get(t.id))]
            for t in tests}
    pooled = pooled_sigma(logs.values(), prior_sigma)
    out = {}
    for t in tests:
        xs = logs[t.id]
        if not xs:  # no passing run: at least its timeout if it timed out, else est_time / 1.25
            timeouts, failed = unfinished(t, by_test.get(t.id, ()), lineage, max_samples, on.get(t.id))
            out[t.id] = (Duration(t.id, max(MIN_MEDIAN_S, max(timeouts)), pooled, len(timeouts), "timeouts", failed)
                         if timeouts else fallback(t, fallback_sigma, failed))
            continue
        n = len(xs)
        mean = sum(xs) / n
        var = (prior_weight * pooled ** 2 + _ss(xs)) / (prior_weight + n - 1)
        out[t.id] = Duration(t.id, max(MIN_MEDIAN_S, math.exp(mean)), math.sqrt(var * (1 + 1 / n)), n, "history")
    return out


def pooled_sigma(log_groups: Iterable[list[float]], default: float = PRIOR_SIGMA) -> float:
    """Spread of one run around its test's median, pooled over every test with two or more
    samples (weighted by degrees of freedom); ``default`` when no test has two."""
    ss = df = 0.0
    for xs in log_groups:
        if len(xs) > 1:
            ss += _ss(xs)
            df += len(xs) - 1
    return math.sqrt(ss / df) if df else default


def _ss(xs: list[float]) -> float:
    """Sum of squared deviations from the mean (plain floats: statistics' exact sums are slow)."""
    mean = sum(xs) / len(xs)
    return sum((x - mean) ** 2 for x in xs)


def medians(tests: Iterable[Test], model: Mapping[str, Duration] | None) -> dict[str, Duration]:
    """The model's entry for each test, a fallback where the model has none."""
    model = model or {}
    return {t.id: model.get(t.id) or fallback(t) for t in tests}
