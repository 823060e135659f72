"""Poison guards: what calibration refuses to learn from, and how far it may move in one step.

One bad number must not set next night's timeouts: a log line claiming ``elapsed=1000000000s``
would otherwise become a 1.25e9 s est_time. Three guards, each reported, never silent:
- implausible samples (marked when stored, longer than ``ceiling_s``, or more than
  ``outlier_factor`` times shorter than the median of the test's other samples: a pass that did not
  really run) are left out. A pass far LONGER than the others is kept: est_time sets a timeout, and a
  run that really passed in 120 s proves the test can take that long (a cold cache); a timeout under
  it kills the next such pass. The ceiling and the step guard below are what stop a poisoned long
  number. (The planner's duration model screens both ways: its median is a typical night);
- no proposal goes above ``max_est_time_s``;
- a proposal moving the est_time in force (the last calibration's, else the registered one) by
  more than ``max_step_factor`` in one step is held for explicit acceptance (``accept: [test
  id]``), not applied, and that est_time stays in force (while it has evidence: see
  ``policies._released``); a ``raise_on_timeout`` raise is not
  (it is 1.25x a run the timeout killed, so bounded by that timeout: holding it would keep a
  placeholder est_time that is killed every night), and a step is counted from the policy's
  smallest proposal when the est_time in force is below it (bucket125 never proposes under 10 s:
  est_time 1 s -> 10 s is no step at all, while 1 s -> 60 s is x6 from 10 s and held; an est_time of
  0 counts from 1 s at least).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from pipelines.core.model import MAX_EST_TIME_S, Sample, Test


def _where(s: Sample) -> str:
    return s.source or s.run_id or s.started_at or "sample"


def screen_samples(samples: Sequence[Sample], p: Mapping) -> tuple[list[Sample], list[str]]:
    """Samples with a plausible duration (marked outliers and those over the ceiling left out),
    and one ``where: why`` per sample left out."""
    ceiling = float(p.get("ceiling_s") or p.get("max_est_time_s") or MAX_EST_TIME_S)
    kept, out = [], []
    for s in samples:
        if s.outlier:
            out.append(f"{_where(s)}: {s.outlier}")
        elif not 0 <= s.elapsed_s <= ceiling:
            out.append(f"{_where(s)}: elapsed {s.elapsed_s:g} s is outside 0..{ceiling:g} s")
        else:
            kept.append(s)
    return kept, out


def screen_relative(samples: Sequence[Sample], p: Mapping, drop_long: bool = True) -> tuple[list[Sample], list[str]]:
    """Samples within ``outlier_factor`` of the median of the test's other samples (of the
    evidence window), and one ``where: why`` per sample left out.

    ``drop_long=False`` (calibration) leaves out only the samples that far below: a pass far above
    the others really took that long, and an est_time (a timeout) proposed without it would kill the
    next one. Those are judged against the lower median of all the runs, so the long passes kept
    cannot make a typical majority look short (30, 30, 30, 600, 600 s keeps all five). The planner's
    duration model (a median of typical nights) screens both ways, each run against the others."""
    factor = float(p.get("outlier_factor") or 10.0)
    kept, out = list(samples), []
    if len(kept) < 3:  # with fewer, nobody can tell which of two values is the odd one
        return kept, out
    usable, values = [], [s.elapsed_s for s in kept]
    if drop_long:
        refs, what = medians_of_others(values), "median of the others"
    else:  # the long passes stay, so they must not raise the bar the typical runs are judged by
        refs, what = [statistics.median_low(values)] * len(values), "lower median of its runs"
    for s, median in zip(kept, refs, strict=True):
        if median > 0 and (s.elapsed_s < median / factor or (drop_long and s.elapsed_s > median * factor)):
            side = "below" if s.elapsed_s < median / factor else "above"
            out.append(f"{_where(s)}: elapsed {s.elapsed_s:g} s is far {side} the test's own history "
                       f"({what} {median:g} s, allowed x{factor:g})")
        else:
            usable.append(s)
    return usable, out


def medians_of_others(values: Sequence[float]) -> list[float]:
    """For each value, the median of all the others (as ``statistics.median`` gives it).

    Sorted once: without one value, the median is one of the two or three middle values of the
    whole sorted list, so a test's thousands of samples (bucket125 keeps every run of the current
    file) cost one sort, not one sort per sample.
    """
    n = len(values)
    if n < 2:
        raise ValueError(f"the median of the others needs two values or more, got {n}")
    order = sorted(range(n), key=values.__getitem__)
    ranked = [values[i] for i in order]
    rank = [0] * n
    for r, i in enumerate(order):
        rank[i] = r

    def at(k: int, skip: int) -> float:  # the k-th smallest with rank ``skip`` left out
        return ranked[k if k < skip else k + 1]

    m = n - 1  # how many are left
    out = []
    for i in range(n):
        if m % 2:
            out.append(at(m // 2, rank[i]))
        else:
            out.append((at(m // 2 - 1, rank[i]) + at(m // 2, rank[i])) / 2)
    return out


def bound_proposal(test: Test, proposed: int, p: Mapping, killed: bool = False,
                   in_force: int | None = None, smallest: int = 0) -> tuple[int, int | None, str]:
    """(est_time to apply, proposal held for acceptance or None, note for the reason); ``killed``: the
    proposal is a raise after a timeout kill, which the step guard does not hold.

    The step is judged from the est_time in force: ``in_force`` (the last calibration's, which the
    night plans with) when there is one, else the registered ``test.est_time``; a held proposal
    keeps that same value. Judging from the registered value would hold a step the last
    calibration already took, and send est_time back to the registered value every other night.

    ``smallest`` is the least the policy proposes from any passing run (bucket125: 10 s): the step is
    counted from it when the est_time in force is lower, so a 1 s or 2 s est_time (framework M's fast
    CPU folder is 1 s) can reach the policy's first value, which no evidence could ever move it past.
    An est_time of 0 is counted from 1 s at least: it is a placeholder like any tiny value, and 0 -> 43 s
    is as large a step as 1 -> 43 s.
    """
    top = int(p.get("max_est_time_s") or MAX_EST_TIME_S)
    note = ""
    if proposed > top:
        note = f"capped at max_est_time_s {top} s (wanted {proposed} s)"
        proposed = top
    base = test.est_time if in_force is None else in_force
    step = float(p.get("max_step_factor") or 0)
    accepted = test.id in tuple(p.get("accept") or ())
    placeholder = test.uncalibrated and in_force is None  # a default est_time nobody measured
    raise_after_kill = killed and proposed > base
    if step and proposed != base and not (accepted or placeholder or raise_after_kill):
        start = max(base, smallest, 1)  # an est_time of 0 (the SGLang family registers some) is counted from 1 s
        ratio = proposed / start
        if ratio > step or ratio < 1 / step:
            what = f"est_time {base} s" if in_force is None else f"the calibrated est_time in force {base} s"
            if in_force is None and test.est_literal is not None and math.ceil(test.est_literal) == base:
                what += f" ({test.est_literal:g} in the file, rounded up)"
            if start != base:
                by = f" by x{proposed / base:.3g}, x" if base else " by x"
                what += f"{by}{ratio:.3g} from {start} s, the least the policy proposes,"
            else:
                what += f" by x{ratio:.3g},"
            held = (f"held for acceptance: {proposed} s moves {what} more "
                    f"than max_step_factor x{step:g} in one step; to apply it, add {test.id!r} to the repo's "
                    "calibration: accept: list")
            return base, proposed, "; ".join(x for x in (note, held) if x)
    return proposed, None, note
