"""The night report: what ran, how it ended, how long it took against its estimate, what changes.

Pure functions over records, so the terminal table, the Markdown file, the HTML report
(pipelines/reporting) and the Dagster metadata all say the same thing. ``build_report`` gathers
every section of the morning-after report from a night summary, earlier summaries and history.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime

from pipelines.core.calibrate.evidence import NearTimeout, drift, near_timeout, recorded_floor
from pipelines.core.calibrate.policies import parse_time
from pipelines.core.flaky import FlakyState, night_verdict, recorded_verdict, replay, unlisted, with_unlisted
from pipelines.core.health import NodeFinding, detect_bad_nodes, passed_nodes
from pipelines.core.model import Attempt, Estimate, Plan, Sample, Test
from pipelines.core.plan.accuracy import (
    Locate,
    PredictionError,
    error_lines,
    prediction_error,
    recorded_predictions,
)
from pipelines.core.trends import (
    Changes,
    Trend,
    duration_trends,
    environment,
    est_times,
    night_changes,
)


@dataclass(frozen=True)
class Row:
    test_id: str
    outcome: str
    elapsed_s: float | None
    est_time: int
    proposed: int | None
    timeout_s: int | None
    node: str
    attempts: int
    reason: str = ""


def night_rows(
    tests: Sequence[Test],
    skipped: Sequence[Test],
    attempts: Sequence[Attempt],
    estimates: Sequence[Estimate],
    unplanned: Sequence[str] = (),
    skip_reasons: Mapping[str, str] | None = None,
) -> list[Row]:
    """One row per selected test, in run order, then the skipped ones, each with why the night did not
    launch it (``skip_reasons``: the record's; a record without them falls back to the disabled reason)."""
    last: dict[str, Attempt] = {}
    count: Counter[str] = Counter()
    for a in attempts:
        last[a.test_id] = a
        count[a.test_id] += 1
    proposed = {e.test_id: e.proposed for e in estimates if e.samples_used}
    rows = []
    for t in tests:
        a = last.get(t.id)
        if a is None and t.id in unplanned:
            rows.append(Row(t.id, "unplanned", None, t.est_time, proposed.get(t.id), None, "", 0,
                            f"no pool in this deployment runs {t.hardware or t.suite}"))
            continue
        rows.append(
            Row(t.id, a.outcome if a else "not_run", a.elapsed_s if a else None, t.est_time,
                proposed.get(t.id), a.timeout_s if a else None, a.node if a else "", count[t.id],
                a.reason if a else "")
        )
    for t in skipped:
        why = (skip_reasons or {}).get(t.id) or t.disabled or ""
        rows.append(Row(t.id, "skipped", None, t.est_time, proposed.get(t.id), None, "", 0, why))
    return rows


def _fmt(v: float | int | None) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if isinstance(v, float) else str(v)


HEADER = ("test", "outcome", "elapsed_s", "est_time", "proposed", "timeout_s", "node")


def table(rows: Sequence[Row]) -> str:
    """A fixed-width table for the terminal."""
    cells = [HEADER] + [
        (r.test_id, r.outcome + (f" (x{r.attempts})" if r.attempts > 1 else ""), _fmt(r.elapsed_s),
         _fmt(r.est_time), _fmt(r.proposed), _fmt(r.timeout_s), r.node)
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(HEADER))).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(
    title: str,
    rows: Sequence[Row],
    plan: Plan | None,
    actual_makespan_s: float | None,
    notes: Sequence[str] = (),
    extra: Mapping[str, str] | None = None,
) -> str:
    """The report file a CI maintainer reads the morning after."""
    outcomes = Counter(r.outcome for r in rows)
    lines = [f"# {title}", ""]
    lines.append("Outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    if plan is not None:
        lines.append(
            f"Predicted makespan {plan.makespan_s:.1f} s (lower bound {plan.lower_bound_s:.1f} s, "
            f"ratio {plan.ratio:.3f}); actual {_fmt(actual_makespan_s)} s"
        )
    for k, v in (extra or {}).items():
        lines.append(f"{k}: {v}")
    lines += ["", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in rows:
        lines.append(
            f"| {r.test_id} | {r.outcome} | {_fmt(r.elapsed_s)} | {r.est_time} | {_fmt(r.proposed)} | "
            f"{_fmt(r.timeout_s)} | {r.node} |"
        )
    failed = [r for r in rows if r.outcome in ("failed", "timed_out", "infra_error", "unplanned", "not_run")]
    if failed:
        lines += ["", "## Not passed", ""]
        lines += [f"- `{r.test_id}`: {r.outcome}: {r.reason}" for r in failed]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


# -- the morning-after report: every section as data, rendered by pipelines/reporting ----------------

_NOT_OK = ("failed", "timed_out", "infra_error", "interrupted")
#: not the test's doing: listed with the infrastructure, never excused by a quarantine
_NOT_TESTS = ("infra_error", "interrupted")


@dataclass(frozen=True)
class Failure:
    """A test that did not simply pass tonight, with what to look at first."""

    test_id: str
    outcome: str
    classification: str
    reason: str
    node: str
    attempts: int
    exit_code: int | None = None
    log_path: str = ""
    log_tail: str = ""
    #: failed tonight after its last run passed; never for a test already flaky going in (no new regression)
    new: bool = False
    #: the flaky state the night started with, "flaky" or "quarantined"; "" when it started healthy or released
    state_going_in: str = ""


@dataclass(frozen=True)
class Bar:
    """One attempt on the Gantt of the actual night (seconds from the night's first start)."""

    test_id: str
    node: str
    start_s: float
    elapsed_s: float
    outcome: str
    attempt: int
    gpus: int


@dataclass(frozen=True)
class Usage:
    gpus: int
    makespan_s: float
    used_gpu_h: float
    capacity_gpu_h: float
    #: where ``gpus`` came from: "given", the night's recorded pools ("the night's pools: h200 4 x 8"),
    #: or, for a record from before they were kept, "inferred from the GPU slots used (...)"
    source: str
    #: the capacity this night did not use: idle, or used by another run on the same GPUs (another night,
    #: a leftover process), which the night's record cannot tell apart: never called idle
    unused_gpu_h: float = 0.0
    #: what the record does know of the other runs: how long this night's attempts waited for GPUs that
    #: were busy (the sum of their ``details["gpu_wait_s"]``) and how many waited; None when no attempt
    #: recorded its wait (a Kubernetes night, a record from before it was kept)
    gpu_wait_s: float | None = None
    gpu_waits: int = 0


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows, computed once; the HTML, the JSON and the UI metadata read this."""

    night: str
    run_id: str
    cadence: str
    verdict: str
    counts: tuple[tuple[str, int], ...]
    rows: tuple[Row, ...]
    failures: tuple[Failure, ...]
    infra: tuple[Failure, ...]
    bad_nodes: tuple[NodeFinding, ...]
    drift: tuple[Estimate, ...]
    near_timeout: tuple[NearTimeout, ...]
    usage: Usage | None
    makespan: tuple[tuple[str, float | None], ...]
    gantt: tuple[Bar, ...]
    trends: tuple[Trend, ...]
    changes: Changes | None
    flaky: tuple[FlakyState, ...]
    excused: tuple[str, ...]
    uncovered: tuple[str, ...]
    notes: tuple[str, ...]
    environment: tuple[tuple[str, str], ...] = ()
    #: proposals the step guard holds for a maintainer's acceptance (est_time stays until accepted)
    held: tuple[Estimate, ...] = ()
    #: how far the plan's predictions were from the nights, over the repo's recent whole nights on this
    #: deployment up to this one (``pipelines.core.plan.accuracy``), and the lines the page shows
    prediction_error: PredictionError | None = None
    prediction: tuple[str, ...] = ()
    #: nodes the night only suspected (in-night ``suspect``, cross-night ``history_suspect``): avoided and
    #: retried from, their quarantined failures not excused, never named nor cordoned (its record's
    #: ``suspect_nodes``, with the evidence it acted on)
    suspect_nodes: tuple[NodeFinding, ...] = ()


def night_started(summary: Mapping) -> datetime | None:
    """When a record's night started, to the second, from its id (``2026-12-04T165637Z-a6314ba1``, the
    time its run began and 8 characters of the run id); None for an id of another shape."""
    try:
        return datetime.strptime(str(summary.get("night") or "")[:18], "%Y-%m-%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def replaces_latest(latest: Mapping | None, summary: Mapping) -> bool:
    """Whether a run's record may replace ``latest`` (``nights/latest.json``, the newest run's record): not
    when ``latest`` is of a night that started later, which a run that outlived its worker, writing its
    record late, must not hide. Nights started in the same second, and records whose start cannot be read,
    are not ordered: the record replaces it, as a night's own rewrites do."""
    mine, theirs = night_started(summary), night_started(latest or {})
    return mine is None or theirs is None or theirs <= mine


