"""What the report reads, and the one function every entry point (CLI, asset) builds it with.

Nights are ``nights/<night>.json`` in the deployment's state store (``Night.write_summary``; a
local folder or S3); history comes from the history store; logs are read only for the tail of
what did not pass. The core computes
everything else (pipelines.core.report.build_report).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from pipelines.core.calibrate.evidence import split_sources, write_atomic
from pipelines.core.calibrate.lineage import Lineage
from pipelines.core.calibrate.policies import parse_time
from pipelines.core.catalog.ids import safe_filename
from pipelines.core.flaky import (
    FlakyRules,
    FlakyState,
    own_tests,
    recorded_state_problem,
    replay,
    states_from_summary,
)
from pipelines.core.jsonlines import key_lines
from pipelines.core.model import (
    MAX_EST_TIME_S,
    OUTCOMES,
    CatalogError,
    Estimate,
    Problem,
    Sample,
    Test,
    timeout_floor_problem,
)
from pipelines.core.plan.accuracy import RECENT_NIGHTS, NightPrediction, recorded_predictions
from pipelines.core.report import TAIL_READ_BYTES, ReportData, build_report, tail_lines
from pipelines.core.select import CADENCES, in_cadence
from pipelines.core.specs import unconfigured_name
from pipelines.core.trends import ran
from pipelines.storage.state import StateError, StateStore

LOG_TAIL_LINES = 30
#: what every attempt of a summary must have for the report to read it (pipelines.core.model.Attempt)
ATTEMPT_KEYS = ("test_id", "outcome", "elapsed_s", "started_at")


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _strings(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


#: the type each field must have where a record has it: (check, what to say)
_ATTEMPT_FIELDS: dict[str, tuple[Callable[[object], bool], str]] = {
    "test_id": (lambda v: isinstance(v, str) and bool(v), "a test id"),
    "outcome": (lambda v: v in OUTCOMES, f"one of {', '.join(sorted(OUTCOMES))}"),
    "elapsed_s": (_number, "seconds, a number >= 0"),
    "started_at": (lambda v: isinstance(v, str), "an ISO time string (or empty)"),
    "attempt": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "a whole number >= 1"),
    "node": (lambda v: v is None or isinstance(v, str), "a node name"),
    "gpu_slots": (lambda v: isinstance(v, list) and all(isinstance(x, int) for x in v), "a list of GPU indices"),
    "exit_code": (lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)), "a whole number or null"),
    "reason": (lambda v: isinstance(v, str), "a string"),
    "log_path": (lambda v: v is None or isinstance(v, str), "a path"),
    "timeout_s": (_number, "seconds, a number >= 0"),
    "details": (lambda v: isinstance(v, dict), "an object"),
}
_SUMMARY_FIELDS: dict[str, tuple[Callable[[object], bool], str]] = {
    "night": (lambda v: isinstance(v, str) and bool(v), "the night's name"),
    "run_id": (lambda v: isinstance(v, str), "a run id"),
    **{k: (_strings, "a list of test ids") for k in ("selected", "skipped", "unplanned", "unknown_keys")},
    "notes": (_strings, "a list of strings"),
    "problems": (_strings, "a list of strings"),
    "est_time": (lambda v: isinstance(v, dict) and all(_number(x) for x in v.values()), "test id -> seconds"),
    "verdict": (lambda v: isinstance(v, dict) and all(isinstance(x, (bool, str)) or _strings(x) for x in v.values()),
                "an object of lists of test ids"),
    "timeout_floor_s": (lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)
                                                and not timeout_floor_problem(v)),
                        f"whole seconds from 1 to {MAX_EST_TIME_S}, or null"),
    **{k: (lambda v: v is None or _number(v), "seconds, a number >= 0 or null")
       for k in ("actual_makespan_s", "predicted_makespan_s", "lower_bound_s", "predicted_median_s", "predicted_p90_s")},
}


#: a night's name as ``Night`` gives it: when its run started, to the second, and 8 characters of the run id
#: (records from before the run id was added end at the ``Z``); the time first, so names sort by it
NIGHT_ID = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{6}Z(?:-[A-Za-z0-9_]{1,8})?$")


def night_keys(store: StateStore, warn: Callable[[str], None] = lambda _: None) -> list[str]:
    """Every night record's key, oldest first by night id; ``latest.json`` is a copy and left out. Any
    other ``.json`` key there (a copy saved as ``backup-of-....json``, a hand-made file) is no night: it
    would sort after every dated name and pass for the newest night, so it is left out and ``warn`` told."""
    keys = []
    for key in store.keys("nights/"):
        name = key[len("nights/"):]
        if "/" in name or not name.endswith(".json") or name == "latest.json":
            continue
        if NIGHT_ID.match(name[:-len(".json")]):
            keys.append(key)
        else:
            warn(f"{store.uri(key)}: left out: not a night's record (a night's is named by its night id, "
                 "e.g. nights/2026-12-04T165637Z-a6314ba1.json); move it out of nights/")
    return sorted(keys, key=lambda k: k[len("nights/"):-len(".json")])


def read_summary(store: StateStore, key: str) -> dict:
    """A night summary (``nights/``) or run record (``runs/``); anything unreadable is a located error."""
    text = store.get(key)
    if text is None:
        raise CatalogError(Problem(store.uri(key), 1, "summary", "missing; run `nightly run` first"))
    return parse_summary(store.uri(key), text, restore=lambda: restore_advice(store, key))


#: what to do about a record that is not JSON when where its copies are is not known
RESTORE = ("a night's record is stored twice, as nights/<night>.json and runs/<run id>.json: copy the other one "
           "over it if that is intact, else move it aside")


def parse_summary(where: str, text: str, restore: Callable[[], str] | None = None) -> dict:
    """The summary in ``text`` checked for the shape the report reads, so a damaged file is named, not a
    traceback: each problem at the line of its field (the key, or the attempt's object). ``restore``
    says where an intact copy of a record that is not JSON is (:func:`restore_advice`)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CatalogError(Problem(where, getattr(exc, "lineno", 1), "summary",
                                   f"not valid JSON ({exc}); {restore() if restore else RESTORE}")) from exc
    written = "was it written by `nightly run`? Run the night again or move the file aside"

    def wrong(path: tuple, message: str) -> CatalogError:
        """The problem of the field at ``path`` (``("attempts", 3, "elapsed_s")``), named as the record writes it."""
        return CatalogError(Problem(where, _line(text, path), _field(path), f"{message}; {written}"))

    if not isinstance(data, dict) or not isinstance(data.get("attempts"), list):
        raise wrong((), "expected a night summary object with an `attempts` list")
    for i, attempt in enumerate(data["attempts"]):
        if not isinstance(attempt, dict):
            raise wrong(("attempts", i), "expected an attempt object with test_id, outcome, elapsed_s and started_at")
        missing = [k for k in ATTEMPT_KEYS if k not in attempt]
        if missing:
            raise wrong(("attempts", i), f"missing {', '.join(missing)}")
        _check(wrong, ("attempts", i), attempt, _ATTEMPT_FIELDS)
    if "night" not in data:
        raise wrong(("night",), "missing")
    _check(wrong, (), data, _SUMMARY_FIELDS)
    _check_flaky(wrong, data.get("flaky"))
    _check_pools(wrong, data.get("pools"))
    _check_plan(wrong, data.get("plan"))
    return data


def restore_advice(store: StateStore, key: str) -> str:
    """What to do about the record at ``key`` that is not JSON (a write cut short): the run wrote the same
    text as ``nights/<night>.json``, ``runs/<run id>.json`` and (the newest) ``nights/latest.json``, so
    another copy may be whole; it is named, to copy over this one. A past night cannot be run again, and
    deleting a record loses it. The copies are found by name (a night's name ends in its run id's first
    8 characters, dashes dropped: ``Night.night``) and each read to check it is whole and the same run's."""
    name = key.rsplit("/", 1)[-1].removesuffix(".json")
    if key == "nights/latest.json":  # only a copy: the newest night's record
        candidates, lost, same = night_keys(store)[-1:], "", lambda _: True
    elif key.startswith("runs/"):
        tag = name.replace("-", "")[:8]
        candidates = [k for k in night_keys(store) if k.endswith(f"-{tag}.json")] + ["nights/latest.json"]
        lost, same = f"run {name}'s record", lambda d: safe_filename(str(d.get("run_id") or "")) == name
    else:
        tag = name[19:] if NIGHT_ID.match(name) else ""  # after "2026-12-04T165637Z-"
        candidates = [k for k in store.keys("runs/") if tag and "/" not in k[len("runs/"):]
                      and k[len("runs/"):].removesuffix(".json").replace("-", "")[:8] == tag]
        candidates.append("nights/latest.json")
        lost, same = f"night {name}'s record", lambda d: d.get("night") == name
    for other in candidates:
        try:
            data = json.loads(store.get(other) or "")
        except (ValueError, StateError):  # that one is damaged too (or cannot be read now)
            continue
        if other != key and isinstance(data, dict) and same(data):
            if not lost:
                return (f"it is only a copy of the newest night's record, which is intact as {store.uri(other)}: copy "
                        "that over it, or delete it (the next run writes a new one)")
            return (f"the same record is intact as {store.uri(other)}: copy that over this file to restore it "
                    f"(deleting this file instead loses {lost})")
    if not lost:
        return "it is only a copy of the newest night's record: delete it, the next run writes a new one"
    looked = ", ".join(store.uri(k) for k in candidates if k != key)
    unnamed = "" if key.startswith("runs/") or tag else "; it may also be stored as runs/<its run id>.json"
    return (f"no intact copy of it was found (checked {looked}{unnamed}); move it aside, keeping it for "
            f"recovery: that loses {lost}")


def _field(path: tuple) -> str:
    """A field of a night record as it is named in problems: ``attempts[3].elapsed_s``,
    ``flaky["tests/e2e/t.py"].evidence[1]`` (a test id in quotes), ``summary`` for the whole record."""
    out = ""
    for i, part in enumerate(path):
        if isinstance(part, int):
            out += f"[{part}]"
        elif i == 1 and path[0] == "flaky":
            out += f"[{json.dumps(part)}]"
        else:
            out += f".{part}" if out else part
    return out or "summary"


def _line(text: str, path: tuple) -> int:
    """The line of the field at ``path`` in a night record (of its key, or of a list item's start; the
    nearest enclosing one the text has), looked up only for a record found wrong: a night of 1,000
    tests has thousands of lines, and line 1 would send its reader to the top of them."""
    lines = key_lines(text)
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path, 1)


