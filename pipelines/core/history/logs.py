"""Bootstrap history from framework M's CI job logs (formats in ci-facts.md).

Every attempt prints one summary line ``[i/N] <file>  PASS|FAIL|TIMEOUT  elapsed=Ns ...``; an
attempt that ran to the end also prints an ``End (i/N):`` block, a timed-out one a
``TIMEOUT: <file> after N seconds`` line. Those are printed when the attempt ends, so their
timestamp minus elapsed is when it started. GitHub Actions prefixes each line with an ISO-8601
timestamp and a space; logs saved without it parse the same, with no start time.

Numbers are bounded: an elapsed time that is not a number, negative, or above a day is refused,
and every line that looks like the runner's but cannot be read is reported with its line and
why, never silently dropped. The log does not name its suite; :func:`import_logs` infers it from
the runner's command line in the log (``run_suite.py --suite S``), else the one suite every file
of the log registers, else the registration whose est_time the log prints (``_estimated_time=``).
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from pipelines.core.model import MAX_EST_TIME_S, Catalog, Problem, Sample, Test

_STAMP = re.compile(r"^\ufeff?(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?) ")
_SUMMARY = re.compile(r"^\[(\d{1,9})/(\d{1,9})\] (\S+)  (PASS|FAIL|TIMEOUT)  elapsed=(\S+?)s((?: \S+)*)\s*$")
#: a line that means to be a summary line (reported when it is not one exactly)
_LOOSE = re.compile(r"^\[\d+/\d+\]\s+\S+\s+(?:PASS|FAIL|TIMEOUT)\w*\s+elapsed=")
_END = re.compile(r"^End \((\d+)/(\d+)\):\s*$")
_FILENAME = re.compile(r"""^filename=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"), elapsed=([^,\s]+)(?:, _estimated_time=([^,\s]+))?""")
_TIMEOUT = re.compile(r"^TIMEOUT: (\S+) after (\S+) seconds\s*$")
_NUMBER = re.compile(r"\d{1,9}(?:\.\d{1,6})?")
#: the runner's command line: `python3 run_suite.py --suite stage-c-4-gpu-h200 --hw cuda ...`
_COMMAND_SUITE = re.compile(r"\.py\b.*?\s--suite(?:=|\s+)([A-Za-z0-9][A-Za-z0-9._-]*)")
_COMMAND_HW = re.compile(r"\.py\b.*?\s--hw(?:=|\s+)([A-Za-z0-9_-]+)")
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
    #: the est_time the runner printed for this attempt (``_estimated_time=``), if any
    estimated: float | None = None


@dataclass(frozen=True)
class ParsedLog:
    """Everything one job log says: attempts, lines refused (line, field, why), the runner's command."""

    attempts: tuple[LogAttempt, ...]
    refused: tuple[tuple[int, str, str], ...] = ()
    suite: str | None = None
    hw: str | None = None


def seconds(text: str) -> tuple[float | None, str]:
    """A bounded number of seconds from log text, or (None, why it is refused)."""
    if text.startswith("-") and _NUMBER.fullmatch(text[1:]):
        return None, f"{text} s is negative"
    if not _NUMBER.fullmatch(text):
        shown = text if len(text) <= 24 else f"{text[:12]}...({len(text)} characters)"
        return None, f"{shown!r} is not a number of seconds"
    value = float(text)
    if value > MAX_EST_TIME_S:
        return None, f"{value:g} s is more than a day ({MAX_EST_TIME_S} s); no test attempt lasts that long"
    return value, ""


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
    m = re.search(r"(\d{1,9})s?$", value or "")
    return int(m.group(1)) if m else None


def parse_ci_log(text: str) -> list[LogAttempt]:
    """Every attempt in one job log, in order; attempts of a file are numbered from 1."""
    return list(read_ci_log(text).attempts)


def read_ci_log(text: str) -> ParsedLog:
    """Attempts, refused lines and the runner's command line (suite, hw) of one job log."""
    summaries: list[tuple[int, re.Match[str], datetime | None, float]] = []
    ended: dict[str, list[tuple[datetime | None, float | None]]] = defaultdict(list)
    refused: list[tuple[int, str, str]] = []
    suites: list[str] = []
    hws: list[str] = []
    lines = text.splitlines()
    for i, raw in enumerate(lines, start=1):
        line, stamp = _strip_stamp(raw.rstrip("\r"))
        if m := _SUMMARY.match(line):
            value, why = seconds(m.group(5))
            if value is None:
                refused.append((i, "elapsed", f"{why}; attempt not imported"))
                continue
            summaries.append((i, m, stamp, value))
        elif _LOOSE.match(line):
            refused.append((i, "log", "looks like a summary line but is not `[i/N] <file>  PASS|FAIL|TIMEOUT  "
                                      "elapsed=Ns` (two spaces around the status); attempt not imported"))
        elif m := _TIMEOUT.match(line):
            ended[m.group(1)].append((stamp, None))
        elif _END.match(line) and i < len(lines):
            nxt, nstamp = _strip_stamp(lines[i].rstrip("\r"))
            if fm := _FILENAME.match(nxt):
                estimated = None
                if fm.group(3) is not None:
                    estimated, why = seconds(fm.group(3))
                    if estimated is None:
                        refused.append((i + 1, "_estimated_time", f"{why}; not used to infer the suite"))
                try:
                    name = ast.literal_eval(fm.group(1))
                except (ValueError, SyntaxError):
                    refused.append((i + 1, "filename", f"{fm.group(1)[:60]} is not a quoted path"))
                    continue
                ended[name].append((nstamp or stamp, estimated))
        elif "--suite" in line or "--hw" in line:
            if cm := _COMMAND_SUITE.search(line):
                suites.append(cm.group(1))
            if hm := _COMMAND_HW.search(line):
                hws.append(hm.group(1))
    counts: dict[str, int] = defaultdict(int)
    out = []
    for i, m, stamp, elapsed in summaries:
        file, status = m.group(3), m.group(4)
        n = counts[file]
        counts[file] += 1
        # The k-th End/TIMEOUT event of a file is its k-th attempt ending: the better clock.
        events = ended.get(file, [])
        end_stamp, estimated = events[n] if n < len(events) else (None, None)
        end = end_stamp or stamp
        extras = _extras(m.group(6))
        out.append(LogAttempt(
            file=file, status=status, elapsed_s=elapsed, attempt=n + 1, line=i,
            started_at=(end - timedelta(seconds=elapsed)).isoformat() if end else "",
            exit_code=_int_suffix(extras.get("exit")), retry_of=_int_suffix(extras.get("retry_of")),
            estimated=estimated,
        ))
    one = lambda xs: xs[0] if len(set(xs)) == 1 else None  # noqa: E731 - two uses, both here
    return ParsedLog(tuple(out), tuple(refused), one(suites), one(hws))


