"""Bootstrap history from framework M's CI job logs: each attempt a log reports becomes a sample.

:mod:`.joblog` reads a log into attempts and refused lines. The log does not name its suite;
:func:`import_logs` infers it from the runner's command line in the log (``run_suite.py --suite
S``), else the one suite every file of the log registers, else the registration whose est_time
the log prints (``_estimated_time=``); ``--suite`` never overrides a log's own command line. A
file the log names that has no test is reported with why: not in the checkout, or in it but
unreadable to the catalog (its own problem is quoted).
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Mapping
from typing import Protocol

from pipelines.core.history.joblog import OUTCOME, LogAttempt, ParsedLog, parse_ci_log, read_ci_log, seconds
from pipelines.core.model import Catalog, Problem, Sample, Test, template_digest

#: what callers imported from here before the reading moved to :mod:`.joblog`
__all__ = ["OUTCOME", "LogAttempt", "ParsedLog", "Revisions", "earlier_run_id", "import_logs", "import_parsed",
           "log_run_id", "parse_ci_log", "read_ci_log", "seconds"]


def _candidates(file: str, by_path: Mapping[str, list[Test]]) -> tuple[str, list[Test]]:
    """The catalog path a log's file name means: itself; else the one catalog path it ends with (an
    absolute path in the log); else the one catalog path that ends with it (a runner started from a
    subfolder, ``cd test && python run_suite.py`` printing ``registered/...``)."""
    path = file[2:] if file.startswith("./") else file
    if path in by_path:
        return path, by_path[path]
    suffix = [p for p in by_path if path.endswith("/" + p)]
    if len(suffix) == 1:
        return suffix[0], by_path[suffix[0]]
    inside = [p for p in by_path if p.endswith("/" + path)]
    return (inside[0], by_path[inside[0]]) if len(inside) == 1 and not suffix else (path, [])


class Revisions(Protocol):
    """The --repo checkout's git history, as far as a log's checkout commit needs it (the CLI reads it with git)."""

    def has(self, commit: str) -> bool:
        """Whether ``commit`` is a commit of the checkout's history."""

    def digest(self, commit: str, path: str) -> str | None:
        """The catalog's digest (sha256 of the bytes) of ``path`` at ``commit``; None when it is not there."""


def import_logs(texts_by_source: Mapping[str, str], catalog: Catalog,
                suite: str | None = None, hardware: str | None = None,
                archives: Mapping[str, str] | None = None,
                revisions: Revisions | None = None) -> tuple[list[Sample], list[Problem]]:
    """:func:`import_parsed` of whole log texts."""
    logs = {source: read_ci_log(text) for source, text in texts_by_source.items()}
    return import_parsed(logs, catalog, suite, hardware, archives, revisions)