def _check(wrong: Callable[[tuple, str], CatalogError], at: tuple, data: Mapping, fields: Mapping) -> None:
    """Each field ``data`` has must have its type: a damaged record is named, never a traceback later."""
    for name, (ok, what) in fields.items():
        if name in data and not ok(data[name]):
            raise wrong((*at, name), f"expected {what}, got {data[name]!r:.80}")


def _check_flaky(wrong: Callable[[tuple, str], CatalogError], flaky: object) -> None:
    """The flaky states a night recorded (``flaky``: test id -> state; absent or null in older
    records), each readable by the report (pipelines.core.flaky.recorded_state_problem)."""
    if flaky is None:
        return
    if not isinstance(flaky, dict):
        raise wrong(("flaky",), f"expected an object of test id -> flaky state, got {flaky!r:.80}")
    for test_id, state in flaky.items():
        if (problem := recorded_state_problem(state)) is not None:
            raise wrong(("flaky", test_id, *problem[0]), problem[1])


def _check_pools(wrong: Callable[[tuple, str], CatalogError], pools: object) -> None:
    """The pools the night ran on (``pools``: name -> nodes and GPUs per node; absent in older records):
    the report's GPU capacity, so a damaged one is named rather than guessed around."""
    if pools is None:
        return
    if not isinstance(pools, dict):
        raise wrong(("pools",), f"expected an object of pool name -> nodes and gpus_per_node, got {pools!r:.80}")
    for name, pool in pools.items():
        if not isinstance(pool, dict):
            raise wrong(("pools", name), f"expected an object with nodes and gpus_per_node, got {pool!r:.80}")
        for key in ("nodes", "gpus_per_node"):
            v = pool.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise wrong(("pools", name, key), f"expected a whole number >= 1, got {v!r:.80}")


