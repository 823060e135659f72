"""Turn what a launcher reports into what history keeps, marking implausible durations.

An implausible duration (negative, not a number, longer than any nightly test can run) is kept
as an outlier with its reason: nothing is dropped without a word, and calibration never uses it.
"""

from __future__ import annotations

import dataclasses
import math
import unicodedata
from collections.abc import Mapping
from datetime import datetime, timedelta

from pipelines.core.calibrate.policies import parse_time
from pipelines.core.model import MAX_EST_TIME_S, Attempt, Sample, Test

OUTCOMES = ("passed", "failed", "timed_out", "infra_error", "skipped", "interrupted")


def implausible(elapsed_s: object, ceiling_s: float = MAX_EST_TIME_S) -> str:
    """Why ``elapsed_s`` cannot be a real duration, or "" when it can."""
    if isinstance(elapsed_s, bool) or not isinstance(elapsed_s, int | float):
        return f"elapsed {elapsed_s!r} is not a number"
    if math.isnan(elapsed_s) or math.isinf(elapsed_s):
        return f"elapsed {elapsed_s!r} is not a finite number"
    if elapsed_s < 0:
        return f"elapsed {elapsed_s:g} s is negative"
    if elapsed_s > ceiling_s:
        return f"elapsed {elapsed_s:g} s is over the ceiling of {ceiling_s:g} s"
    return ""


def screen(sample: Sample, ceiling_s: float = MAX_EST_TIME_S) -> Sample:
    """``sample`` with ``outlier`` set when its duration is implausible.

    A value no store can hold (NaN, negative, not a number) is stored as 0 s; the reason keeps
    the original value.
    """
    why = implausible(sample.elapsed_s, ceiling_s)
    if not why:
        return sample
    storable = implausible(sample.elapsed_s, math.inf) == ""
    return dataclasses.replace(sample, outlier=why, elapsed_s=float(sample.elapsed_s) if storable else 0.0)


def sample_from_attempt(attempt: Attempt, test: Test, run_id: str, image: str = "",
                        ceiling_s: float = MAX_EST_TIME_S, env: str = "", hardware: str | None = None) -> Sample:
    """One finished attempt as a history sample, tagged with the file revision it ran (and the
    night's extra environment, ``env_digest``) and the hardware it ran on: ``hardware``, the pool's
    (``plan.cluster.ran_on``: a test that names no GPU type has none of its own), else the test's.

    A timed-out attempt is ``capped``: its elapsed is the timeout, not the test's duration.
    An ``interrupted`` attempt is kept as such (infra: calibration never uses it).
    An infra error keeps its reason: flaky history tells a node's fault from a pod deleted or an image
    not pulled by it.
    """
    return screen(Sample(
        test_id=attempt.test_id,
        hardware=test.hardware if hardware is None else hardware,
        sha256=test.sha256,
        outcome=attempt.outcome,
        elapsed_s=float(attempt.elapsed_s),
        started_at=attempt.started_at,
        node=attempt.node,
        image=image,
        run_id=run_id,
        attempt=attempt.attempt,
        source=attempt.details.get("log_uri") or attempt.log_path or f"run {run_id}",  # the stored copy first
        capped=attempt.outcome == "timed_out",
        env=env,
        reason=(attempt.reason or "unknown") if attempt.outcome == "infra_error" else "",
    ), ceiling_s)


def row_problem(values: Mapping[str, object]) -> tuple[str, str]:
    """(column, what is wrong) for the first stored value no Sample can hold, else ("", "")."""
    for name in ("test_id", "hardware", "sha256", "started_at", "node", "image", "run_id", "source", "outlier", "env",
                 "reason"):
        if name in values and not isinstance(values[name], str):
            return name, f"{values[name]!r} is not text"
    if values["outcome"] not in OUTCOMES:
        return "outcome", f"{values['outcome']!r} is not one of {', '.join(OUTCOMES)}"
    elapsed = values["elapsed_s"]
    if isinstance(elapsed, str) or elapsed is None:
        return "elapsed_s", f"{elapsed!r} is not a number"
    why = implausible(elapsed, math.inf)
    if why:
        return "elapsed_s", why.removeprefix("elapsed ")
    for name in ("attempt", "capped"):
        if type(values[name]) is not int:
            return name, f"{values[name]!r} is not a whole number"
    return "", ""


#: how far a kept sample's start may lie after this machine's clock: the host that ran the night may run ahead
CLOCK_SKEW = timedelta(minutes=10)
_TEXT_FIELDS = ("test_id", "hardware", "sha256", "started_at", "node", "image", "run_id", "source", "outlier", "env",
                "reason")


def _control(text: str) -> str:
    """The first control character of ``text`` (a newline, an escape sequence's ESC), else ""."""
    return next((ch for ch in text if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")), "")


def kept_problem(sample: Sample, now: datetime) -> tuple[str, str]:
    """(field, what is wrong) for a sample read from a file brought in from outside (``nightly history
    import`` of a kept ``.jsonl``) that no night writes, else ("", ""). The store's own records are not held
    to it, so one an older nightly wrote stays readable. Stored, an infinite elapsed is warned about at every
    read, a start in the future stays the newest run for good, and a hardware with a ``/`` or a source with a
    newline breaks every line and file name that shows them."""
    if not math.isfinite(sample.elapsed_s):
        return "elapsed_s", f"{sample.elapsed_s!r} is not a finite number of seconds"
    if sample.attempt < 1:
        return "attempt", f"{sample.attempt} is not an attempt number (a test's first attempt is 1)"
    if sep := next((ch for ch in sample.hardware if ch in "/\\"), ""):
        return "hardware", f"{sample.hardware!r} is not a hardware name (contains {sep!r}), e.g. 'h200'"
    for name in _TEXT_FIELDS:
        value = getattr(sample, name)
        if ch := _control(value):
            return name, f"{value!r} contains the control character {ch!r}"
    if sample.started_at:
        started = parse_time(sample.started_at)
        if started is None:
            return "started_at", f"{sample.started_at!r} is not an ISO-8601 time, e.g. '2026-12-01T15:00:00+00:00'"
        if started > now + CLOCK_SKEW:
            return "started_at", (f"{sample.started_at!r} is later than now ({now.isoformat(timespec='seconds')} on "
                                  "this machine's clock): it would stay the newest run for good")
    return "", ""
