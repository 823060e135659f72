"""What calibration shows a reviewer: the evidence CSV, the drift list and near-timeout tests."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pipelines.core.calibrate.output import write_atomic
from pipelines.core.calibrate.policies import parse_time, plain, runs_anywhere
from pipelines.core.model import Estimate, Sample, Test, effective_timeout, timeout_floor_problem

EVIDENCE_COLUMNS = ("test_id", "hardware", "current_est_time", "samples_used", "max_s", "p90_s", "median_s",
                    "proposed_est_time", "delta", "held_est_time", "in_force_est_time", "stale_samples", "reason",
                    "sources", "left_out")


#: between the log references of the ``sources`` column: a line break, which no reference holds (a log's
#: lines end at it; job and step names, ``run.txt:stage-b (2, h200):12``, ``logs.zip:3_Run tests.txt:40``,
#: hold spaces, and a step's default name ``Run a; b`` a ``; ``); CSV quotes the cell, so it stays one cell
SOURCES_SEPARATOR = "\n"


def split_sources(cell: str) -> tuple[str, ...]:
    """The ``sources`` (or ``left_out``) column back as its entries (an evidence CSV written before the
    separator was a line break joined them with spaces, or ``; ``: such a cell is one entry here)."""
    return tuple(ref for ref in cell.split(SOURCES_SEPARATOR) if ref)


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:g}"


def seconds(x: float, sign: bool = False) -> str:
    """Seconds as a file writes them: ``12.5``, ``3600``, ``10000000`` (never ``1e+07``); ``sign``: ``+7.5``."""
    return format(x, "+.10g" if sign else ".10g")


def evidence_rows(estimates: Sequence[Estimate]) -> list[dict[str, str]]:
    """One row per test; sources cite the log lines or run logs the samples came from, one per line of the
    cell (``SOURCES_SEPARATOR``: a reference may hold spaces)."""
    return [{
        # the file's est_time as written (SGLang's 12.5, not the 13 plans round it up to), as the patch shows it
        "test_id": e.test_id, "hardware": e.hardware, "current_est_time": seconds(e.registered),
        "samples_used": str(e.samples_used), "max_s": _num(e.max_s), "p90_s": _num(e.p90_s),
        "median_s": _num(e.median_s), "proposed_est_time": seconds(e.registered_proposed), "delta": seconds(e.registered_delta, True),
        # what the policy wants but the step guard holds for acceptance (proposed stays the value in force)
        "held_est_time": "" if e.held is None else str(e.held),
        # the last calibration's est_time, which the step was judged from; empty: the registered one was
        "in_force_est_time": "" if e.in_force is None else str(e.in_force),
        "stale_samples": str(e.stale_samples), "reason": e.reason,
        "sources": SOURCES_SEPARATOR.join(e.sources),
        # each sample the guards left out, with where it came from and why (the reason only counts them);
        # one per line as the sources are: a step's name may hold the "; " that once joined them
        "left_out": SOURCES_SEPARATOR.join(e.outliers),
    } for e in estimates]


def evidence_csv(estimates: Sequence[Estimate]) -> str:
    """The evidence as CSV text: one row per test with current, logged and proposed values."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=EVIDENCE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(evidence_rows(estimates))
    return buf.getvalue()


def write_evidence_csv(path: Path | str, estimates: Sequence[Estimate]) -> None:
    write_atomic(path, evidence_csv(estimates))


def held(estimates: Sequence[Estimate]) -> list[Estimate]:
    """Proposals the step guard holds for a maintainer's acceptance (the est_time in force stays until then)."""
    return [e for e in estimates if e.held is not None]


def drift(estimates: Sequence[Estimate], min_s: float = 30, min_ratio: float = 0.30) -> list[Estimate]:
    """Calibrated proposals that move by at least ``min_s`` seconds and ``min_ratio`` of the current value."""
    return [e for e in estimates
            if e.samples_used and abs(e.delta) >= min_s and abs(e.delta) >= min_ratio * max(e.current, 0)]


def recorded_floor(summary: Mapping, default: int) -> int:
    """The timeout floor a night ran with, as its record keeps it (``timeout_floor_s``: ``nightly run
    --timeout-floor``, or the repo's then); ``default`` (the repo's floor now) for a record written
    before it was kept, or one whose value no night could have run with."""
    floor = summary.get("timeout_floor_s")
    if isinstance(floor, int) and not isinstance(floor, bool) and not timeout_floor_problem(floor):
        return floor
    return default