def _check_plan(wrong: Callable[[tuple, str], CatalogError], plan: object) -> None:
    """The night's plan, where the report reads the GPUs each test ran with (a CPU test's attempts
    have no GPU slots); absent in older records."""
    if plan is None:
        return
    if not isinstance(plan, list):
        raise wrong(("plan",), f"expected a list of the plan's assignments, got {plan!r:.80}")
    for i, item in enumerate(plan):
        if not isinstance(item, dict):
            raise wrong(("plan", i), f"expected an assignment object with test_id and gpus, got {item!r:.80}")
        if not isinstance(item.get("test_id"), str):
            raise wrong(("plan", i, "test_id"), f"expected a test id, got {item.get('test_id')!r:.80}")
        gpus = item.get("gpus")
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
            raise wrong(("plan", i, "gpus"), f"expected a whole number >= 0, got {gpus!r:.80}")


def same_repo(summary: Mapping, repo: str | None) -> bool:
    """Whether a night is of ``repo`` (None: any); a record without a repo (an older version) is anyone's."""
    return not repo or not summary.get("repo") or night_of(summary, repo)


def night_of(summary: Mapping, repo: str) -> bool:
    """Whether a night was recorded under ``repo``, or ran in the checkout that name is of: an unconfigured
    checkout's nights from before it went by ``unconfigured_name`` are recorded under its folder name alone."""
    if summary.get("repo") == repo:
        return True
    path = summary.get("repo_path")
    try:
        return isinstance(path, str) and bool(path) and unconfigured_name(Path(path)) == repo
    except (OSError, ValueError, RuntimeError):  # a path no system could resolve (a damaged record) is no checkout
        return False


class _Summaries:
    """Night summaries read and checked once each per report (on S3 every read is a GET)."""

    def __init__(self, store: StateStore):
        self.store = store
        self._got: dict[str, dict | CatalogError] = {}

    def __call__(self, key: str) -> dict:
        from pipelines.storage.state import NotText, not_utf8

        if key not in self._got:
            try:
                self._got[key] = read_summary(self.store, key)
            except CatalogError as exc:
                self._got[key] = exc
            except NotText as exc:  # a hand edit saved as Latin-1: a damaged record like any other
                self._got[key] = CatalogError(Problem(exc.where, exc.line, "summary",
                                                      not_utf8(exc.error, "re-save it as UTF-8 or move the file aside")))
        got = self._got[key]
        if isinstance(got, CatalogError):
            raise got
        return got

    def of(self, key: str, repo: str | None) -> bool:
        """Whether a readable night of ``repo`` is at ``key``."""
        try:
            return same_repo(self(key), repo)
        except CatalogError:
            return False