def import_parsed(logs: Mapping[str, ParsedLog], catalog: Catalog,
                  suite: str | None = None, hardware: str | None = None,
                  archives: Mapping[str, str] | None = None,
                  revisions: Revisions | None = None) -> tuple[list[Sample], list[Problem]]:
    """Samples for every attempt whose file and suite are known; one problem per file otherwise.

    The suite is ``suite`` (the job's, from --suite) or else inferred per log (module docstring). A log
    whose own command line names another suite, or hardware none of ``suite``'s tests run on, is
    refused whole: --suite was given for other logs, and storing its attempts under ``suite`` would
    put one hardware's durations on another's tests.
    ``hardware`` (from --hardware) picks among the tests of a call that lists several
    (``hardware=[...]``): they share the suite, and a log does not say which hardware ran it.
    Every refused line is a problem. Samples carry the sha256 of the test file at the commit the
    log's checkout step printed, read through ``revisions`` (a file changed since then is then not
    current evidence), else the sha256 the catalog read from the checkout (a log naming no commit, or
    one not in the checkout's history: said), and ``capped`` for timeouts. A template test's digest also
    covers its entry (:func:`template_digest`), taken as the checkout's template lists it. ``archives`` (source -> the archive it came from): a
    member without summary lines (a setup step's log) is said only when no member of its archive has any.
    """
    by_path: dict[str, list[Test]] = defaultdict(list)
    for t in catalog.tests:
        by_path[t.path].append(t)
    samples: list[Sample] = []
    problems: list[Problem] = []
    seen: set[tuple] = set()
    archives = archives or {}
    with_runs = {archives[s] for s, log in logs.items() if s in archives and log.attempts}
    for source, log in logs.items():
        reported: set[str] = set()
        run_id = log_run_id(log)
        problems += [Problem(source, line, field, why) for line, field, why in log.refused]
        if not log.attempts and not log.refused and archives.get(source) not in with_runs:
            problems.append(Problem(source, 1, "log", "no `[i/N] <file>  PASS|FAIL|TIMEOUT  elapsed=Ns` "
                                    "summary lines found; is this a framework M job log?"))
        if suite and (clash := _contradicts(log, suite, catalog)):  # the log knows its job better than --suite
            problems.append(Problem(source, *clash))
            continue
        commit, unknown = _commit(log, revisions)
        if unknown and log.attempts:
            problems.append(Problem(source, *unknown))
        job_suite, said = (suite, "--suite") if suite else (log.suite, "the log's command line (--suite)")
        common = None if job_suite else _common_suite(log.attempts, by_path)
        for a in log.attempts:
            path, tests = _candidates(a.file, by_path)
            if log.hw and not suite:
                tests = [t for t in tests if _runs_on(log.hw, t.backend)] or tests
            if hardware:
                on_hw = [t for t in tests if t.hardware == hardware]
                if tests and not on_hw:
                    if a.file not in reported:
                        reported.add(a.file)
                        kinds = ", ".join(sorted({t.hardware or "any" for t in tests}))
                        problems.append(Problem(source, a.line, "hardware", f"{a.file} has no test on hardware "
                                                f"{hardware!r} (it has: {kinds}); check --hardware"))
                    continue
                tests = on_hw
            chosen, how = _choose(tests, a, job_suite, common)
            if len(chosen) != 1:
                if a.file not in reported:
                    reported.add(a.file)
                    problems.append(Problem(source, a.line, "filename" if not tests else "suite",
                                            _why(a.file, tests, job_suite, said, catalog, a)))
                continue
            t = chosen[0]
            sha256 = t.sha256
            if commit and revisions is not None:
                sha256 = revisions.digest(commit[0], t.path)
                if sha256 is None:
                    if a.file not in reported:
                        reported.add(a.file)
                        problems.append(Problem(source, commit[1], "commit", f"{t.path} is not in commit {commit[0]} "
                                                "that the log's checkout printed, so what ran is unknown; its attempts "
                                                "are not imported (check --repo is the framework the log ran)"))
                    continue
                if t.fmt == "template":  # the file as the commit had it, run as the checkout's template lists it
                    sha256 = template_digest(sha256, t.gpus, t.env, t.args)
            # also in another log given: the whole job's log and its step's log, or a log saved while the job ran
            # and the whole one (without timestamps, one run by its head: attempt k of a file is the same attempt)
            same = (t.id, t.hardware, a.file, a.started_at, a.elapsed_s, a.status, a.attempt) if a.started_at \
                else (run_id, t.id, t.hardware, a.attempt)
            if same in seen:
                continue
            seen.add(same)
            samples.append(Sample(
                test_id=t.id, hardware=t.hardware, sha256=sha256, outcome=OUTCOME[a.status],  # type: ignore[arg-type]
                elapsed_s=a.elapsed_s, started_at=a.started_at, run_id=run_id, attempt=a.attempt,
                source=f"{source}:{a.line}", capped=a.status == "TIMEOUT",
            ))
    return samples, problems


def _commit(log: ParsedLog, revisions: Revisions | None) -> tuple[tuple[str, int] | None, tuple | None]:
    """((commit, line) whose files the log's attempts ran, or None), and (line, field, why) when the log names a
    commit that cannot be used: its samples then carry the checkout's digests, as for a log naming none."""
    if not log.commits or revisions is None:
        return None, None
    known = [c for c in log.commits if revisions.has(c[0])]
    if len({c for c, _ in known}) == 1:
        return known[0], None
    as_today = ("its samples carry the digests of the --repo checkout's files, so calibration counts them as "
                "current evidence even if a test file changed since")
    if known:
        lines = ", ".join(f"line {line}: {c[:12]}" for c, line in known)
        return None, (known[0][1], "commit", f"the log's checkouts name several commits ({lines}); which one ran the "
                                             f"tests is unknown: {as_today}")
    c, line = log.commits[0]
    return None, (line, "commit", f"commit {c} that the log's checkout printed is not in the history of --repo: "
                                  f"{as_today}; fetch it (`git fetch origin {c}`) before importing, or give --repo "
                                  "the checkout the log ran")


def log_run_id(log: ParsedLog) -> str:
    """The job run's id, from what its attempts say (file, start, elapsed, outcome), not from the whole text:
    GitHub's whole-job log and the same job's step log differ in their other lines but are one run, and
    the store keeps an attempt once per run id. A log without timestamps is named by its head (the text
    before its first attempt's summary line, and that attempt): the same in a log saved while the job ran
    and in the whole log downloaded later, so their attempts are stored once, while two runs differ as soon
    as their output or first result does."""
    if not log.attempts or not all(a.started_at for a in log.attempts):
        return "log-" + (log.head or log.digest)[:12]
    said = "\n".join(f"{a.file}\t{a.started_at}\t{a.elapsed_s:g}\t{a.status}\t{a.attempt}" for a in log.attempts)
    return "log-" + hashlib.sha256(said.encode("utf-8", "replace")).hexdigest()[:12]


def earlier_run_id(log: ParsedLog) -> str | None:
    """The id nightly gave a log without timestamps before it named them by their head (the hash of the
    whole text), so that such a log imported then is not stored again; None for a log with timestamps."""
    if not log.attempts or not all(a.started_at for a in log.attempts):
        return "log-" + log.digest[:12]
    return None


