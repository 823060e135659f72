"""What the report reads, and the one function every entry point (CLI, asset) builds it with.

Nights are ``<home>/nights/<night>.json`` (``Night.write_summary``); history comes from the
deployment's store; logs are read only for the tail of what did not pass. The core computes
everything else (pipelines.core.report.build_report).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipelines.core.calibrate.evidence import write_atomic
from pipelines.core.flaky import FlakyRules, replay
from pipelines.core.model import CatalogError, Estimate, Problem, Sample, Test
from pipelines.core.report import ReportData, build_report, tail_lines

LOG_TAIL_LINES = 30


def night_files(home: Path) -> list[Path]:
    """Every night summary, oldest first (names sort by time); ``latest.json`` is a copy and left out."""
    folder = Path(home) / "nights"
    return sorted(p for p in folder.glob("*.json") if p.name != "latest.json")


def read_summary(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise CatalogError(Problem(str(path), getattr(exc, "lineno", 1), "summary",
                                   f"not valid JSON ({exc}); delete the file or run the night again")) from exc
    if not isinstance(data, dict) or not isinstance(data.get("attempts", []), list):
        raise CatalogError(Problem(str(path), 1, "summary", "expected a night summary object with an `attempts` list; "
                                                           "was it written by `nightly run`?"))
    return data


def select_night(home: Path, night: str | None = None) -> tuple[dict, dict | None]:
    """(the night's summary, the one before it or None); the newest night when ``night`` is None."""
    files = night_files(home)
    if not files:
        raise CatalogError(Problem(str(Path(home) / "nights"), 1, "nights",
                                   "no night summary found; run `nightly run` first or pass --home"))
    names = [p.stem for p in files]
    if night is None:
        i = len(files) - 1
    elif night in names:
        i = names.index(night)
    else:
        near = ", ".join(names[-5:])
        raise CatalogError(Problem(str(Path(home) / "nights"), 1, "--night",
                                   f"no night {night!r}; the newest are: {near}"))
    return read_summary(files[i]), read_summary(files[i - 1]) if i else None


def log_tails(summary: Mapping, lines: int = LOG_TAIL_LINES) -> dict[str, str]:
    """The last lines of every attempt's log that did not pass (a missing log is simply absent)."""
    out = {}
    for a in summary.get("attempts", ()):
        path = a.get("log_path")
        if a.get("outcome") == "passed" or not path or path in out:
            continue
        try:
            out[path] = tail_lines(Path(path).read_text(encoding="utf-8", errors="replace"), lines)
        except OSError:
            continue
    return out


@dataclass(frozen=True)
class ReportInputs:
    """Everything beyond the summaries: what the catalog, history and calibration know."""

    samples: Sequence[Sample] = ()
    tests: Sequence[Test] = ()
    estimates: Sequence[Estimate] = ()
    rules: FlakyRules = FlakyRules()
    quarantine: Mapping | None = None
    uncovered: Sequence[str] = ()
    capacity_gpus: int | None = None
    timeout_floor_s: int = 1800
    timeout_factor: float = 1.25


def night_report(home: Path, night: str | None, inputs: ReportInputs) -> ReportData:
    """The report of one night (the newest by default) in ``home``."""
    summary, previous = select_night(home, night)
    states = replay(inputs.samples, inputs.rules, inputs.quarantine)
    return build_report(
        summary, [previous] if previous else [], inputs.samples, inputs.tests, inputs.estimates, states=states,
        log_tails=log_tails(summary), uncovered=inputs.uncovered, capacity_gpus=inputs.capacity_gpus,
        timeout_floor_s=inputs.timeout_floor_s, timeout_factor=inputs.timeout_factor,
    )


def write_html(home: Path, data: ReportData, out: Path | None = None) -> Path:
    """Render and write the page: ``<home>/reports/<night>.html`` unless ``out`` is given."""
    from pipelines.reporting.html import render_html  # matplotlib only where a page is drawn

    path = out or Path(home) / "reports" / f"{data.night or 'night'}.html"
    write_atomic(path, render_html(data))
    return path