#: how many earlier nights of the repo the report reads at least to find each test's last run (on S3,
#: one GET each)
EARLIER_NIGHTS = 14
#: past those, it reads on while some test that ran tonight has no earlier run under tonight's extra
#: environment (a weekly test behind a week of release runs, sensor reruns and UI picks), back to this
#: long before tonight (two weekly periods) ...
EARLIER_LOOKBACK = timedelta(days=15)
#: ... and at most this many records read in all (every repo's nights share ``nights/``), so a
#: test that never ran before costs a bounded number of GETs
EARLIER_MAX_READS = 100


def _started(summary: Mapping) -> datetime | None:
    """When the night started: its first attempt's start (None when no attempt says)."""
    times = [t for a in summary.get("attempts", ()) if isinstance(a, Mapping)
             and (t := parse_time(str(a.get("started_at") or ""))) is not None]
    return min(times) if times else None


def _earlier(read: _Summaries, keys: Sequence[str], i: int, warn: Callable[[str], None],
             like: Mapping, repo: str | None = None, limit: int = EARLIER_NIGHTS, lookback: timedelta = EARLIER_LOOKBACK,
             max_reads: int = EARLIER_MAX_READS) -> list[dict]:
    """The repo's readable nights before ``keys[i]`` (of the same repo as ``like``), oldest first:
    the newest ``limit`` of them, and older ones while some test ``like`` ran has no run in them
    under its extra environment, back to ``lookback`` before it and ``max_reads`` records read.
    ``repo``: the repo asked for (default: the one ``like`` was recorded under), whose nights may
    have been recorded under an earlier name (:func:`night_of`).
    "What changed" compares each test with the last of them that ran it, whatever its cadence or
    selection (every repo and cadence shares ``nights/``; another framework's nights are left out).
    A damaged one is left out with a warning, not the whole report."""
    found: list[dict] = []
    skipped: list[str] = []
    unseen = ran(like)  # tonight's tests without an earlier run yet (under tonight's env)
    env = like.get("env") or ""
    start = _started(like)
    reads = 0
    for key in reversed(keys[:i]):
        if len(found) >= limit and (not unseen or reads >= max_reads or start is None):
            break
        reads += 1
        try:
            night = read(key)
        except CatalogError as exc:
            skipped.append(str(exc))
            continue
        if not same_repo(night, repo or like.get("repo")):
            continue
        if len(found) >= limit and (when := _started(night)) is not None and when < start - lookback:
            break
        for problem in skipped:
            warn(f"{problem}; left out: compared with {key[len('nights/'):-len('.json')]} instead" if not found
                 else f"{problem}; left out of the comparison")
        skipped = []
        found.append(night)
        if (night.get("env") or "") == env:
            unseen -= ran(night)
    for problem in skipped:
        warn(f"{problem}; left out: no earlier night to compare with" if not found
             else f"{problem}; left out of the comparison")
    return found[::-1]


def locate_night(store: StateStore, night: str | None = None, warn: Callable[[str], None] = lambda _: None,
                 repo: str | None = None, read: _Summaries | None = None) -> tuple[list[str], int, dict]:
    """(every night key, the chosen night's index among them, its summary): ``night`` by name
    (``nights/<night>.json``) or run id (``runs/<run id>.json``), else the newest night of ``repo``
    (None: of any repo). The chosen night must be readable and of ``repo`` when given."""
    read = read or _Summaries(store)
    keys = night_keys(store, warn)
    if not keys:
        raise CatalogError(Problem(store.uri("nights"), 1, "nights",
                                   "no night summary found; run `nightly run` first or pass --home"))
    names = [k[len("nights/"):-len(".json")] for k in keys]
    if night is None:
        i, summary = _newest(read, keys, repo, warn)
    elif night in names:
        i, summary = names.index(night), read(keys[names.index(night)])
    elif "/" not in night and (run := store.get(f"runs/{night}.json")) is not None:  # a path is no run id
        summary = parse_summary(store.uri(f"runs/{night}.json"), run, lambda: restore_advice(store, f"runs/{night}.json"))
        i = names.index(summary["night"]) if summary.get("night") in names else 0
    else:
        raise CatalogError(Problem(store.uri("nights"), 0, "--night",
                                   f"no night or run {night!r}; the newest nights are: {', '.join(names[-5:])}"))
    if repo and not same_repo(summary, repo):
        raise CatalogError(Problem(store.uri(keys[i]), 1, "repo",
                                   f"night {night} is of repo {summary.get('repo')!r}, not {repo!r}; drop --repo "
                                   "or pass that night's repo"))
    return keys, i, summary


def select_night(store: StateStore, night: str | None = None, warn: Callable[[str], None] = lambda _: None,
                 repo: str | None = None) -> tuple[dict, list[dict], bool]:
    """(the night's summary, the repo's nights before it, oldest first (``EARLIER_NIGHTS``, and
    older ones while a test of tonight has no earlier run: :func:`_earlier`), whether it is the
    repo's newest night); the night as :func:`locate_night`
    finds it. A damaged night before it is passed over and ``warn`` told."""
    read = _Summaries(store)
    keys, i, summary = locate_night(store, night, warn, repo, read)
    repo = repo or summary.get("repo")  # the name asked for also finds nights recorded under an earlier one
    newest = night is None or not any(read.of(k, repo) for k in keys[i + 1:])
    return summary, _earlier(read, keys, i, warn, summary, repo), newest