#: a runner's ``--hw`` name, or a backend (framework M's ``rocm``, SGLang's ``amd``) -> its hardware family
#: (a name not listed is its own family, and is not checked against --suite)
_BACKEND = {"cuda": "cuda", "nvidia": "cuda", "rocm": "rocm", "amd": "rocm", "cpu": "cpu"}


def _runs_on(hw: str, backend: str) -> bool:
    """Whether a log's ``--hw`` runs tests registered for ``backend`` (``--hw amd`` runs ``register_rocm_ci``
    tests, and SGLang's ``register_amd_ci`` ones)."""
    return _BACKEND.get(hw, hw) == _BACKEND.get(backend, backend)


def _contradicts(log: ParsedLog, suite: str, catalog: Catalog) -> tuple[int, str, str] | None:
    """(line, field, why) when the log's own command line contradicts --suite: another ``--suite``, or a
    ``--hw`` that no test of ``suite`` runs on (checked only for the backends we know)."""
    refused = "nothing of this log is imported"
    if log.suite and log.suite != suite:
        return (log.suite_line, "suite", f"the log's command line runs suite {log.suite!r} but --suite says "
                f"{suite!r}; {refused}: leave --suite out (this log names its own suite), or import this log in a command "
                "of its own without --suite")
    if log.hw and not log.suite and (backend := _BACKEND.get(log.hw)):
        backends = {t.backend for t in catalog.tests if t.suite == suite}
        if backends and not any(_runs_on(log.hw, b) for b in backends):
            return (log.hw_line, "suite", f"the log's command line runs on --hw {log.hw} ({backend}) but the tests "
                    f"of suite {suite!r} from --suite run on {', '.join(sorted(backends))}; {refused}: import it "
                    "separately, with the suite its job ran (or without --suite, to infer it)")
    return None



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
    """The test of ``tests`` (one file's) that ran the attempt: by the job's suite, then, where the SGLang family
    registers that suite both per-commit and nightly (its runner keys a registration on suite and nightly), by the
    log's ``--nightly`` (else the est_time it printed); else by the est_time alone."""
    if suite or (common and len(tests) > 1):
        chosen = [t for t in tests if t.suite == (suite or common)]
        if len({t.nightly for t in chosen}) > 1 and all(t.nightly_rule == "exclusive" for t in chosen):
            if a.nightly is not None:
                chosen = [t for t in chosen if t.nightly == a.nightly]
            if len(chosen) > 1 and a.estimated is not None:
                chosen = [t for t in chosen if t.est_time == math.ceil(a.estimated)] or chosen
        return chosen, "suite" if suite else "common"
    if len(tests) <= 1:
        return tests, "only"
    if a.estimated is not None:
        matching = [t for t in tests if t.est_time == math.ceil(a.estimated)]
        if len(matching) == 1:
            return matching, "est_time"
    return tests, "ambiguous"


def _why(file: str, tests: list[Test], suite: str | None, said: str, catalog: Catalog, a: LogAttempt) -> str:
    if not tests:
        path = file[2:] if file.startswith("./") else file
        broken = next((p for p in catalog.problems if p.path == path or path.endswith("/" + p.path)), None)
        if broken is not None:  # the file is there, but the catalog could not make a test of it
            return (f"{file} has no test in the catalog because of its own problem ({broken}); fix the file, "
                    "then import the log again")
        return f"{file} is not a registered test in {catalog.repo}; check --repo is the checkout the log ran"
    suites = ", ".join(sorted(t.suite for t in tests))
    one_suite = {t.suite for t in tests}
    if len(tests) > 1 and len(one_suite) == 1 and (not suite or suite in one_suite):
        if len({t.hardware for t in tests}) == 1 and len({t.nightly for t in tests}) > 1:
            # the SGLang family's per-commit and nightly pair: one hardware, so --hardware cannot tell them apart
            est = (f"its _estimated_time={a.estimated:g} matches "
                   f"{sum(t.est_time == math.ceil(a.estimated) for t in tests)} of them" if a.estimated is not None
                   else "it prints no _estimated_time")
            return (f"{file} registers suite {tests[0].suite!r} both per-commit and nightly=True "
                    f"({', '.join(sorted(t.id for t in tests))}) and the log does not say which ran: it holds no one "
                    f"runner command line (`run_suite.py --suite S`, with `--nightly` for the nightly run) and {est}; "
                    "import the whole job log, whose command line says it")
        kinds = ", ".join(sorted(t.hardware for t in tests))
        return (f"{file} registers suite {tests[0].suite!r} on several hardware ({kinds}) and the log does not say "
                "which ran it; pass the job's hardware with --hardware")
    if suite:
        return f"{file} has no registration for suite {suite!r} from {said} (it registers: {suites}); pass the job's --suite"
    est = (f"_estimated_time={a.estimated:g} matches {sum(t.est_time == math.ceil(a.estimated) for t in tests)} of them"
           if a.estimated is not None else "no _estimated_time for it")
    return (f"{file} registers several suites ({suites}) and the log does not say which ran (no `--suite` on a "
            f"command line, no suite common to all its files, {est}); pass the job's suite with --suite")