def attempts_of(summary: Mapping) -> list[Attempt]:
    """The summary's attempts as records (fields a newer writer added are ignored)."""
    known = {f.name for f in fields(Attempt)}
    return [Attempt(**{**{k: v for k, v in a.items() if k in known}, "gpu_slots": tuple(a.get("gpu_slots", ()))})
            for a in summary.get("attempts", ())]


def recorded_findings(summary: Mapping, key: str = "bad_nodes") -> list[NodeFinding]:
    """The bad nodes the night found (``key`` "suspect_nodes": the nodes it only suspected), with the
    evidence it had (its history window included); [] for a record written before they were kept
    (``build_report`` then judges the attempts again for bad nodes)."""
    known = {f.name for f in fields(NodeFinding)}
    out = []
    for f in summary.get(key) or ():
        if isinstance(f, Mapping) and known <= set(f):
            out.append(NodeFinding(**{**{k: f[k] for k in known}, "tests": tuple(f["tests"])}))
    return out


#: a log line shown longer than this is cut in its middle (a test that prints megabytes without a newline)
TAIL_LINE_CHARS = 1000
#: the last lines shown of a log, all together, at most this long (its last lines are kept)
TAIL_CHARS = 4000
#: how much of a log's end is read for its last lines: every character that can be shown, at 4 bytes each
TAIL_READ_BYTES = 4 * TAIL_CHARS + 4096