def earlier_nights(store: StateStore, summary: Mapping) -> list[dict]:
    """The repo's nights before the one ``summary`` records, as its report compares it with
    (:func:`select_night`), so every place that prints the night's verdict says the same; none when the
    store does not hold the night."""
    for night in dict.fromkeys(str(summary.get(k) or "") for k in ("night", "run_id")):
        try:
            return select_night(store, night, repo=summary.get("repo") or None)[1] if night else []
        except CatalogError:  # not stored under that name: try the run id, else nothing to compare with
            continue
    return []


def _newest(read: _Summaries, keys: Sequence[str], repo: str | None,
            warn: Callable[[str], None]) -> tuple[int, dict]:
    """(index, summary) of the newest readable night of ``repo`` (None: of any repo); a newer night that
    cannot be read is passed over and ``warn`` told, as an earlier one is (:func:`_earlier`)."""
    seen: set[str] = set()
    damaged: list[CatalogError] = []
    for i in reversed(range(len(keys))):
        try:
            summary = read(keys[i])
        except CatalogError as exc:
            damaged.append(exc)
            continue
        if same_repo(summary, repo):
            for exc in damaged:
                warn(f"{exc}; left out: a newer night whose repo cannot be read" if repo
                     else f"{exc}; left out: reporting the newest night that can be read")
            return i, summary
        seen.add(str(summary.get("repo")))
    if damaged:  # the repo's night may be the damaged one: name it
        raise damaged[0]
    raise CatalogError(Problem(read.store.uri("nights"), 0, "--repo",
                               f"no night of repo {repo!r} here; the nights here are of: {', '.join(sorted(seen))}"))


def recent_predictions(store: StateStore, repo: str, deployment: str | None,
                       max_reads: int = EARLIER_MAX_READS) -> tuple[list[NightPrediction], list[str]]:
    """The ``prediction`` entries of the repo's newest whole nights on ``deployment`` (as many as the
    report's prediction error looks back over, ``accuracy.RECENT_NIGHTS``), and a located problem for
    each damaged one; what `nightly plan` shows under its header. Reads at most ``max_reads`` records
    (on S3, one GET each; every repo's nights share ``nights/``), newest first; an unreadable night
    is passed over (the report names it)."""
    read = _Summaries(store)
    records: list[NightPrediction] = []
    problems: list[str] = []
    for key in reversed(night_keys(store)[-max_reads:]):
        if len(records) >= RECENT_NIGHTS:
            break
        if read.of(key, repo):
            got, bad = recorded_predictions([read(key)], deployment, locate=lambda _summary, key=key: _locator(store, key))
            records += got
            problems += bad
    return records, problems


def _locator(store: StateStore, key: str) -> Callable[[tuple], str]:
    """``URI:LINE`` of a field of the night record at ``key``, by its path (``("prediction", "tests", 3,
    "actual_s")``); the record's text is read again and walked only once a field is found wrong."""
    def at(path: tuple) -> str:
        text = store.get(key)
        try:
            line = _line(text, path) if text else 1
        except (ValueError, IndexError):  # rewritten since it was read
            line = 1
        return f"{store.uri(key)}:{line}"
    return at


def log_tails(summary: Mapping, store: StateStore, lines: int = LOG_TAIL_LINES) -> dict[str, str]:
    """The last lines of every attempt's log that did not pass, read from the state store as
    ``logs/<night>/<file name>`` (where the local launcher writes it and where a pod's log is
    copied), never from the path the record names: a record is data, and a page that printed any
    file it named (``/etc/passwd``) would publish it. Only each log's end is read, and the lines are
    bounded in characters too: a test that printed 20 MB without a newline must not fill the page."""
    out = {}
    for a in summary.get("attempts", ()):
        path = a.get("log_path")
        if a.get("outcome") == "passed" or not path or path in out:
            continue
        try:
            end = store.get_end(f"logs/{summary.get('night')}/{Path(path).name}", TAIL_READ_BYTES)
        except StateError:  # a name the store refuses (a hostile record) has no log to show
            end = None
        if end is not None:
            out[path] = tail_lines(end[0], lines, start_unread=end[1])
    return out


def evidence_key(repo: str, run_id: str | None = None) -> str:
    """Where the latest calibration left its evidence CSV in the state store (Night.calibration_keys),
    or, with ``run_id``, the one made after that run (kept for reports of that night)."""
    if run_id:
        return f"calibration/{safe_filename(repo)}/runs/{safe_filename(run_id)}.csv"
    return f"calibration/{safe_filename(repo)}/evidence.csv"


