"""Reading one of framework M's CI job logs into attempts (formats in ci-facts.md).

Every attempt prints one summary line ``[i/N] <file>  PASS|FAIL|TIMEOUT  elapsed=Ns ...``; an
attempt that ran to the end also prints an ``End (i/N):`` block, a timed-out one a
``TIMEOUT: <file> after N seconds`` line. Those are printed when the attempt ends, so their
timestamp minus elapsed is when it started. Each summary line is paired with its End block or
TIMEOUT line by identity (same file, same kind of ending, same seconds, printed before it), so a
line lost from the log costs one attempt its clock and never moves another's onto it. GitHub
Actions prefixes each line with an ISO-8601 timestamp and a space; logs saved without it parse
the same, with no start time. A file name may hold spaces (the status is set off by two).

Numbers are bounded: an elapsed time that is not a number, negative, or above a day is refused,
and every line that looks like the runner's but cannot be read (cut off, garbled, bytes that
were not UTF-8), and every End block without its summary line, is reported with its line and
why, never silently dropped. So is a log that ends before its ``[N/N]`` summary line: the files the
runner numbered after the last one it reported have no result (a job cut off or cancelled).
"""

from __future__ import annotations

import ast
import hashlib
import re
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import chain, groupby

from pipelines.core.model import MAX_EST_TIME_S

_STAMP = re.compile(r"^\ufeff?(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?) ")
#: the file name runs to the two spaces before the status, so a name may hold single spaces
_SUMMARY = re.compile(r"^\[(\d{1,9})/(\d{1,9})\] (\S(?:.*?\S)?)  (PASS|FAIL|TIMEOUT)  elapsed=(\S+?)s((?: \S+)*)\s*$")
#: a line that means to be a summary line (reported when it is not one exactly); two patterns, not one
#: ``\S.*?\s+STATUS``, whose backtracking over a long run of spaces would take quadratic time
_LOOSE_HEAD = re.compile(r"^\[\d+/\d+\]\s+\S")
_LOOSE_TAIL = re.compile(r"\s(?:PASS|FAIL|TIMEOUT)\w*\s+elapsed=")
#: the start of a runner line (an End block, a timeout): reported when the rest is not right; a
#: ``[i/N]`` line only when it names a test file the way the runner does (:func:`_cut_summary`)
_RUNNER_START = re.compile(r"^(?:End \(|filename=|TIMEOUT: )")
#: the first character of every line the runner prints (``[i/N]``, ``End (``, ``filename=``, ``TIMEOUT:``)
_RUNNER_HEADS = frozenset("[EfT")
_INDEXED = re.compile(r"^\[\d{1,9}/\d{1,9}\] (.*)$")
_END = re.compile(r"^End \((\d+)/(\d+)\):\s*$")
_FILENAME = re.compile(r"""^filename=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"), elapsed=([^,\s]+)(?:, _estimated_time=([^,\s]+))?""")
_TIMEOUT = re.compile(r"^TIMEOUT: (\S(?:.*\S)?) after (\S+) seconds\s*$")
_SUMMARY_FORM = "`[i/N] <file>  PASS|FAIL|TIMEOUT  elapsed=Ns`"
#: the first line of a log the nightly's local launcher wrote for one attempt (pipelines/launch/local.py);
#: such a log holds the runner's `TIMEOUT: <file> after N seconds` line on a timeout, never a summary line
_NIGHTLY_ATTEMPT = re.compile(r"^# nightly: \S.* attempt \d+ on \S+ gpus=\S* timeout=\d+s")
_NIGHTLY_ATTEMPT_LOG = ("a nightly attempt log (its first line `# nightly: TEST attempt N on NODE ...`, written by "
                        "`nightly run`), not a framework CI job log: the night recorded this attempt in history "
                        "already; import the framework's own job logs")
_NO_FILENAME = ("End block without its `filename='<file>', elapsed=N` line; that attempt's record is incomplete, "
                "check the log was saved whole")
_NOT_UTF8 = ("holds bytes that are not UTF-8 (shown as U+FFFD), so it cannot match a test file; "
             "save the job log as it was downloaded, without re-encoding it")
