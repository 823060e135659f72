"""``nightly history``: import framework M's past job logs into the duration history, and show it.

  nightly history import --repo PATH [--suite S] [--hardware H] [--deployment D | --store FILE] [--dry-run] LOGFILE...
  nightly history show [--test ID] [--deployment D | --store FILE] [--limit N|all]

The store is the deployment's (``--deployment``, else ``$NIGHTLY_DEPLOYMENT``, else local):
``$NIGHTLY_HOME/history.sqlite`` (``<project>/.nightly`` when unset), or the S3 history of a
deployment with ``storage: s3``, the one production nights write.
Imported samples carry the sha256 of each test file at the commit the log's checkout step printed
(read from ``--repo``'s git history), else in the ``--repo`` checkout: give the checkout of the
revision the logs ran, or calibration will count them as stale; a commit not in ``--repo``'s
history is reported (fetch it, and use ``--dry-run`` to see such lines before storing). Without
``--suite`` each log's suite is inferred (its ``run_suite.py --suite`` line, else the one suite
all its files register, else the registration whose est_time it prints); a log whose command line
names another suite than ``--suite`` (or a ``--hw`` none of its tests run on) is refused whole.
Every log line that is refused (unreadable or unbounded numbers, near-miss summary lines) is listed
with file:line.
A ``.jsonl`` LOGFILE is samples in the S3 history's object format, as a night whose store refused
writes keeps them (``<home>/unsaved/<night>/history.jsonl``): they are added as they are (no
``--repo`` needed), each attempt once. Such a file is read line by line: a line that does not read
(the last one, cut off by a full disk or a kill -9) is listed as file:line: field, the other lines are
added, and the command exits 1.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
import zipfile
from collections import Counter
from datetime import UTC, datetime
from itertools import chain
from pathlib import Path

from pipelines.cli import flags
from pipelines.core.model import Catalog, CatalogError, Problem
from pipelines.core.specs import DEFAULT_ASSETS_DIR, RepoSpec, Specs


def default_store() -> Path:
    home = os.environ.get("NIGHTLY_HOME") or DEFAULT_ASSETS_DIR.parent / ".nightly"
    return Path(home) / "history.sqlite"


def open_store(store: Path | None, deployment: str | None = None, home: Path | None = None, create: bool = False):
    """``--store FILE`` when given, else the deployment's store: ``<home>/history.sqlite``, or S3
    for a deployment with ``storage: s3`` (the production history every pod shares).

    A ``--store`` file that does not exist is refused (HistoryError) unless ``create`` (``history
    import`` makes it): read as an empty history, a mistyped name would show no samples and let
    calibration release every est_time in force for want of evidence."""
    from pipelines.core.history import FileHistoryStore, HistoryError

    if store is not None:
        if not create and not store.exists():
            raise HistoryError(f"{store}: --store: no such history file; check the path, or leave --store out "
                               f"for the deployment's history (`nightly history import --store {store} LOGFILE` "
                               "creates one)")
        return FileHistoryStore(store)
    from pipelines.core.specs import load_specs
    from pipelines.storage.history import history_store

    return history_store(load_specs().deployment(deployment), Path(home) if home else default_store().parent)


def add_common(p: argparse.ArgumentParser, repo: bool = True) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--store", type=flags.path, help="a history file to use instead of the deployment's store")
    where.add_argument("--deployment", help="deployment in assets/cluster.yaml whose history this is: "
                                        "<home>/history.sqlite, or S3 with `storage: s3` (default: "
                                        "$NIGHTLY_DEPLOYMENT, else local)")
    p.add_argument("--home", type=flags.path, help="state folder of a local deployment (default: $NIGHTLY_HOME or .nightly/)")
    if repo:
        p.add_argument("--repo", type=flags.path_text, help="framework checkout (a path, or a repo name in assets/repos.yaml; "
                                      "default: the assets default repo)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="import past CI logs into the duration history, or show it",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    hs = p.add_subparsers(dest="history_command", metavar="{import,show}")
    hs.required = True
    imp = hs.add_parser("import", help="read framework M job logs into the history")
    add_common(imp)
    imp.add_argument("--suite", help="the suite the logs' job ran, for logs that do not name it (default: inferred "
                                     "per log from the runner's command line, the one suite all its files register, "
                                     "or the est_time it prints); a log whose command line names another suite is "
                                     "refused")
    imp.add_argument("--hardware", help="the hardware the logs' job ran on, for files whose registration lists "
                                        "several (hardware=[...]), e.g. h200")
    imp.add_argument("--dry-run", action="store_true", help="parse and match, store nothing")
    imp.add_argument("logs", nargs="+", type=Path, metavar="LOGFILE",
                     help="job logs as CI saved them (GitHub raw logs, the run's log archive .zip, or `gh run "
                          "view --log` output, read job by job), or a history.jsonl a night kept when its store "
                          "refused writes")
    show = hs.add_parser("show", help="list stored samples, marking those calibration and the planner leave out")
    add_common(show, repo=False)
    show.add_argument("--test", help="only this test id (or a path prefix)")
    show.add_argument("--limit", type=_limit, default=50, help="newest N rows, N >= 1, or 'all' (default 50)")
    p.set_defaults(func=run)


def _limit(text: str) -> int | None:
    """``--limit``: a positive row count, or ``all`` (None); anything else is refused by argparse."""
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of rows; give N >= 1, or 'all'")
    return value


def _load_specs() -> Specs | None:
    from pipelines.core.specs import load_specs

    try:
        return load_specs()
    except CatalogError as exc:
        print(f"nightly: warning: assets/ not loaded, using repo defaults:\n{exc}", file=sys.stderr)
        return None


def resolve_repo(repo: str | None) -> tuple[Path, RepoSpec | None, Specs | None]:
    """A checkout path plus its assets/ spec when one points at it (policy, timeouts, roots)."""
    specs = _load_specs()
    if specs is not None:
        path, spec = specs.locate_repo(repo)
        return path, spec, specs
    if repo is None:
        raise CatalogError(Problem("assets/repos.yaml", 1, "repos", "no default repo; pass --repo PATH"))
    path = Path(repo).resolve()
    if not path.is_dir():
        raise CatalogError(Problem(repo, 0, "--repo", "not a directory; pass the framework checkout"))
    return path, None, None


def load_catalog_for(path: Path, spec: RepoSpec | None, specs: Specs | None) -> Catalog:
    from pipelines.core.catalog import load_catalog

    return load_catalog(path, spec=spec, specs=specs)


def _attempt_key(s) -> tuple:
    return s.test_id, s.hardware, s.started_at, round(s.elapsed_s, 3), s.outcome


def _not_stored(samples: list, stored: list, earlier: dict[str, str] | None = None) -> list:
    """The samples whose attempt is not in the store yet: the same file, hardware, start stamp,
    elapsed and outcome is the same attempt, whichever log it came from (a job's whole log and one
    step's log, imported in separate commands, hold the same lines under different run ids). Without a
    start stamp, attempt k of a file in the same run is the same attempt (a log's run id, ``log_run_id``, is
    the same in a log saved while its job ran and in the whole log), also under the id an older nightly
    gave the same log (``earlier``: run id -> that id)."""
    seen = {_attempt_key(s) for s in stored if s.started_at}
    unstamped = {(s.run_id, s.test_id, s.hardware, s.attempt) for s in stored if not s.started_at}
    earlier = earlier or {}

    def stored_already(s) -> bool:
        if s.started_at:
            return _attempt_key(s) in seen
        return any((run, s.test_id, s.hardware, s.attempt) in unstamped for run in (s.run_id, earlier.get(s.run_id)))

    return [s for s in samples if not stored_already(s)]


def _read_logs(log: Path):
    """Source name -> what a job log says (``ParsedLog``), or each ``.txt`` log in a GitHub log
    archive (the .zip a run's "Download log archive" gives: the whole job's log and one per step;
    the same attempt in two of them is stored once), or each job of ``gh run view --log`` output
    (``LOG:JOB``, its lines numbered as in LOG). Read line by line, archive members straight
    from the archive: a log of hundreds of MB is never held whole."""
    from pipelines.core.history.joblog import is_gh_run_log, read_ci_log, read_gh_run_log

    with open(log, "rb") as fh:
        zipped = fh.read(4) == b"PK\x03\x04"
    # lines end at \n only, as GitHub counts them (a CRLF's \r is stripped): a progress bar's lone \r stays
    # inside its line, so every line cited after it (refusals, `history show` sources, evidence) is the log's
    if not zipped:
        with open(log, encoding="utf-8", errors="replace", newline="\n") as text:
            first = text.readline()
            lines = chain([first], text)
            if is_gh_run_log(first):  # `gh run view --log`: every job of the run, each line behind JOB<TAB>STEP<TAB>
                return {f"{log}:{job}": parsed for job, parsed in read_gh_run_log(lines).items()}
            return {str(log): read_ci_log(lines)}
    found = {}
    with zipfile.ZipFile(log) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
        for name in sorted(n for n in names if n.endswith(".txt")):
            with archive.open(name) as member:
                found[f"{log}:{name}"] = read_ci_log(io.TextIOWrapper(member, encoding="utf-8", errors="replace",
                                                                      newline="\n"))
    if not found:  # else silently "0 samples from 0 logs", or nothing at all beside another log
        held = (", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")) if names else "nothing"
        raise NoJobLogs(f"a zip archive without a .txt member (it holds {held}); expected GitHub's log archive (a "
                        "run's \"Download log archive\": one .txt per job and step): give that archive, or the job "
                        "logs themselves")
    return found


class NoJobLogs(ValueError):
    """A zip archive holding no ``.txt`` job log; the message says what it holds and what was expected."""


def _kept_samples(files: list[Path]) -> tuple[list, list[Problem], int]:
    """Samples of ``.jsonl`` files in the S3 history's object format, as a night whose store refused
    them keeps them (``<home>/unsaved/<night>/history.jsonl``), each bad line a located problem, and
    how many files gave samples or were empty. Line by line, not all or nothing as an S3 object: a full
    disk or kill -9 cuts such a file's last line off, and the lines before it are good attempts."""
    from pipelines.storage.s3 import decode_lines

    samples, problems, read = [], [], 0
    for f in files:
        try:
            got, bad = decode_lines(str(f), f.read_bytes(), imported=True)
        except OSError as exc:
            got, bad = [], [Problem(str(f), 1, "samples", f"cannot read ({exc.strerror}); check the path")]
        samples += got
        problems += bad
        read += bool(got or not bad)
    return samples, problems, read


def _import(args: argparse.Namespace) -> int:
    kept = [log for log in args.logs if log.suffix == ".jsonl"]
    samples, damaged, kept_read = _kept_samples(kept)
    problems = list(damaged)
    logs = [log for log in args.logs if log.suffix != ".jsonl"]
    parsed: dict = {}
    if logs:
        parsed, found = _import_logs(args, logs)
        samples += found[0]
        problems += found[1]
    store = open_store(args.store, args.deployment, args.home, create=True)
    from pipelines.core.history.logs import earlier_run_id, log_run_id

    earlier = {log_run_id(log): old for log in parsed.values() if (old := earlier_run_id(log))}
    new = 0 if args.dry_run else store.add(_not_stored(samples, store.read(), earlier))
    verb = "would import" if args.dry_run else "imported"
    where = getattr(store, "path", store)
    detail = "dry run" if args.dry_run else f"{new} new, {len(samples) - new} already stored in {where}"
    print(f"history: {verb} {len(samples)} samples from {len(parsed) + kept_read} logs ({detail})")
    by_outcome = Counter(s.outcome for s in samples)
    print("  " + (", ".join(f"{k} {v}" for k, v in sorted(by_outcome.items())) or "no attempts matched"))
    unmatched = [p for p in problems if p.field == "filename"]
    if unmatched:
        print(f"unmatched files ({len(unmatched)}):")
    for p in unmatched:
        print(f"  {p}")
    for p in problems:
        if p.field != "filename":
            print(f"  {p}")
    # a damaged kept file lost attempts of a night: a script must see it even when the rest imported
    return 0 if samples and not damaged else 1


def _import_logs(args: argparse.Namespace, logs: list[Path]) -> tuple[dict, tuple[list, list[Problem]]]:
    """(source -> what it says, (samples, problems)) of CI job logs, matched against the --repo catalog."""
    path, spec, specs = resolve_repo(args.repo)
    catalog = load_catalog_for(path, spec, specs)
    parsed: dict = {}
    archives: dict[str, str] = {}  # an archive member -> its archive
    problems: list[Problem] = []
    for n, log in enumerate(logs, start=1):
        _progress(log, n, len(logs))
        try:
            found = _read_logs(log)
            parsed.update(found)
            archives.update({name: str(log) for name in found if name != str(log)})
        except OSError as exc:
            problems.append(Problem(str(log), 1, "log", f"cannot read ({exc.strerror}); check the path"))
        except zipfile.BadZipFile as exc:
            problems.append(Problem(str(log), 1, "log", f"a damaged zip archive ({exc}); download the logs again"))
        except NoJobLogs as exc:
            problems.append(Problem(str(log), 1, "log", str(exc)))
    from pipelines.core.history import import_parsed

    revisions = GitRevisions(path) if any(log.commits for log in parsed.values()) else None
    samples, found = import_parsed(parsed, catalog, args.suite, args.hardware, archives, revisions)
    return parsed, (samples, problems + found)


class GitRevisions:
    """The --repo checkout's files at the commits job logs name, read with git (argv lists, no shell): a
    sample carries the digest of the test file that ran, not of the file checked out now."""

    def __init__(self, repo: Path):
        self.repo = repo
        self._has: dict[str, bool] = {}
        self._digests: dict[tuple[str, str], str | None] = {}

    def _git(self, *args: str) -> subprocess.CompletedProcess | None:
        try:
            return subprocess.run(["git", "-C", str(self.repo), *args], capture_output=True, check=False)
        except OSError:  # no git on PATH: no commit is known, and the warning says the checkout's digest is used
            return None

    def has(self, commit: str) -> bool:
        if commit not in self._has:
            done = self._git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
            self._has[commit] = done is not None and done.returncode == 0
        return self._has[commit]

    def digest(self, commit: str, path: str) -> str | None:
        if (commit, path) not in self._digests:
            # as a checkout writes the file (eol, ident, filters), the bytes the catalog digests, not the raw blob
            done = self._git("cat-file", "--filters", f"{commit}:./{path}")
            ok = done is not None and done.returncode == 0
            self._digests[commit, path] = hashlib.sha256(done.stdout).hexdigest() if ok else None
        return self._digests[commit, path]


#: a log this large takes seconds to read (a 200 MB log 15-27 s): say so before reading it
LARGE_LOG_BYTES = 20 * 1024 * 1024


def _progress(log: Path, n: int, total: int) -> None:
    """``nightly history: reading LOG (n/N) ...`` on stderr before each of several logs, or one large
    log, so a long import shows where it is; one small log (a test's, a quick import) says nothing."""
    try:
        large = log.stat().st_size >= LARGE_LOG_BYTES
    except OSError:  # reported with the other problems when it is read
        large = False
    if total > 1 or large:
        print(f"nightly history: reading {log} ({n}/{total}) ...", file=sys.stderr, flush=True)


def _show(args: argparse.Namespace) -> int:
    store = open_store(args.store, args.deployment, args.home)
    samples = store.read()
    damaged = len(getattr(store, "skipped", ()))
    if args.test:
        samples = [s for s in samples if s.test_id == args.test or s.test_id.startswith(args.test)]
    samples = sorted(samples, key=_started)  # oldest first, newest last: an import of old logs stores them last
    shown = samples[-args.limit:] if args.limit else samples
    print(f"{'started_at':<25} {'test':<48} {'hw':<6} {'outcome':<11} {'elapsed':>8} {'try':>3} {'sha':<8} "
          f"{'unused':<11} source")
    for s in shown:
        cap = "*" if s.capped else " "
        print(f"{s.started_at[:25] or '-':<25} {s.test_id:<48} {s.hardware:<6} {s.outcome:<11} "
              f"{s.elapsed_s:>7g}{cap} {s.attempt:>3} {s.sha256[:8]:<8} {_unused(s) or '-':<11} {s.source}")
    notes = [f"{damaged} row{'s' if damaged > 1 else ''} skipped or marked: see the warnings"] if damaged else []
    if any(s.capped for s in shown):
        notes.append("* capped by a timeout")
    if any(_unused(s) for s in shown):
        # what `nightly calibrate` counts differs from these rows by them: say which and why
        notes.append("unused: env = a night run with extra environment (--env, env_from), outlier = an implausible "
                     "duration; calibration and the planner leave both out, the near-timeout list the env ones")
    print(f"{len(shown)} of {len(samples)} samples" + (f" ({'; '.join(notes)})" if notes else ""))
    return 0


def _unused(sample) -> str:
    """Why calibration and the planner never use ``sample`` ("" when they may): a night with extra
    environment (``policies.plain``) or an implausible duration (``Sample.outlier``)."""
    return "+".join(why for why, marked in (("env", sample.env), ("outlier", sample.outlier)) if marked)


def _started(sample) -> datetime:
    """When the sample's run started, for ordering (no or an unreadable stamp: before every other)."""
    from pipelines.core.calibrate.policies import parse_time

    return parse_time(sample.started_at) or datetime.min.replace(tzinfo=UTC)


def run(args: argparse.Namespace) -> int:
    from pipelines.cli.flags import error_status, unanswered
    from pipelines.core.history import HistoryError

    try:
        return _import(args) if args.history_command == "import" else _show(args)
    except HistoryError as exc:
        print(f"nightly history: error: {exc}{unanswered(exc)}", file=sys.stderr)
        return error_status(exc)