def estimates_from_evidence(text: str) -> list[Estimate]:
    """Calibration's proposals back from its evidence CSV, so the report reuses them instead of recomputing."""
    def num(v: str) -> float | None:
        return float(v) if v else None

    def estimate(r: Mapping[str, str]) -> Estimate:
        # est_time columns hold the file's value as written (SGLang's 1.5): the catalog plans with it
        # rounded up and keeps the literal; a kept proposal is that same literal, so it rounds up alike
        registered = float(r["current_est_time"])
        current = math.ceil(registered)
        return Estimate(r["test_id"], r["hardware"], current, math.ceil(float(r["proposed_est_time"])),
                        int(r["samples_used"]), r["reason"], num(r["max_s"]), num(r["p90_s"]), num(r["median_s"]),
                        int(r["stale_samples"] or 0), split_sources(r["sources"]),
                        outliers=split_sources(r.get("left_out") or ""),
                        held=int(r["held_est_time"]) if r.get("held_est_time") else None,
                        in_force=int(r["in_force_est_time"]) if r.get("in_force_est_time") else None,
                        current_literal=None if registered == current else registered)

    return [estimate(r) for r in csv.DictReader(io.StringIO(text))]


def stored_estimates(store: StateStore, repo: str, run_id: str | None = None,
                     warn: Callable[[str], None] = lambda _: None) -> list[Estimate] | None:
    """The last calibration's proposals (``run_id``: the one after that run), or None when there
    are none or they cannot be read (``warn`` is told which file, and the caller recomputes them)."""
    key = evidence_key(repo, run_id)
    text = store.get(key)
    if text is None:
        return None
    try:
        return estimates_from_evidence(text)
    except (KeyError, ValueError, TypeError, AttributeError, OverflowError) as exc:  # a short row gives None cells; inf
        warn(f"{store.uri(key)}: damaged calibration evidence ({type(exc).__name__}: {exc}); not used")
        return None


@dataclass(frozen=True)
class ReportInputs:
    """Everything beyond the summaries: what the catalog, history and calibration know."""

    samples: Sequence[Sample] = ()
    tests: Sequence[Test] = ()
    estimates: Sequence[Estimate] = ()
    rules: FlakyRules = FlakyRules()
    quarantine: Mapping | None = None
    uncovered: Sequence[str] = ()
    #: the repo's timeout floor (``timeout.floor_s``): the framework's own runner's; a night is judged with
    #: the floor its record says it ran with (``nightly run --timeout-floor``), this one for an older record
    timeout_floor_s: int = 1800
    timeout_factor: float = 1.25
    #: the repo's name: where each night's own calibration evidence is (evidence_key)
    repo: str = ""
    #: the checkout whose coverage groups the report checks against the night's selection; None: not checked
    #: (``uncovered`` then holds all the cells to list)
    repo_path: Path | None = None
    #: the assets folder whose coverage.yaml and repos.yaml name the groups (the night's, e.g. a Dagster
    #: resource's ``assets_dir``); None: ``NIGHTLY_ASSETS_DIR``, else the project's assets/
    specs_dir: Path | None = None
    #: an unconfigured checkout's path: its quarantine document may still be under its folder name
    #: (reporting.state.legacy_doc), which `nightly quarantine add|release` carries over to ``repo``'s
    legacy_checkout: Path | None = None
    #: calibrate's est_time rewrites (the history's successions): a quarantine outlasts them, in every replay
    rewrites: Lineage = dataclasses.field(default_factory=Lineage)


def as_of(summary: Mapping, samples: Sequence[Sample], quarantine: Mapping | None,
          newest: bool) -> tuple[list[Sample], Mapping | None]:
    """History as it stood when the night ended: later nights' samples left out (and, for an earlier
    night, later manual quarantine actions; the newest night shows this morning's)."""
    starts = [t for a in summary.get("attempts", ()) if (t := parse_time(a.get("started_at", "")))]
    if newest or not starts:  # nothing later to leave out (a night still running shows as it goes)
        return list(samples), quarantine
    end = max(starts)
    kept = [s for s in samples if s.run_id == summary.get("run_id") or (parse_time(s.started_at) or end) <= end]
    if not quarantine:
        return kept, quarantine
    actions = [a for a in quarantine.get("actions", ()) if (parse_time(a.get("at", "")) or end) <= end]
    return kept, {**quarantine, "actions": actions}


def states_going_in(summary: Mapping, earlier: Sequence[Mapping], samples: Sequence[Sample],
                    quarantine: Mapping | None, rules: FlakyRules, rewrites: Lineage) -> dict[str, FlakyState]:
    """The flaky states the night started with, so a test already flaky is not shown as a new
    regression: those the repo's night before it recorded after itself, with the manual actions made
    up to tonight's start; for an older record that kept none, history before tonight replayed."""
    start = min((a.get("started_at") or "" for a in summary.get("attempts", ())), default="")
    cut = parse_time(start)
    if quarantine and cut is not None:
        quarantine = {**quarantine, "actions": [a for a in quarantine.get("actions", ())
                                                if (parse_time(a.get("at", "")) or cut) <= cut]}
    before = earlier[-1] if earlier else None
    if before is not None and isinstance(before.get("flaky"), Mapping):
        ended = max((a.get("started_at") or "" for a in before.get("attempts", ())), default="")
        return states_from_summary(before["flaky"], quarantine, ended)
    run_id = summary.get("run_id")
    earlier_samples = [s for s in samples if s.run_id != run_id
                       and (cut is None or (parse_time(s.started_at) or cut) <= cut)]
    return replay(earlier_samples, rules, quarantine, rewrites)