_NUMBER = re.compile(r"\d{1,9}(?:\.\d{1,6})?")
#: the runner's command line: `python3 run_suite.py --suite stage-c-4-gpu-h200 --hw cuda ...`
_COMMAND_SUITE = re.compile(r"\.py\b.*?\s--suite(?:=|\s+)([A-Za-z0-9][A-Za-z0-9._-]*)")
_COMMAND_HW = re.compile(r"\.py\b.*?\s--hw(?:=|\s+)([A-Za-z0-9_-]+)")
#: SGLang's runner runs the nightly=True registrations of its suite with ``--nightly``, the others without it
_COMMAND_NIGHTLY = re.compile(r"\.py\b.*?\s--nightly(?=\s|$)")
#: the most physical lines one command line is joined from (GitHub echoes a multi-line ``run:`` block
#: line by line, each continued with ``\``): enough for any command, and test output whose lines end
#: in ``\`` (a printed shell script, a C macro) never joins more
_CONTINUED_MAX = 16
#: GitHub's checkout step prints the commit it checked out: ``[command]/usr/bin/git log -1 --format=%H`` then the
#: hash on the next line (older versions of actions/checkout quote both: ``--format='%H'``, ``'<hash>'``)
_CHECKOUT_LOG = re.compile(r"""^\[command\].*git(?:\.exe)?"?\s+log -1 --format=(?:%H|'%H')\s*$""")
_COMMIT = re.compile(r"^'?([0-9a-f]{40}(?:[0-9a-f]{24})?)'?\s*$")
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
    #: whether the runner's command line of its log ran nightly registrations (SGLang's ``run_suite.py --nightly``):
    #: None when the log has no such command line, or several that disagree
    nightly: bool | None = None


@dataclass(frozen=True)
class ParsedLog:
    """Everything one job log says: attempts, lines refused (line, field, why), the runner's command
    (suite, hw, and the line that names each), and the sha256 of its text (what names a run whose lines
    have no timestamps)."""

    attempts: tuple[LogAttempt, ...]
    refused: tuple[tuple[int, str, str], ...] = ()
    suite: str | None = None
    hw: str | None = None
    digest: str = ""
    suite_line: int = 0
    hw_line: int = 0
    #: (commit, line) of each commit the job's checkout step printed
    commits: tuple[tuple[str, int], ...] = ()
    #: the sha256 of the text before the first attempt's summary line and of that attempt (file, status,
    #: seconds): the same in the whole log and in any part of it saved while the job ran that holds an
    #: attempt, so it names a run whose lines have no timestamps ("" when the log has no attempt)
    head: str = ""


def seconds(text: str) -> tuple[float | None, str]:
    """A bounded number of seconds from log text, or (None, why it is refused)."""
    if text.startswith("-") and _NUMBER.fullmatch(text[1:]):
        return None, f"{text} s is negative"
    shown = text if len(text) <= 24 else f"{text[:12]}...({len(text)} characters)"
    if re.fullmatch(r"\d{10,}(?:\.\d+)?", text):  # a number, too long for _NUMBER: far above the bound
        value = f"{float(text):g}" if len(text) <= 24 else shown
        return None, f"{value} s is more than a day ({MAX_EST_TIME_S} s); no test attempt lasts that long"
    if not _NUMBER.fullmatch(text):
        return None, f"{shown!r} is not a number of seconds"
    value = float(text)
    if value > MAX_EST_TIME_S:
        return None, f"{value:g} s is more than a day ({MAX_EST_TIME_S} s); no test attempt lasts that long"
    return value, ""


#: terminal colour and cursor sequences (a runner's PASS/FAIL in colour, kept in GitHub's raw logs)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _strip_stamp(line: str) -> tuple[str, str]:
    """The line without GitHub's timestamp and without colour codes, and the timestamp's text ("" when
    none): :func:`_when` reads it only for the runner's lines, not for every line of test output."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    m = _STAMP.match(line)
    if not m:
        return line.lstrip("\ufeff"), ""
    return line[m.end():], m.group(1)


def _when(stamp: str) -> datetime | None:
    """A timestamp's text as a datetime; None when there is none or it is no date."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None
    except ValueError:
        return None


def _extras(tail: str) -> dict[str, str]:
    out = {}
    for word in tail.split():
        key, _, value = word.partition("=")
        out[key] = value
    return out