def decode_end(data: bytes, start: int) -> tuple[str, bool]:
    """The text of a log's end read from byte ``start`` (with, when ``start`` > 0, the one byte before the
    end wanted, read to tell whether that end begins a line), and whether its first line lacks its start."""
    if start <= 0:
        return data.decode("utf-8", errors="replace"), False
    return data[1:].decode("utf-8", errors="replace"), data[:1] != b"\n"


#: what a terminal or a browser acts on rather than shows: C0 controls but tab and newline, DEL, C1 controls
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with each control character written as ``\\xNN`` (tabs and newlines kept): a test's output and
    reasons reach a CI job's terminal and the report page, where an escape sequence would recolour or retitle
    the terminal, a BEL ring and a NUL cut the text; shown, they also say what the test printed."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def tail_lines(text: str, n: int = 30, *, max_chars: int = TAIL_CHARS, line_chars: int = TAIL_LINE_CHARS,
               start_unread: bool = False) -> str:
    """The last ``n`` lines of a log (where the error usually is), at most ``line_chars`` characters a line
    and ``max_chars`` in all: a test's output without newlines would otherwise put megabytes into the CI
    job's log and the report. Each cut is said (``... N characters cut ...``), and a text this already
    returned comes back as it is. ``start_unread``: ``text`` is only the log's end (a read of its last
    :data:`TAIL_READ_BYTES`), so its first line may lack its start. Control characters are shown
    (:func:`printable`), so the bounds are of what is shown."""
    line_chars = max(80, min(line_chars, max_chars // 2))
    every = text.rstrip("\n").splitlines()
    lines = [printable(line) for line in every[-n:]]
    partial = start_unread and len(every) <= n  # the first line read is shown
    shown = [_bounded(line, line_chars, start_cut=partial and i == 0) for i, line in enumerate(lines)]
    dropped = 0
    while len(shown) > 1 and sum(map(len, shown)) + len(shown) - 1 > max_chars:
        dropped += len(shown.pop(0)) + 1
    if dropped:  # said on a line of its own, in place of the first line cut (so at most n lines)
        while len(shown) > 1 and sum(map(len, shown)) + len(shown) + len(f"... {dropped} characters cut") > max_chars:
            dropped += len(shown.pop(0)) + 1
        shown.insert(0, f"... {dropped} characters cut")
    return "\n".join(shown)


def _bounded(line: str, limit: int, start_cut: bool = False) -> str:
    """``line`` in at most ``limit`` characters: its head and its end with the cut said between them, or
    only its end when ``start_cut`` (the line began before the part of the log that was read)."""
    if len(line) <= limit and not start_cut:
        return line
    cut = max(0, len(line) - limit)
    while True:  # the note's own length depends on the number it says
        note = (f"... start of line{f' and {cut} characters' if cut else ''} cut ... " if start_cut
                else f" ... {cut} characters cut ... ")
        keep = max(0, min(len(line), limit - len(note)))
        if len(line) - keep == cut:
            break
        cut = len(line) - keep
    if start_cut:
        return note + line[len(line) - keep:]
    return line[: keep // 2] + note + line[len(line) - (keep - keep // 2):]


def _going_in(state: FlakyState | None, ended: bool) -> str:
    """The state a failing test started the night with, where it says the failure is no news:
    flaky or quarantined (not a quarantine that ended as the night started: its failures count)."""
    return state.state if state is not None and state.state in ("flaky", "quarantined") and not ended else ""


def _classify(attempts: list[Attempt], bad: set[str], excused: bool, going_in: FlakyState | None = None,
              failed_night: bool = False) -> str:
    """One line on why a test is in the failures; ``excused``: the night's verdict excused its
    failure (quarantined then), which a quarantine added since must not claim. ``going_in``: its
    flaky state as the night started (``_going_in`` said it counts), said so that a known flaky
    test's failure does not read as a new regression."""
    a = attempts[-1]
    known = (f"; already {going_in.state} going into the night" + (f" (since {going_in.since})" if going_in.since
                                                                    else "")) if going_in is not None else ""
    if a.outcome == "passed":
        first = next(x for x in attempts if x.outcome in ("failed", "timed_out"))
        if first.node in bad:  # what flaky replay leaves out too: the node's doing, not the test's
            return (f"bad node {first.node}: {first.outcome} there on attempt {first.attempt}, passed on attempt "
                    f"{a.attempt} on {a.node or 'another node'}")
        return f"flaky: {first.outcome} on attempt {first.attempt}, passed on attempt {a.attempt}" + known
    if a.outcome == "infra_error":
        return f"infra: {a.reason or 'unknown'}" + (f" on bad node {a.node}" if a.node in bad else "")
    if a.outcome == "interrupted":
        if failed_night:  # no one stopped it: the night ended on an error and killed what still ran
            return "killed: the night stopped on an error before this attempt ended (see the night's error)"
        return "interrupted: the run was stopped before this attempt ended"
    if a.node in bad:
        return f"bad node {a.node}: the node, not the test"
    kind = (f"hang: killed at its {a.timeout_s} s timeout" if a.outcome == "timed_out"
            else f"test failure (exit {a.exit_code})" if a.exit_code is not None else "test failure")
    if excused:
        return kind + "; quarantined, does not fail the night"
    return kind + (f"{known}, not a new regression" if known else "")


#: the local launcher's reason for a timeout ("killed after the 6s timeout"), which a timed-out attempt's
#: classification ("hang: killed at its 6 s timeout") already says
_TIMEOUT_REASON = re.compile(r"killed after the (\d+) ?s timeout")


def failure_why(f: Failure) -> str:
    """The failure's classification, then its attempt's reason where that says more (the closing lines of
    ``nightly run``): never the same thing twice, as ``hang: killed at its 6 s timeout: killed after the 6s
    timeout`` said it."""
    reason = f.reason.strip()
    if not reason or reason in f.classification:
        return f.classification
    if (said := _TIMEOUT_REASON.fullmatch(reason)) and f"killed at its {said.group(1)} s timeout" in f.classification:
        return f.classification
    return f"{f.classification}: {f.reason}"


def _retried_infra(a: Attempt, last: Attempt, bad: set[str]) -> str:
    """One line on an infra error that was not the test's last attempt, and what its retry did."""
    where = f" on {'bad node ' if a.node in bad else ''}{a.node}" if a.node else ""
    then = f"{last.outcome} on attempt {last.attempt}" + (f" on {last.node}" if last.node else "")
    return f"infra: {a.reason or 'unknown'}{where} on attempt {a.attempt}; {then}"


def _gantt(attempts: list[Attempt], slots: dict[str, int]) -> tuple[tuple[Bar, ...], float]:
    """The bars of the night as it ran, from its first launch. An attempt that never launched (an input that
    failed to build: stamped as the failure was known, to the second in older records) is no time zero: taken
    as one, it moved every bar late and stretched the span past the night's makespan; it is drawn at 0."""
    times = [(a, t) for a in attempts if (t := parse_time(a.started_at)) is not None and a.outcome != "skipped"]
    if not times:
        return (), 0.0
    t0 = min((t for a, t in times if a.details.get("stage") != "inputs"), default=min(t for _, t in times))
    bars = tuple(Bar(a.test_id, a.node or "-",
                     0.0 if a.details.get("stage") == "inputs" else max((t - t0).total_seconds(), 0.0),
                     float(a.elapsed_s), a.outcome,
                     a.attempt, len(a.gpu_slots) or slots.get(a.test_id, 1)) for a, t in times)
    return bars, max(b.start_s + b.elapsed_s for b in bars)


def _count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def recorded_pools(summary: Mapping) -> dict[str, tuple[int, int]]:
    """The pools the night ran on as its record keeps them (``pools``: name -> nodes and GPUs per
    node, ``Night.pool_shapes``), as (nodes, GPUs per node); {} for a record from before they were kept."""
    pools = summary.get("pools")
    if not isinstance(pools, Mapping):
        return {}
    return {str(name): (p["nodes"], p["gpus_per_node"]) for name, p in pools.items()
            if isinstance(p, Mapping) and _count(p.get("nodes")) and _count(p.get("gpus_per_node"))}


def _usage(bars: Sequence[Bar], attempts: list[Attempt], summary: Mapping, makespan: float | None,
           capacity_gpus: int | None) -> Usage | None:
    span = float(makespan or 0) or max((b.start_s + b.elapsed_s for b in bars), default=0.0)
    if not span:
        return None
    used = sum(b.elapsed_s * b.gpus for b in bars) / 3600
    gpus, source = capacity_gpus, "given"
    if not gpus and (pools := recorded_pools(summary)):
        gpus = sum(n * g for n, g in pools.values())
        source = "the night's pools: " + ", ".join(f"{name} {n} x {g}" for name, (n, g) in pools.items())
    if not gpus:  # a record from before the pools were kept: what the attempts' slots show, a floor
        per_node: dict[str, int] = {}
        for a in attempts:
            if a.gpu_slots:
                per_node[a.node] = max(per_node.get(a.node, 0), max(a.gpu_slots) + 1)
        gpus = sum(per_node.values()) or max((b.gpus for b in bars), default=0)
        source = ("inferred from the GPU slots used (the night's record does not say its pools' size: "
                  "written before it was kept)")
    capacity = int(gpus) * span / 3600
    waits = [w for a in attempts if (w := _gpu_wait_s(a)) is not None]
    return Usage(int(gpus), span, used, capacity, source, max(capacity - used, 0.0),
                 round(sum(waits), 3) if waits else None, sum(1 for w in waits if w > 0))


def _gpu_wait_s(attempt: Attempt) -> float | None:
    """How long the attempt waited for busy GPUs before it started (``details["gpu_wait_s"]``); None unrecorded."""
    try:
        wait = float(attempt.details.get("gpu_wait_s", ""))
    except (TypeError, ValueError):
        return None
    return wait if wait >= 0 and wait != float("inf") else None


#: the makespan rows' names on the page where the key alone misleads: the plan's lower bound is from
#: predicted durations, and a night that ran faster than predicted ends below it
MAKESPAN_LABELS = {"lower bound": "plan's lower bound (from predicted durations)",
                   "lower bound (actual durations)": "lower bound from the night's actual durations"}


def makespan_label(key: str) -> str:
    """How a row of ``ReportData.makespan`` is named on the page (the JSON keeps the key)."""
    return MAKESPAN_LABELS.get(key, f"{key} makespan")


def planned_gpus(summary: Mapping) -> dict[str, int]:
    """Test id -> the GPUs the night's plan gave it (the record's ``plan``); {} for a record without one."""
    plan = summary.get("plan")
    return {p["test_id"]: p["gpus"] for p in plan if isinstance(p, Mapping) and isinstance(p.get("test_id"), str)
            and isinstance(p.get("gpus"), int) and not isinstance(p["gpus"], bool) and p["gpus"] >= 0
            } if isinstance(plan, list) else {}


def _actual_bound(bars: Sequence[Bar], attempts: Sequence[Attempt], usage: Usage | None,
                  gpus: Mapping[str, int]) -> float | None:
    """No schedule of the night's attempts is shorter: ``max(longest attempt, GPU-seconds used / GPUs)``, the
    GPUs being those of the usage section. Only where every attempt that ran on GPUs recorded its GPU slots
    (else its GPUs, and the pools', would be guessed); None otherwise. ``gpus``: test id -> GPUs it needs
    (a test it does not name is taken to need some): a CPU test never has slots, and uses no GPU-seconds."""
    if usage is None or usage.gpus <= 0 or not bars:
        return None
    if any(not a.gpu_slots for a in attempts
           if a.outcome != "skipped" and a.elapsed_s > 0 and gpus.get(a.test_id, 1) > 0):
        return None
    return round(max(max(b.elapsed_s for b in bars), sum(b.elapsed_s * b.gpus for b in bars) / usage.gpus), 3)


def _whole(summary: Mapping) -> bool:
    """Whether the record is of a night that ended: a partial or interrupted one's attempts are not its work."""
    return summary.get("status") not in ("running", "interrupted") and summary.get("interrupted") is not True


def actual_lower_bound(summary: Mapping, capacity_gpus: int | None = None) -> float | None:
    """The bound of the night's own durations (the report's ``lower bound (actual durations)``) from its
    record alone, for the end-of-night line; None where the report shows none."""
    attempts = attempts_of(summary)
    gpus = planned_gpus(summary)
    bars, span = _gantt(attempts, gpus)
    usage = _usage(bars, attempts, summary, summary.get("actual_makespan_s") or span or None, capacity_gpus)
    return _actual_bound(bars, attempts, usage, gpus) if _whole(summary) else None


#: near timeout: a run that used over this share of its timeout
NEAR_TIMEOUT = 0.9


@dataclass(frozen=True)
class NearTimeoutTonight(NearTimeout):
    """A test whose attempt tonight used over 90 % of the timeout it ran with (``timeout_s``): a fact, whatever
    calibration does next; ``next_night`` is its last run against the timeout it gets next night (None: not
    known), the context that says whether calibration already gave it room."""

    next_night: NearTimeout | None = None

    def __str__(self) -> str:
        text = (f"{self.test_id}: tonight's run {self.outcome} after {self.elapsed_text} s of its {self.timeout_s} s "
                f"timeout ({self.used:.0%})")
        n = self.next_night
        if n is None:
            return text
        if self.outcome == "timed_out":  # killed, not nearly: a failure already; say whether next night has room
            room = ("it will be killed again unless its est_time is raised" if n.timeout_s <= self.timeout_s
                    else f"longer than the {self.timeout_s} s that killed it")
            return text + f"; next night: {n.timeout_s} s, {room}"
        if n.file_est_time:
            return text + (f"; next night: {n.timeout_s} s, the one its file's est_time={n.file_est_time} gives the "
                           "framework's own runner until the est_time patch is merged")
        return text + (f"; next night: {n.timeout_s} s after calibration" if n.timeout_s != self.timeout_s
                       else "; next night: the same timeout after calibration")


def near_timeouts(attempts: Sequence[Attempt], next_night: Sequence[NearTimeout],
                  by_id: Mapping[str, Test], injected: bool = False) -> tuple[NearTimeout, ...]:
    """The one near-timeout rule of `nightly run`'s ``near timeout:`` lines, the calibration run's
    ``no_test_near_timeout`` check and the report (page, --json): a test is near its timeout when

    - an attempt tonight used over 90 % of the timeout it ran with: a fact the maintainer sees even where
      calibration raises next night's timeout (said with it: ``next night: 37 s after calibration``); or
    - its last run used over 90 % of the timeout next night gives it (the proposal's, or the shorter one its
      file gives the framework's runner): a stale high est_time must not hide a run close to the new timeout.

    ``next_night``: every test's last run against next night's timeout (``near_timeout`` at threshold 0).
    Tonight's attempts do not count when the night ran with extra environment (``injected``: a hang injected
    with ``--env`` says nothing about the test's timeout; ``near_timeout`` leaves those samples out too)."""
    every = {n.test_id: n for n in next_night}
    out: dict[str, NearTimeout] = {n.test_id: n for n in next_night if n.used > NEAR_TIMEOUT}
    for a in () if injected else attempts:
        if a.timeout_s and not isinstance(out.get(a.test_id), NearTimeoutTonight) \
                and a.outcome in ("passed", "failed", "timed_out") and a.elapsed_s > NEAR_TIMEOUT * a.timeout_s:
            hw = by_id[a.test_id].hardware if a.test_id in by_id else ""
            out[a.test_id] = NearTimeoutTonight(a.test_id, hw, a.elapsed_s, a.timeout_s, a.outcome, a.started_at,
                                                next_night=every.get(a.test_id))
    return tuple(out.values())


def recorded_problems(summary: Mapping) -> list[str]:
    """The night's problems as its record keeps them (catalog problems, tests no pool runs); [] for a
    record written before they were kept."""
    problems = summary.get("problems")
    return [p for p in problems if isinstance(p, str)] if isinstance(problems, list) else []


def with_problems(verdict_text: str, problems: Sequence[str]) -> str:
    """The verdict with the night's problems: a night whose tests all passed is not OK when a test file's
    registration did not load (it silently dropped out) or a test has no pool, as ``nightly run`` exits 3."""
    if not problems:
        return verdict_text
    catalog = sum(1 for p in problems if p.startswith("catalog problem"))
    unplanned = sum(1 for p in problems if p.startswith("unplanned"))
    said = ", ".join(x for x in (f"{catalog} catalog problem(s)" if catalog else "",
                                 f"{unplanned} test(s) no pool runs" if unplanned else "",
                                 f"{len(problems) - catalog - unplanned} other problem(s)"
                                 if len(problems) > catalog + unplanned else "") if x)
    if verdict_text == "OK: every test passed":
        return f"PROBLEMS: {said}; every launched test passed"
    if verdict_text.startswith("OK: "):
        return f"PROBLEMS: {said}; {verdict_text.removeprefix('OK: ')}"
    return f"{verdict_text}; {said}"


def build_report(
    summary: Mapping,
    previous: Sequence[Mapping] = (),
    samples: Sequence[Sample] = (),
    tests: Sequence[Test] = (),
    estimates: Sequence[Estimate] = (),
    *,
    states: Mapping[str, FlakyState] | None = None,
    at_start: Mapping[str, FlakyState] | None = None,
    log_tails: Mapping[str, str] | None = None,
    uncovered: Sequence[str] = (),
    capacity_gpus: int | None = None,
    timeout_floor_s: int = 1800,
    timeout_factor: float = 1.25,
    trend_nights: int = 14,
    locate: Callable[[Mapping], Locate] | None = None,
) -> ReportData:
    """The night's report from its summary, the nights before it (oldest first: each test is compared
    with the last of them that ran it) and history; pure. ``timeout_floor_s``: the repo's floor, the
    framework's own runner's (the night's, for a record that does not keep the one it ran with).
    ``locate(summary)``: where each field of a night record is (``recorded_predictions``), read by the caller.
    ``states``: the flaky states after the night (the page's flaky section); ``at_start``: those it
    started with, at least of the tests that failed (None: not known), so the failure of a test
    already flaky going in is said to be one and not marked new since last night."""
    # a reason is the test's own text (an exception's message): shown, never acted on, wherever it is printed
    attempts = [dataclasses.replace(a, reason=printable(a.reason)) for a in attempts_of(summary)]
    by_id = {t.id: t for t in tests}
    est_then = est_times(summary)
    known = lambda tid: by_id.get(tid) or Test(tid, tid, "cuda", "", 1, est_then.get(tid, 0))  # noqa: E731
    # tests a summary did not list (an older writer) still count: their attempts say they ran
    selected = [known(t) for t in dict.fromkeys([*summary.get("selected", ()), *(a.test_id for a in attempts)])
                if t not in summary.get("skipped", ())]
    # near timeout judges the file's own est_time too (the framework's runner): the catalog's tests as registered
    as_registered = [by_id.get(t.id) or dataclasses.replace(t, est_source="history") for t in selected]
    selected = [dataclasses.replace(t, est_time=est_then.get(t.id, t.est_time)) for t in selected]
    reasons = summary.get("skip_reasons")
    rows = night_rows(selected, [known(t) for t in summary.get("skipped", ())], attempts, estimates,
                      summary.get("unplanned", ()), reasons if isinstance(reasons, Mapping) else None)
    if states is None:
        states = {k: FlakyState.from_dict(v) for k, v in summary["flaky"].items()} if isinstance(
            summary.get("flaky"), Mapping) else replay(samples)
    findings = recorded_findings(summary) if "bad_nodes" in summary else detect_bad_nodes(
        attempts, history=passed_nodes(samples, exclude_run=str(summary.get("run_id", ""))))
    bad = {f.node for f in findings}
    verdict = recorded = recorded_verdict(summary)  # as the night decided it
    contradicted: dict[str, str] = {}
    if verdict is None:  # an older record: judged from its attempts, where a selected test without one is no pass
        verdict = night_verdict(attempts, states)
        ran = {a.test_id for a in attempts}
        never = [t.id for t in selected if t.id not in ran and t.id not in summary.get("unplanned", ())]
        verdict = dataclasses.replace(verdict, interrupted=(*verdict.interrupted, *never))
    elif contradicted := unlisted(verdict, attempts):  # never OK where the record's own attempts say otherwise
        verdict = with_unlisted(verdict, contradicted)
    changes = night_changes(summary, previous)
    failed_night = summary.get("status") == "failed"  # ended by an error of the run, not by a signal (execute.py)
    # where a stored copy of each log is (the state store on S3); the local path otherwise
    log_uris = {(a.get("test_id"), a.get("attempt", 1)): a["log_uri"] for a in summary.get("attempts", ()) if a.get("log_uri")}
    per_test: dict[str, list[Attempt]] = {}
    for a in attempts:
        per_test.setdefault(a.test_id, []).append(a)
    failures, infra = [], []
    for tid, xs in per_test.items():
        last = xs[-1]
        for x in xs[:-1]:  # an infra error a later attempt got past (its retry): said, never hidden by the pass
            if x.outcome == "infra_error":
                infra.append(Failure(tid, x.outcome, _retried_infra(x, last, bad), x.reason, x.node, len(xs),
                                     x.exit_code, log_uris.get((tid, x.attempt)) or x.log_path,
                                     tail_lines((log_tails or {}).get(x.log_path, ""))))
        retried_pass = last.outcome == "passed" and any(x.outcome in ("failed", "timed_out") for x in xs)
        if last.outcome not in _NOT_OK and not retried_pass:
            continue
        shown = last if last.outcome != "passed" else next(x for x in xs if x.outcome in ("failed", "timed_out"))
        going_in = _going_in((at_start or {}).get(tid), tid in verdict.quarantine_ended)
        item = Failure(tid, last.outcome, _classify(xs, bad, tid in verdict.excused,
                                                    (at_start or {}).get(tid) if going_in else None,
                                                    failed_night), shown.reason,
                       shown.node, len(xs), shown.exit_code, log_uris.get((tid, shown.attempt)) or shown.log_path,
                       tail_lines((log_tails or {}).get(shown.log_path, "")),
                       bool(changes and tid in changes.new_failures) and not going_in, going_in)
        (infra if last.outcome in _NOT_TESTS else failures).append(item)
    # the GPUs each test ran with: the night's plan's, else the catalog's
    gpus = {**{t.id: t.gpus for t in selected}, **planned_gpus(summary)}
    bars, span = _gantt(attempts, gpus)
    makespan = summary.get("actual_makespan_s") or span or None
    usage = _usage(bars, attempts, summary, makespan, capacity_gpus)
    bound = _actual_bound(bars, attempts, usage, gpus) if _whole(summary) else None
    # selected tests without an attempt: the night stopped before they started (the record's verdict names
    # them; an older record's does not, and a partial record's counted them as interrupted)
    never = list(dict.fromkeys([*verdict.never_started, *(r.test_id for r in rows if r.outcome == "not_run"
                                                          and r.test_id not in verdict.interrupted)]))
    ok = verdict.ok and not never
    verdict_text = ("FAILED: " if not ok else "OK: ") + ", ".join(
        x for x in (f"{len(verdict.failed)} test(s) failed" if verdict.failed else "",
                    f"{len(verdict.infra)} infra error(s)" if verdict.infra else "",
                    f"bad node(s) {', '.join(verdict.bad_nodes)}" + (
                        "; every test that failed there passed on another node" if ok else "")
                    if verdict.bad_nodes else "",
                    (f"{len(verdict.interrupted)} killed when it stopped" if failed_night else
                     f"{len(verdict.interrupted)} interrupted") if verdict.interrupted else "",
                    f"{len(never)} never started" if never else "",
                    f"{len(verdict.excused)} quarantined failure(s) excused" if verdict.excused else "") if x
    ) if (not ok or verdict.excused or verdict.bad_nodes) else "OK: every test passed"
    if ok and not attempts:  # nothing launched (a record written before such runs were refused): no pass
        verdict_text = "NOTHING RAN: " + ", ".join(
            f"{n} {what}" for n, what in ((len(summary.get("skipped", ())), "skipped"),
                                          (len(summary.get("unplanned", ())), "unplanned")) if n or what == "skipped")
    if failed_night:  # a bug of the run stopped the night: said first, never taken for someone stopping it
        stopped = f"FAILED: the night stopped on an error ({summary.get('error') or 'see its notes'})"
        rest = verdict_text.removeprefix("FAILED: ").removeprefix("OK: ")  # an error is never OK: FAILED first
        verdict_text = f"{stopped}; {rest}"
    inconsistent = ""
    if contradicted:
        where = (locate(summary) if locate else lambda _: f"nights/{summary.get('night')}.json:1")(("verdict",))
        inconsistent = (f"{where}: verdict: the night's record contradicts itself: its verdict "
                        f"{'says ok but ' if recorded is not None and recorded.ok else ''}lists nowhere "
                        f"{len(contradicted)} test(s) whose last attempt did not pass ("
                        + ", ".join(f"{t} {o}" for t, o in contradicted.items())
                        + "); this report judges them from the attempts; rewrite the record's verdict or run the "
                        "night again")
        verdict_text += f"; inconsistent record ({where}: verdict; see the notes)"
    if changes and changes.still_failing_not_run:  # said, never counted: the night did not run them
        verdict_text += f"; {len(changes.still_failing_not_run)} earlier failure(s) not run tonight"
    if summary.get("status") == "running":  # a partial record: the run goes on, or its worker died
        unfinished = (summary.get("verdict") or {}).get("unfinished") or ()
        verdict_text = (f"INCOMPLETE: {len(unfinished)} test(s) had not finished when the record was last written "
                        f"({summary.get('updated_at') or '?'}); the run is still going or its worker died")
    problems = recorded_problems(summary)
    verdict_text = with_problems(verdict_text, problems)
    # the error of the predictions over the nights read (``previous`` is this repo's), this one included
    predictions, damaged = recorded_predictions([*previous, summary], summary.get("deployment"), locate)
    accuracy = prediction_error(predictions)
    # the window is the repo's last nights, tonight's included: its night records, as "what changed" reads
    # them (a UI pick or a sensor rerun of this repo is one); another repo's runs in the shared history are not
    nights = [str(r) for n in [*previous, summary] if (r := n.get("run_id"))]
    trends = duration_trends(samples, [t.id for t in selected], trend_nights, nights=nights or None)
    # a test's last run is within the trend window when it ran lately: the rest cannot be near tonight's timeout
    runs = {p.run_id for t in trends.values() for p in t.points}
    recent = [s for s in samples if s.run_id in runs]
    return ReportData(
        night=str(summary.get("night", "")), run_id=str(summary.get("run_id", "")),
        cadence=str(summary.get("cadence", "")), verdict=printable(verdict_text),  # the run's error is text too
        counts=tuple(sorted(Counter(r.outcome for r in rows).items())), rows=tuple(rows),
        failures=tuple(failures), infra=tuple(infra), bad_nodes=tuple(findings),
        suspect_nodes=tuple(recorded_findings(summary, "suspect_nodes")),
        drift=tuple(drift(estimates)), held=tuple(e for e in estimates if e.held is not None),
        # judged with the floor the night ran with (--timeout-floor); the framework's runner keeps the repo's
        near_timeout=near_timeouts(attempts, near_timeout(as_registered, recent, recorded_floor(summary, timeout_floor_s),
                                                          timeout_factor, threshold=0.0, estimates=estimates,
                                                          runner_floor=timeout_floor_s), by_id,
                                   injected=bool(summary.get("env"))),
        usage=usage,
        makespan=tuple((k, summary.get(f)) for k, f in (
            ("predicted", "predicted_makespan_s"), ("predicted median", "predicted_median_s"), ("predicted p50", "predicted_p50_s"),
            ("predicted p90", "predicted_p90_s"),
            # a partial or interrupted record's span is how long the run had gone, not how long the night took
            ("so far (the run had not ended)" if summary.get("status") == "running" else
             "until it stopped on an error" if failed_night else
             "until interrupted" if summary.get("status") == "interrupted" or summary.get("interrupted") is True
             else "actual", "actual_makespan_s"),
            ("lower bound", "lower_bound_s"))  # the plan's (makespan_label)
            if summary.get(f) is not None) + ((("lower bound (actual durations)", bound),) if bound else ()),
        gantt=bars, trends=tuple(trends[t.id] for t in selected if t.id in trends), changes=changes,
        flaky=tuple(s for _, s in sorted(states.items()) if s.state != "healthy"),
        excused=verdict.excused, uncovered=tuple(uncovered),
        notes=(*summary.get("notes", ()), *_replanned_note(summary), *damaged, *(f"problem: {p}" for p in problems),
               *((inconsistent,) if inconsistent else ())),
        environment=tuple(environment(summary).items()),
        prediction_error=accuracy, prediction=tuple(error_lines(accuracy)),
    )


def _replanned_note(summary: Mapping) -> tuple[str, ...]:
    """The note of a night whose failed inputs changed its plan: its predicted figures are those of the plan
    its tests ran on, not the one its first lines said (the record's ``replanned``)."""
    r = summary.get("replanned")
    if not isinstance(r, Mapping) or not isinstance(r.get("without"), list) or not r["without"]:
        return ()
    start = r.get("predicted_median_s") or r.get("predicted_makespan_s")
    return (f"re-planned without the {len(r['without'])} test(s) whose inputs failed ({', '.join(map(str, r['without']))}): "
            f"the predicted makespan here is the new plan's, which its tests ran on; the night started with "
            f"{_fmt(start)} s predicted",)


def to_json(data: ReportData) -> str:
    """The report for scripts: every section as plain JSON."""
    return json.dumps(dataclasses.asdict(data), indent=1, default=str)