def night_report(store: StateStore, night: str | None, inputs: ReportInputs,
                 warn: Callable[[str], None] = lambda _: None) -> ReportData:
    """The report of one night (the newest of ``inputs.repo`` by default) from the deployment's state store.

    What was left out (a damaged night before it) goes to ``warn`` and into the page's notes, as do
    the repo's matrix coverage problems.
    """
    left_out: list[str] = []
    summary, earlier, newest = select_night(store, night, warn=left_out.append, repo=inputs.repo or None)
    for text in left_out:
        warn(text)
    samples, quarantine = as_of(summary, inputs.samples, inputs.quarantine, newest=newest)
    estimates = inputs.estimates
    def damaged(text: str) -> None:
        warn(text)
        left_out.append(text)

    own = stored_estimates(store, inputs.repo, str(summary.get("run_id") or ""), damaged) if inputs.repo else None
    if own is not None:
        estimates = own
    elif night is not None and inputs.repo and estimates:
        left_out.append("est_time proposals: the latest calibration's (the one made after this night was not kept)")
    if isinstance(summary.get("flaky"), Mapping):  # the night recorded its states: only later manual actions
        ends = [a.get("started_at", "") for a in summary.get("attempts", ())]
        states = states_from_summary(summary["flaky"], quarantine, max(ends, default=""))
    else:
        states = replay(samples, inputs.rules, quarantine, inputs.rewrites)
    # one history store and one nights/ for every repo: the page lists this repo's tests only
    mine = own_tests((t.id for t in inputs.tests), quarantine, summary.get("selected", ()),
                     (a["test_id"] for a in summary["attempts"]))
    states = {k: v for k, v in states.items() if k in mine}
    failing = {a["test_id"] for a in summary["attempts"] if a.get("outcome") in ("failed", "timed_out")}
    at_start = states_going_in(summary, earlier, samples, quarantine, inputs.rules, inputs.rewrites) if failing else {}
    uncovered, coverage_problems = night_uncovered(inputs, summary, warn)
    data = build_report(
        summary, earlier, samples, inputs.tests, estimates, states=states,
        at_start={k: v for k, v in at_start.items() if k in failing},
        log_tails=log_tails(summary, store), uncovered=(*uncovered, *inputs.uncovered),
        timeout_floor_s=inputs.timeout_floor_s, timeout_factor=inputs.timeout_factor,
        locate=lambda s: _locator(store, f"nights/{s.get('night')}.json"),
    )
    # the coverage problems `nightly coverage` lists for the tree: a green night's page said none of them
    notes = (*left_out, *coverage_problems)
    return dataclasses.replace(data, notes=(*data.notes, *notes)) if notes else data


def write_html(store: StateStore, data: ReportData, out: Path | None = None) -> str:
    """Render the page and store it as ``reports/<night>.html`` (or write ``out``); returns where it is."""
    from pipelines.reporting.html import render_html  # matplotlib only where a page is drawn
    from pipelines.storage.history import s3_endpoint

    page = render_html(data, endpoint=s3_endpoint())  # the store's endpoint: its logs' commands go there too
    if out is not None:
        write_atomic(out, page)
        return str(out)
    return store.put(f"reports/{data.night or 'night'}.html", page)


def tonight(summary: Mapping) -> tuple[set[str] | None, dict[str, str]]:
    """(ids the night ran or planned, why each other test of its catalog did not run); None for a
    record that does not say what it selected (an older version)."""
    if not isinstance(summary.get("selected"), list):
        return None, {}
    unplanned = set(summary.get("unplanned", ()))
    ran = {i for i in summary["selected"] if i not in unplanned} | {a["test_id"] for a in summary["attempts"]}
    reasons = summary.get("skip_reasons")
    why = {i: f"not run tonight: {r}" for i, r in reasons.items()} if isinstance(reasons, dict) else {}
    why.update({i: "not run tonight: no pool of the deployment runs it" for i in unplanned if i not in ran})
    return ran, why


