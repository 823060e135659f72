"""Bootstrap history from framework M's CI job logs (formats in ci-facts.md).

Every attempt prints one summary line ``[i/N] <file>  PASS|FAIL|TIMEOUT  elapsed=Ns ...``; an
attempt that ran to the end also prints an ``End (i/N):`` block, a timed-out one a
``TIMEOUT: <file> after N seconds`` line. Those are printed when the attempt ends, so their
timestamp minus elapsed is when it started. GitHub Actions prefixes each line with an ISO-8601
timestamp and a space; logs saved without it parse the same, with no start time.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from pipelines.core.model import Catalog, Problem, Sample, Test

_STAMP = re.compile(r"^\ufeff?(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?) ")
_SUMMARY = re.compile(r"^\[(\d+)/(\d+)\] (\S+)  (PASS|FAIL|TIMEOUT)  elapsed=(\d+(?:\.\d+)?)s((?: \S+)*)\s*$")
_END = re.compile(r"^End \((\d+)/(\d+)\):\s*$")
_FILENAME = re.compile(r"""^filename=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"), elapsed=(\d+(?:\.\d+)?)""")
_TIMEOUT = re.compile(r"^TIMEOUT: (\S+) after (\d+(?:\.\d+)?) seconds\s*$")
OUTCOME = {"PASS": "passed", "FAIL": "failed", "TIMEOUT": "timed_out"}


@dataclass(frozen=True)
class LogAttempt:
    """One attempt of one file as a job log reports it."""

    file: str
    status: str  # PASS | FAIL | TIMEOUT
    elapsed_s: float
    attempt: int
    line: int
    started_at: str = ""
    exit_code: int | None = None
    retry_of: int | None = None


def _strip_stamp(line: str) -> tuple[str, datetime | None]:
    m = _STAMP.match(line)
    if not m:
        return line.lstrip("\ufeff"), None
    try:
        stamp = datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
    except ValueError:
        return line[m.end():], None
    return line[m.end():], stamp


def _extras(tail: str) -> dict[str, str]:
    out = {}
    for word in tail.split():
        key, _, value = word.partition("=")
        out[key] = value
    return out


def _int_suffix(value: str | None) -> int | None:
    m = re.search(r"(\d+)s?$", value or "")
    return int(m.group(1)) if m else None


def parse_ci_log(text: str) -> list[LogAttempt]:
    """Every attempt in one job log, in order; attempts of a file are numbered from 1."""
    summaries: list[tuple[int, re.Match[str], datetime | None]] = []
    ended: dict[str, list[datetime | None]] = defaultdict(list)
    lines = text.splitlines()
    for i, raw in enumerate(lines, start=1):
        line, stamp = _strip_stamp(raw.rstrip("\r"))
        if m := _SUMMARY.match(line):
            summaries.append((i, m, stamp))
        elif m := _TIMEOUT.match(line):
            ended[m.group(1)].append(stamp)
        elif _END.match(line) and i < len(lines):
            nxt, nstamp = _strip_stamp(lines[i].rstrip("\r"))
            if fm := _FILENAME.match(nxt):
                ended[ast.literal_eval(fm.group(1))].append(nstamp or stamp)
    counts: dict[str, int] = defaultdict(int)
    out = []
    for i, m, stamp in summaries:
        file, status, elapsed = m.group(3), m.group(4), float(m.group(5))
        n = counts[file]
        counts[file] += 1
        # The k-th End/TIMEOUT event of a file is its k-th attempt ending: the better clock.
        events = ended.get(file, [])
        end = (events[n] if n < len(events) else None) or stamp
        extras = _extras(m.group(6))
        out.append(LogAttempt(
            file=file, status=status, elapsed_s=elapsed, attempt=n + 1, line=i,
            started_at=(end - timedelta(seconds=elapsed)).isoformat() if end else "",
            exit_code=_int_suffix(extras.get("exit")), retry_of=_int_suffix(extras.get("retry_of")),
        ))
    return out


def _candidates(file: str, by_path: Mapping[str, list[Test]]) -> tuple[str, list[Test]]:
    path = file[2:] if file.startswith("./") else file
    if path in by_path:
        return path, by_path[path]
    suffix = [p for p in by_path if path.endswith("/" + p)]
    return (suffix[0], by_path[suffix[0]]) if len(suffix) == 1 else (path, [])


def import_logs(texts_by_source: Mapping[str, str], catalog: Catalog,
                suite: str | None = None) -> tuple[list[Sample], list[Problem]]:
    """Samples for every attempt whose file and suite are known; one problem per file otherwise.

    The suite comes from ``suite`` (the job's) or else the file's only registration. Samples carry
    the sha256 the catalog read from the checkout the logs ran, and ``capped`` for timeouts.
    """
    by_path: dict[str, list[Test]] = defaultdict(list)
    for t in catalog.tests:
        by_path[t.path].append(t)
    samples: list[Sample] = []
    problems: list[Problem] = []
    for source, text in texts_by_source.items():
        run_id = "log-" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:12]
        reported: set[str] = set()
        attempts = parse_ci_log(text)
        if not attempts:
            problems.append(Problem(source, 1, "log", "no `[i/N] <file>  PASS|FAIL|TIMEOUT  elapsed=Ns` "
                                    "summary lines found; is this a framework M job log?"))
        for a in attempts:
            path, tests = _candidates(a.file, by_path)
            chosen = [t for t in tests if t.suite == suite] if suite else tests
            if len(chosen) != 1:
                if a.file not in reported:
                    reported.add(a.file)
                    problems.append(Problem(source, a.line, "filename" if not tests else "suite",
                                            _why(a.file, tests, suite, catalog.repo)))
                continue
            t = chosen[0]
            samples.append(Sample(
                test_id=t.id, hardware=t.hardware, sha256=t.sha256, outcome=OUTCOME[a.status],  # type: ignore[arg-type]
                elapsed_s=a.elapsed_s, started_at=a.started_at, run_id=run_id, attempt=a.attempt,
                source=f"{source}:{a.line}", capped=a.status == "TIMEOUT",
            ))
    return samples, problems


def _why(file: str, tests: list[Test], suite: str | None, repo: str) -> str:
    if not tests:
        return f"{file} is not a registered test in {repo}; check --repo is the checkout the log ran"
    suites = ", ".join(sorted(t.suite for t in tests))
    if suite:
        return f"{file} has no registration for suite {suite!r} (it registers: {suites}); pass the job's --suite"
    return f"{file} registers several suites ({suites}); pass the job's suite with --suite"
