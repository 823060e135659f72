"""What the dispatcher expects while the night runs: predicted ends and the head's reservation.

The plan's durations (``Plan.expected``: median and p90 per test, or est_time for a plan made
without history) are the starting point. Two things move them as the night goes on:
- a running test's predicted end is its conditional median given the time it has already run
  (lognormal): a test past its median is expected to run on, not to end at once;
- the night's speed: finished tests' actual / expected ratios (geometric mean, shrunk towards 1
  by ``SPEED_PRIOR`` pseudo-tests), so a night where everything runs 20% slow is planned so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

from pipelines.core.model import Assignment, Plan
from pipelines.core.plan.durations import PRIOR_SIGMA, Z90

#: pseudo-tests at speed 1 the observed night speed is shrunk towards
SPEED_PRIOR = 4.0
#: a later test may take the head's reserved GPUs if it ends by the reservation at this quantile
#: (z of log time above the median: 0.674 = p75), so an overrun rarely delays the head
BACKFILL_Z = 0.674
#: a head test that cannot start waits this fraction of its expected duration before GPUs are
#: held for it: reserving at once leaves GPUs idle on predictions that noise often gets wrong
PATIENCE = 1.0
_NORMAL = NormalDist()


class LiveModel:
    """Expected durations, start times and the night's speed, for one DispatchQueue."""

    def __init__(self, plan: Plan):
        given = {tid: (med, p90) for tid, med, p90, *_ in plan.expected}
        self._median: dict[str, float] = {}
        self._sigma: dict[str, float] = {}
        for a in plan.assignments:
            med, p90 = given.get(a.test_id, (a.end_s - a.start_s, None))
            self._median[a.test_id] = max(float(med), 0.0)
            self._sigma[a.test_id] = (math.log(p90 / med) / Z90 if p90 is not None and med > 0 and p90 > med
                                      else (0.0 if p90 is not None else PRIOR_SIGMA))
        self._start: dict[str, float] = {}
        self._blocked: dict[str, float] = {}
        self._log_ratios = 0.0
        self._finished = 0

    def started(self, test_id: str, now: float) -> None:
        self._start[test_id] = now
        self._blocked.pop(test_id, None)

    def waited(self, test_id: str, now: float) -> float:
        """Seconds since the test was first found at the head of the queue unable to start."""
        return now - self._blocked.setdefault(test_id, now)

    def patience(self, test_id: str) -> float:
        return PATIENCE * self._median[test_id]

    def finished(self, test_id: str, now: float) -> None:
        elapsed = now - self._start.pop(test_id, now)
        med = self._median.get(test_id, 0.0)
        if elapsed > 0 and med > 0:
            self._log_ratios += math.log(elapsed / med)
            self._finished += 1

    def speed(self) -> float:
        """How much longer than expected tonight's tests take (1.0 until some have finished)."""
        return math.exp(self._log_ratios / (self._finished + SPEED_PRIOR))

    def predicted_end(self, test_id: str, now: float) -> float:
        """The running test's conditional median end, given it has run ``now - start`` seconds."""
        start = self._start.get(test_id, now)
        med, sigma = self._median[test_id] * self.speed(), self._sigma[test_id]
        elapsed = now - start
        if sigma <= 0 or med <= 0:
            return start + max(med, elapsed)
        done = _NORMAL.cdf(math.log(elapsed / med) / sigma) if elapsed > 0 else 0.0
        p = min(done + (1 - done) / 2, 1 - 1e-9)
        return start + med * math.exp(sigma * _NORMAL.inv_cdf(p))

    def ends_by(self, test_id: str, now: float, at: float) -> bool:
        """Whether a test started now is (at its p75) done by ``at``."""
        return now + self._median[test_id] * self.speed() * math.exp(BACKFILL_Z * self._sigma[test_id]) <= at

    def reservation(self, gpus: int, free: Sequence[int], running: Sequence[tuple[Assignment, int]],
                    now: float) -> tuple[int, float, int]:
        """(node, time, spare GPUs) where a test needing ``gpus`` is predicted to start first;
        spare = GPUs of that node free then beyond its need. (-1, inf, 0) if no node ever fits."""
        ends: dict[int, list[tuple[float, int]]] = {}
        for a, node in running:
            ends.setdefault(node, []).append((self.predicted_end(a.test_id, now), a.gpus))
        best = (-1, math.inf, 0)
        for k, f in enumerate(free):
            at = now
            for end, g in sorted(ends.get(k, ())):
                if f >= gpus:
                    break
                f += g
                at = max(at, end)
            if f >= gpus and at < best[1]:
                best = (k, at, f - gpus)
        return best