def uncovered_for(repo_path: Path, tests: Sequence[Test] | None = None,
                  summary: Mapping | None = None, specs_dir: Path | None = None) -> tuple[list[str], list[str]]:
    """(the repo's declared matrix cells no test covers (pipelines.core.coverage), one line each; the
    coverage problems of the tree, ``nightly coverage``'s, for the notes).

    Each line ends with its group's problems, why the cells are uncovered: a sibling disabled (and
    why), a listed file that does not exist, a file claiming the group without being listed.

    ``tests``: the catalog's; only configurations of an enabled one count, and (given the night's
    ``summary``) only of one the night ran or planned. None: every configuration the files hold.
    A partial night (a sensor rerun of one file, a one-pool backfill, ``--labels x``) leaves most
    groups unrun: a group none of whose runnable tests the night ran is not listed cell by cell but
    named on one line as not checked; a partly run group's lines name the siblings it did not run, and why.
    A sibling the night's cadence never runs (framework M's nightly leaves out ``long``) is no partial
    night: its group's cells are listed, with that reason."""
    from pipelines.core.coverage import catalogued, night_coverage

    catalog, ran, why, by_cadence = None, None, {}, set()
    if tests is not None:
        ran, why = tonight(summary) if summary is not None else (None, {})
        if ran is not None:  # a test the night's cadence never runs is left out by the cadence, not by a narrowed pick
            cadence = summary.get("cadence") if summary.get("cadence") in CADENCES else None
            by_cadence = {t.id for t in tests if cadence and t.id not in ran and t.id not in why
                          and not in_cadence(t, cadence)}
            why.update({i: f"not run tonight: the {cadence} cadence does not run it" for i in by_cadence})
        catalog = catalogued(tests, ran, why)
    cells, problems = night_coverage(repo_path, specs_dir, catalog=catalog)
    notes = [f"matrix coverage: {p}" for p in problems]
    if ran is None:
        return [f"{u.group}: {u.cell.label} (group: {', '.join(u.tests)}){_why(u.why)}" for u in cells], notes
    by_path: dict[str, list[Test]] = {}
    for t in tests or ():
        by_path.setdefault(t.path, []).append(t)
    lines: list[str] = []
    unchecked: list[str] = []
    for group in dict.fromkeys(u.group for u in cells):
        mine = [u for u in cells if u.group == group]
        left = not_run_tonight(mine[0].tests, by_path, ran, why)
        cadenced = any(t.id in by_cadence for m in mine[0].tests for t in by_path.get(m, ()))
        if left and not cadenced and not any(t.id in ran for m in mine[0].tests for t in by_path.get(m, ())):
            unchecked.append(group)  # tonight's pick (a rerun, a backfill, a label filter) left the whole group out
            continue
        said = "; siblings not run tonight: " + ", ".join(left) if left else ""
        lines += [f"{u.group}: {u.cell.label} (group: {', '.join(u.tests)}{said}){_why(u.why)}" for u in mine]
    if unchecked:
        lines.append(f"not checked tonight: group(s) {', '.join(unchecked)}, none of whose tests tonight's selection "
                     "ran (a partial night: a rerun, a backfill or a label filter)")
    return lines, notes


def _why(problems: Sequence[object]) -> str:
    """The group's problems after its cell's line: without them a disabled or renamed sibling left
    the cells uncovered with no word of why."""
    return "; why: " + " | ".join(str(p) for p in problems) if problems else ""


def not_run_tonight(members: Sequence[str], by_path: Mapping[str, Sequence[Test]], ran: Collection[str],
                    why: Mapping[str, str]) -> list[str]:
    """``path (why)`` for each member with an enabled test the night did not run: left out by tonight's
    selection, not by the catalog (a disabled or unregistered sibling covers nothing on any night)."""
    out = []
    for path in members:
        idle = [t for t in by_path.get(path, ()) if t.disabled is None and t.id not in ran]
        if idle and not any(t.id in ran for t in by_path.get(path, ())):
            reasons = dict.fromkeys(why.get(t.id, "").removeprefix("not run tonight: ") for t in idle)
            reason = "; ".join(r for r in reasons if r)
            out.append(f"{path} ({reason})" if reason else path)
    return out


def night_uncovered(inputs: ReportInputs, summary: Mapping,
                    warn: Callable[[str], None]) -> tuple[list[str], list[str]]:
    """(the cells the night's tests leave uncovered, the coverage problems for the notes); a broken
    coverage.yaml is a warning and a line, never a missing report."""
    if inputs.repo_path is None or not inputs.tests:
        return [], []
    try:
        return uncovered_for(inputs.repo_path, inputs.tests, summary, inputs.specs_dir)
    except CatalogError as exc:
        warn(f"matrix coverage not checked: {exc}")
        return [f"coverage not checked: {exc}"], []


def inputs_for_night(night, uncovered: Sequence[str] | None = None,
                     samples: Sequence[Sample] | None = None) -> ReportInputs:
    """The inputs from a ``pipelines.night.Night`` (what the night_report asset has at hand).

    ``uncovered``: the cells to list as given; None: the report checks the repo's coverage
    groups against the reported night's selection (``night_uncovered``)."""
    tests = night.registered_tests()
    samples = night.history.read() if samples is None else samples
    return ReportInputs(
        samples=samples, tests=tests,
        estimates=stored_estimates(night.state, night.repo_spec.name) or night.estimates(tests),
        rules=night.flaky_rules(),
        quarantine=night.quarantine_doc(), uncovered=tuple(uncovered or ()),
        timeout_floor_s=night.repo_spec.timeout_floor_s, timeout_factor=night.repo_spec.timeout_factor,
        repo=night.repo_spec.name, repo_path=night.repo_spec.path if uncovered is None else None,
        specs_dir=night.settings.assets_dir,
    )