#: summary-line extras that carry a number (``exit=1``, ``retry_of=attempt=1``, ``timeout_after=1800s``)
_NUMBERED = frozenset({"exit", "retry_of", "timeout_after"})


def _int_suffix(value: str | None) -> int | None:
    m = re.search(r"(\d{1,9})s?$", value or "")
    return int(m.group(1)) if m else None


def parse_ci_log(text: str) -> list[LogAttempt]:
    """Every attempt in one job log, in order; attempts of a file are numbered from 1."""
    return list(read_ci_log(text).attempts)


@dataclass(frozen=True)
class _Ended:
    """An End block or a TIMEOUT line: the runner's word that one attempt of ``file`` ended."""

    line: int
    file: str
    timeout: bool
    seconds: float | None  # End: elapsed; TIMEOUT: after N seconds
    stamp: datetime | None
    estimated: float | None = None


def _pieces(text: str) -> Iterator[str]:
    """The lines of ``text``, each with its ``\\n``, without a second copy of the whole text."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        yield text[start:end + 1]
        start = end + 1
    yield text[start:]


def read_ci_log(text: str | Iterable[str], first_line: int = 1) -> ParsedLog:
    """Attempts, refused lines and the runner's command line (suite, hw) of one job log.

    ``text`` is the whole log, or its lines each ending in ``\\n`` as a file opened with
    ``newline="\\n"`` gives them: a log of hundreds of MB is read line by line, keeping only the
    runner's lines. Lines are split on newlines only (``str.splitlines`` would also cut at form
    feeds and other separators that test output may hold). A line that starts like the runner's
    but is cut off or garbled is refused with why, never skipped. ``first_line`` is the number of its
    first line in the file it came from (a job's lines in a ``gh run view --log`` file).
    """
    summaries: list[tuple[int, re.Match[str], datetime | None, float]] = []
    ended: list[_Ended] = []
    refused: list[tuple[int, str, str]] = []
    suites: list[tuple[str, int]] = []  # (suite, line) of each command line that names one
    hws: list[tuple[str, int]] = []
    nightly: list[bool] = []  # of each command line, whether it says --nightly
    digest = hashlib.sha256()
    ends: list[tuple[int, int, int]] = []  # (line, i, N) of each `End (i/N):` line
    names: list[int] = []  # each line that starts `filename=`, the second line of an End block
    last: tuple[int, int, int] | None = None  # (line, i, N) of the furthest `[i/N]` summary line of the last N
    continued: list[str] = []  # the lines so far of a command continued with `\`
    commits: list[tuple[str, int]] = []
    checkout_at = 0  # a checkout's `git log -1 --format=%H` line, whose next line is the commit
    head = hashlib.sha256()  # the lines before the first attempt's summary line (ParsedLog.head)
    before = b""  # the line before this one, added to ``head`` one line late: the summary line itself never is
    i = first_line - 1
    for i, raw in enumerate(_pieces(text) if isinstance(text, str) else text, start=first_line):
        # the digest names a run without timestamps: over the text with every \r a line end, as plain logs were
        # read before lines ended at \n only, so importing such a log again does not store its attempts twice
        hashed = raw.replace("\r\n", "\n").replace("\r", "\n") if "\r" in raw else raw
        data = hashed.encode("utf-8", "replace")
        digest.update(data)
        if not summaries:
            head.update(before)
            before = data
        line, stamp = _strip_stamp(raw.removesuffix("\n").rstrip("\r"))
        if i == first_line and _NIGHTLY_ATTEMPT.match(line):  # its TIMEOUT line is ours, no attempt of a job to import
            return ParsedLog((), ((i, "log", _NIGHTLY_ATTEMPT_LOG),), digest=digest.hexdigest())
        if checkout_at and (cm := _COMMIT.match(line)):
            commits.append((cm.group(1), i))
        elif checkout_at:  # cut, garbled, or git's own error: said, never silently the checkout's files
            refused.append((i, "commit", f"{line.strip()[:60]!r} after the checkout's `git log -1 --format=%H` line "
                                         "is not a commit hash; this checkout's commit is unknown (its samples carry "
                                         "the --repo checkout's digests unless another checkout line names one)"))
        checkout_at = i if line.startswith("[command]") and _CHECKOUT_LOG.match(line) else 0
        # `run_suite.py \` then `  --suite S \`: one command over several lines, read as one line once whole;
        # each physical line is still read below as itself (its own number in every attempt and refusal)
        if joined := bool(continued) or line.endswith("\\"):
            continued.append(line.removesuffix("\\"))
            if not line.endswith("\\") or len(continued) == _CONTINUED_MAX:
                _command(" ".join(continued), i - len(continued) + 1, suites, hws, nightly)
                continued = []
        if line[:1] not in _RUNNER_HEADS:  # test output, the bulk of a log: only a command line matters
            if not joined:
                _command(line, i, suites, hws, nightly)
            continue
        if m := _SUMMARY.match(line):
            index, total = int(m.group(1)), int(m.group(2))
            if last is None or total != last[2] or index >= last[1]:
                last = (i, index, total)
            value, why = seconds(m.group(5))
            if "\ufffd" in m.group(3):
                refused.append((i, "filename", f"{m.group(3)[:60]!r} {_NOT_UTF8}; attempt not imported"))
            elif value is None:
                refused.append((i, "elapsed", f"{why}; attempt not imported"))
            else:
                if not summaries:  # the first attempt: what was printed before it, and itself without its extras
                    head.update(f"\0{m.group(3)}\t{m.group(4)}\t{value:g}".encode("utf-8", "replace"))
                summaries.append((i, m, _when(stamp), value))
                for key, given in _extras(m.group(6)).items():  # a garbled number is said, not silently dropped
                    if key in _NUMBERED and _int_suffix(given) is None:
                        refused.append((i, key, f"{given[:40]!r} is not a number; read as absent (the attempt is "
                                                "imported)"))
        elif _LOOSE_HEAD.match(line) and _LOOSE_TAIL.search(line):
            refused.append((i, "log", f"looks like a summary line but is not {_SUMMARY_FORM} (two spaces around the "
                                      "status); attempt not imported"))
        elif m := _TIMEOUT.match(line):
            after, _ = seconds(m.group(2))
            ended.append(_Ended(i, m.group(1), True, after, _when(stamp)))
        elif fm := _FILENAME.match(line):  # the End block's line that says which attempt ended
            names.append(i)
            event = _end_block(i, fm, _when(stamp), refused)
            ended += [event] if event else []
        elif em := _END.match(line):
            ends.append((i, int(em.group(1)), int(em.group(2))))
        elif _RUNNER_START.match(line) or _cut_summary(line):
            names += [i] if line.startswith("filename=") else []  # refused below, but its End block is not unended
            refused.append((i, "log", _cut(line)))
        elif not joined:
            _command(line, i, suites, hws, nightly)
    if continued:  # the log ends inside a continued command
        _command(" ".join(continued), i - len(continued) + 1, suites, hws, nightly)
    if last is not None and last[1] < last[2]:  # the job stopped before its last file's summary line
        refused.append(_ends_early(*last))
    pairs, unpaired = _pair(summaries, ended)
    refused += [(line, "log", _NO_FILENAME) for line in _unanswered(ends, names, summaries, pairs)]
    refused += [(e.line, "log", f"{'TIMEOUT line' if e.timeout else 'End block'} of {e.file} has no summary line "
                                f"{_SUMMARY_FORM} after it (the log may be cut off); attempt not imported")
                for e in unpaired]
    counts: dict[str, int] = defaultdict(int)
    out = []
    ran_nightly = nightly[0] if len(set(nightly)) == 1 else None
    for i, m, stamp, elapsed in summaries:
        file, status = m.group(3), m.group(4)
        counts[file] += 1
        event = pairs.get(i)
        end = (event.stamp if event else None) or stamp  # the End block's clock is the better one
        extras = _extras(m.group(6))
        out.append(LogAttempt(
            file=file, status=status, elapsed_s=elapsed, attempt=counts[file], line=i,
            started_at=(end - timedelta(seconds=elapsed)).isoformat() if end else "",
            exit_code=_int_suffix(extras.get("exit")), retry_of=_int_suffix(extras.get("retry_of")),
            estimated=event.estimated if event else None, nightly=ran_nightly,
        ))
    suite, suite_line = _one(suites)
    hw, hw_line = _one(hws)
    return ParsedLog(tuple(out), tuple(sorted(refused)), suite, hw, digest.hexdigest(), suite_line, hw_line,
                     tuple(commits), head.hexdigest() if summaries else "")


#: a line of ``gh run view --log``: the job's name, a tab, the step's name, a tab, then the job log's own line
#: (GitHub's timestamp first; a step's first line may start with a byte order mark)
_GH_RUN_LINE = re.compile(r"^([^\t\r\n]+)\t[^\t\r\n]*\t(?=\ufeff?\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})")


def is_gh_run_log(first: str) -> bool:
    """Whether a file whose first line is ``first`` is ``gh run view --log`` output (every job of a run in one file)."""
    return bool(_GH_RUN_LINE.match(first.lstrip("\ufeff")))


def read_gh_run_log(lines: Iterable[str]) -> dict[str, ParsedLog]:
    """Job name -> what its log says, of ``gh run view --log`` output: each line is the job's log line behind
    ``JOB<TAB>STEP<TAB>``; gh prints the jobs one after another. Each job is read as its own log, without the
    prefix, its lines numbered as in the whole file; a job named again later is read as another log
    (``JOB (2)``). Line by line, one job at a time: the file is never held whole."""
    found: dict[str, ParsedLog] = {}
    named: dict[str, int] = {}  # how many blocks each job name had so far
    current = [""]

    def job_of(numbered: tuple[int, str]) -> str:
        job, _ = _gh_split(numbered[1])
        current[0] = job if job is not None else current[0]  # a line without the prefix stays with its job
        return current[0]

    for job, group in groupby(enumerate(lines, start=1), key=job_of):
        first, raw = next(group)
        rest = (_gh_split(line)[1] for _, line in group)  # noqa: B031 - read whole before the next group
        k = named[job] = named.get(job, 0) + 1
        name = job if k == 1 else f"{job} ({k})"
        while name in found:  # a job literally named "JOB (2)" beside JOB's second block
            k += 1
            name = f"{job} ({k})"
        found[name] = read_ci_log(chain([_gh_split(raw)[1]], rest), first_line=first)
    return found


def _gh_split(line: str) -> tuple[str | None, str]:
    """(job, the job log's line) of a ``gh run view --log`` line; (None, the line) for one without the prefix."""
    m = _GH_RUN_LINE.match(line.lstrip("\ufeff"))
    return (m.group(1), line.lstrip("\ufeff")[m.end():]) if m else (None, line)


def _one(said: list[tuple[str, int]]) -> tuple[str | None, int]:
    """The one value the log's command lines give, and the first line giving it; (None, 0) when none or several."""
    return (said[0][0], said[0][1]) if len({value for value, _ in said}) == 1 else (None, 0)


def _ends_early(line: int, index: int, total: int) -> tuple[int, str, str]:
    """The runner numbers the files of its job ``[i/N]``: a log whose furthest summary line is ``[i/N]`` with
    i < N ran N - i files to no result (the file running when the job was cut off, and those after it)."""
    left = total - index
    return (line, "log", f"log ends after [{index}/{total}]: {left} of {total} files {'have' if left > 1 else 'has'} "
                         "no summary line (the job was cut off or cancelled, or the runner stopped at a failure), so "
                         "they get no sample; if the log was saved while the job ran, download it again once it is done")


def _command(line: str, at: int, suites: list[tuple[str, int]], hws: list[tuple[str, int]], nightly: list[bool]
             ) -> None:
    """The suite and hardware of a runner's command line (``run_suite.py --suite S --hw B``), if it is one, and
    whether it says ``--nightly``."""
    if "--suite" in line or "--hw" in line:
        if cm := _COMMAND_SUITE.search(line):
            suites.append((cm.group(1), at))
        if hm := _COMMAND_HW.search(line):
            hws.append((hm.group(1), at))
        if cm or hm:
            nightly.append(bool(_COMMAND_NIGHTLY.search(line)))


def _end_block(line: int, fm: re.Match[str], stamp: datetime | None, refused: list) -> _Ended | None:
    """The End block's ``filename=..., elapsed=...`` line (its ``End (i/N):`` line adds nothing); refused parts are reported."""
    try:
        name = ast.literal_eval(fm.group(1))
    except (ValueError, SyntaxError):
        refused.append((line, "filename", f"{fm.group(1)[:60]} is not a quoted path; End block not used"))
        return None
    if "\ufffd" in name:
        refused.append((line, "filename", f"{name[:60]!r} {_NOT_UTF8}; End block not used"))
        return None
    elapsed, why = seconds(fm.group(2))
    if elapsed is None:
        refused.append((line, "elapsed", f"{why}; End block not used to time the attempt"))
    estimated = None
    if fm.group(3) is not None:
        estimated, why = seconds(fm.group(3))
        if estimated is None:
            refused.append((line, "_estimated_time", f"{why}; not used to infer the suite"))
    return _Ended(line, name, False, elapsed, stamp, estimated)


def _unanswered(ends: list[tuple[int, int, int]], names: list[int], summaries: list,
               pairs: dict[int, _Ended]) -> list[int]:
    """The ``End (i/N):`` lines that no ``filename=`` line after them answers. Not only the very next line:
    a second runner's or the test's own output may be printed between the two (interleaved streams).
    A ``filename=`` line whose attempt has a summary line ``[i/N]`` answers the latest open ``End (i/N):``
    before it; any other one the latest open End line before it. ``ends`` is in line order."""
    index = {e.line: (int(m.group(1)), int(m.group(2))) for i, m, _, _ in summaries
             if (e := pairs.get(i)) is not None and not e.timeout}
    still = list(ends)

    def answer(name: int, want: tuple[int, int] | None) -> None:
        for k in range(bisect_left(still, (name,)) - 1, -1, -1):
            if want is None or still[k][1:] == want:
                del still[k]
                return

    for name in sorted(names, key=lambda n: n not in index):  # those of a known attempt first, then the rest
        answer(name, index.get(name))
    return [line for line, _, _ in still]


def _cut_summary(line: str) -> bool:
    """Whether a ``[i/N] ...`` line that is not a summary line is one cut off or garbled, not test
    output that counts too (ninja's ``[3/7] /usr/bin/c++ ... -o fused_adam.so`` while a test
    JIT-builds a kernel, ``[1/20] ./checkpoints/iter_10 saved``). The runner names a repo-relative
    test file, so: the text before the two spaces is such a ``.py`` path, or, the line ending there,
    the start of one (a relative path whose last part is cut inside its name or its ``.py``)."""
    m = _INDEXED.match(line)
    if not m:
        return False
    file, sep, _ = m.group(1).partition("  ")
    file = file.rstrip()
    if not file or file.startswith(("/", ".")):
        return False
    if file.endswith(".py"):
        return True
    if sep or re.search(r"\s", file) or "/" not in file:
        return False
    _, dot, ext = file.rpartition("/")[2].rpartition(".")
    return not dot or "py".startswith(ext)


def _cut(line: str) -> str:
    shown = line if len(line) <= 60 else line[:57] + "..."
    form = "`TIMEOUT: <file> after N seconds`" if line.startswith("TIMEOUT: ") else (
        "`End (i/N):` then `filename='<file>', elapsed=N`" if line.startswith(("End (", "filename=")) else _SUMMARY_FORM)
    why = f"`{shown}` is cut off or garbled: not {form}"
    if "\ufffd" in line:
        why += f"; it {_NOT_UTF8}"
    return why + "; that attempt's record is incomplete, check the log was saved whole"


def _pair(summaries: list, ended: list[_Ended]) -> tuple[dict[int, _Ended], list[_Ended]]:
    """Each summary line's End block or TIMEOUT line, by identity: the same file, the same kind of
    ending, the same seconds (to the second), printed before it and not taken by another attempt.
    A missing line leaves one attempt without its clock; it never moves another attempt's onto it."""
    by_file: dict[str, list[_Ended]] = defaultdict(list)
    for e in ended:
        by_file[e.file].append(e)
    pairs: dict[int, _Ended] = {}
    taken: set[int] = set()
    for i, m, _, elapsed in summaries:
        timeout = m.group(4) == "TIMEOUT"
        after = _int_suffix(_extras(m.group(6)).get("timeout_after")) if timeout else None
        want = after if after is not None else elapsed
        for e in by_file.get(m.group(3), ()):
            if e.line in taken or e.line > i or e.timeout != timeout:
                continue
            if e.seconds is not None and abs(e.seconds - want) > 1:
                continue
            taken.add(e.line)
            pairs[i] = e
            break
    return pairs, [e for e in ended if e.line not in taken]