def _candidates(file: str, by_path: Mapping[str, list[Test]]) -> tuple[str, list[Test]]:
    path = file[2:] if file.startswith("./") else file
    if path in by_path:
        return path, by_path[path]
    suffix = [p for p in by_path if path.endswith("/" + p)]
    return (suffix[0], by_path[suffix[0]]) if len(suffix) == 1 else (path, [])


def import_logs(texts_by_source: Mapping[str, str], catalog: Catalog,
                suite: str | None = None) -> tuple[list[Sample], list[Problem]]:
    """Samples for every attempt whose file and suite are known; one problem per file otherwise.

    The suite is ``suite`` (the job's, from --suite) or else inferred per log (module docstring).
    Every refused line is a problem. Samples carry the sha256 the catalog read from the checkout
    the logs ran, and ``capped`` for timeouts.
    """
    by_path: dict[str, list[Test]] = defaultdict(list)
    for t in catalog.tests:
        by_path[t.path].append(t)
    samples: list[Sample] = []
    problems: list[Problem] = []
    for source, text in texts_by_source.items():
        run_id = "log-" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:12]
        reported: set[str] = set()
        log = read_ci_log(text)
        problems += [Problem(source, line, field, why) for line, field, why in log.refused]
        if not log.attempts and not log.refused:
            problems.append(Problem(source, 1, "log", "no `[i/N] <file>  PASS|FAIL|TIMEOUT  elapsed=Ns` "
                                    "summary lines found; is this a framework M job log?"))
        job_suite, said = (suite, "--suite") if suite else (log.suite, "the log's command line (--suite)")
        common = None if job_suite else _common_suite(log.attempts, by_path)
        for a in log.attempts:
            path, tests = _candidates(a.file, by_path)
            if log.hw and not suite:
                tests = [t for t in tests if t.backend == log.hw or (log.hw, t.backend) in _SAME_HW] or tests
            chosen, how = _choose(tests, a, job_suite, common)
            if len(chosen) != 1:
                if a.file not in reported:
                    reported.add(a.file)
                    problems.append(Problem(source, a.line, "filename" if not tests else "suite",
                                            _why(a.file, tests, job_suite, said, catalog.repo, a)))
                continue
            t = chosen[0]
            samples.append(Sample(
                test_id=t.id, hardware=t.hardware, sha256=t.sha256, outcome=OUTCOME[a.status],  # type: ignore[arg-type]
                elapsed_s=a.elapsed_s, started_at=a.started_at, run_id=run_id, attempt=a.attempt,
                source=f"{source}:{a.line}", capped=a.status == "TIMEOUT",
            ))
    return samples, problems


#: ``--hw`` names as runners spell them vs our backends
_SAME_HW = {("amd", "rocm"), ("rocm", "amd"), ("nvidia", "cuda")}


def _common_suite(attempts: tuple[LogAttempt, ...], by_path: Mapping[str, list[Test]]) -> str | None:
    """The one suite every file of the log registers (a job runs one suite), if there is exactly one."""
    common: set[str] | None = None
    for a in attempts:
        _, tests = _candidates(a.file, by_path)
        if tests:
            suites = {t.suite for t in tests}
            common = suites if common is None else common & suites
    return next(iter(common)) if common and len(common) == 1 else None


def _choose(tests: list[Test], a: LogAttempt, suite: str | None, common: str | None) -> tuple[list[Test], str]:
    if suite:
        return [t for t in tests if t.suite == suite], "suite"
    if len(tests) <= 1:
        return tests, "only"
    if common:
        return [t for t in tests if t.suite == common], "common"
    if a.estimated is not None:
        matching = [t for t in tests if t.est_time == math.ceil(a.estimated)]
        if len(matching) == 1:
            return matching, "est_time"
    return tests, "ambiguous"


def _why(file: str, tests: list[Test], suite: str | None, said: str, repo: str, a: LogAttempt) -> str:
    if not tests:
        return f"{file} is not a registered test in {repo}; check --repo is the checkout the log ran"
    suites = ", ".join(sorted(t.suite for t in tests))
    if suite:
        return f"{file} has no registration for suite {suite!r} from {said} (it registers: {suites}); pass the job's --suite"
    est = (f"_estimated_time={a.estimated:g} matches {sum(t.est_time == math.ceil(a.estimated) for t in tests)} of them"
           if a.estimated is not None else "no _estimated_time for it")
    return (f"{file} registers several suites ({suites}) and the log does not say which ran (no `--suite` on a "
            f"command line, no suite common to all its files, {est}); pass the job's suite with --suite")