@dataclass(frozen=True)
class NearTimeout:
    """A test whose last run used most of the timeout it will get next night, or of the one its
    file's est_time gives the framework's own runner when that is shorter."""

    test_id: str
    hardware: str
    elapsed_s: float
    timeout_s: int
    outcome: str
    started_at: str
    #: the est_time its file registers when ``timeout_s`` comes from it (a calibrated est_time or the
    #: proposal above it raises the night's timeout, but the framework's runner still kills the test there); else 0
    file_est_time: int = 0
    #: the calibrated est_time the nights ran with when it was above the file's (0: none in force)
    in_force_est_time: int = 0

    @property
    def used(self) -> float:
        return self.elapsed_s / self.timeout_s if self.timeout_s else 1.0

    @property
    def elapsed_text(self) -> str:
        """Its elapsed seconds as the CLI and the page both give them: to a tenth, without a trailing .0
        (``:g`` wrote 10.022 where the page said 10; whole seconds wrote "10 s of its 10 s timeout (95%)")."""
        return f"{round(self.elapsed_s, 1):g}"

    def __str__(self) -> str:
        text = (f"{self.test_id}: last run {self.outcome} after {self.elapsed_text} s of its {self.timeout_s} s "
                f"timeout ({self.used:.0%})")
        if self.file_est_time:
            text += (f", the one its file's est_time={self.file_est_time} gives the framework's own runner until the "
                     "est_time patch is merged")
            if self.in_force_est_time:
                text += f" (the nights run with the calibrated {self.in_force_est_time})"
        return text


def near_timeout(tests: Sequence[Test], samples: Sequence[Sample], floor: int = 1800, factor: float = 1.25,
                 threshold: float = 0.9, estimates: Sequence[Estimate] = (),
                 runner_floor: int | None = None) -> list[NearTimeout]:
    """Tests whose last passed/failed/timed-out run took over ``threshold`` of ``max(floor, factor*est)``,
    ``est`` being the proposal of ``estimates`` when there is one: next night runs with it, and a stale
    high est_time must not hide a run close to the timeout the proposal brings. ``tests`` as registered:
    where the est_time a registry file registers gives a shorter timeout, that one is judged, since the
    framework's own runner uses it until the est_time patch is merged (a raised calibrated est_time
    must not hide a run past it either); template tests register no timeout. The framework's runner
    has its own floor (its ``timeout_per_file``: the repo's ``timeout.floor_s``), ``runner_floor``,
    whatever floor the night ran with (``nightly run --timeout-floor``); None: ``floor``. Only nights run
    without extra environment count (``policies.plain``, as in calibration): a ``--env`` night's hang or
    slow pass was injected, and every caller (`nightly calibrate`, the night's check, the report) agrees."""
    runner_floor = floor if runner_floor is None else runner_floor
    proposed = {(e.test_id, e.hardware): e.proposed for e in estimates}
    in_force = {(e.test_id, e.hardware): e.in_force for e in estimates if e.in_force is not None}
    last: dict[tuple[str, str], tuple[datetime, int, Sample]] = {}
    oldest = datetime.min.replace(tzinfo=UTC)
    anywhere = runs_anywhere(tests)  # the last run on any pool: one est_time sets each pool's timeout
    for i, s in enumerate(plain(samples)):
        if s.outcome not in ("passed", "failed", "timed_out"):
            continue
        key = (s.test_id, anywhere.get(s.test_id, s.hardware))
        rank = (parse_time(s.started_at) or oldest, i)
        if key not in last or rank >= last[key][:2]:
            last[key] = (*rank, s)
    out = []
    for t in tests:
        hit = last.get((t.id, t.hardware))
        if not hit:
            continue
        s = hit[2]
        timeout = effective_timeout(proposed.get((t.id, t.hardware), t.est_time), floor, factor)
        file_est = t.est_time if t.fmt == "registry" and t.est_source == "registered" else 0
        if file_est and effective_timeout(file_est, runner_floor, factor) < timeout:
            timeout = effective_timeout(file_est, runner_floor, factor)
        else:
            file_est = 0
        if s.elapsed_s > threshold * timeout:
            forced = in_force.get((t.id, t.hardware), 0) if file_est else 0
            out.append(NearTimeout(t.id, t.hardware, s.elapsed_s, timeout, s.outcome, s.started_at, file_est,
                                   forced if forced > file_est else 0))
    return out
