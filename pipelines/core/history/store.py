"""Where samples live between nights: a small Protocol and a durable local file database.

The local store is SQLite in WAL mode with one transaction per ``append``: a writer killed
mid-night loses at most the batch it was writing, never an earlier sample, and never leaves a
half-written row. A file that cannot be read is reported with the file and what to do, never skipped:
a 0-byte file is an error (SQLite would silently treat it as a new, empty history), and a
state folder this process cannot write is named as such. Reading never creates anything. One bad
row in a readable file (text where a number belongs) is skipped with a warning naming the row.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from pipelines.core.calibrate.lineage import Succession
from pipelines.core.history.samples import OUTCOMES, row_problem, screen
from pipelines.core.model import Sample

log = logging.getLogger(__name__)

#: 2: ``interrupted`` outcome and the ``outlier`` reason (version 1 stores are upgraded in place).
#: The ``env`` and ``reason`` columns came later without a new version: they are added in place on the
#: first write, and an older nightly, which names its columns, reads and writes such a store as before.
SCHEMA_VERSION = 2
_COLUMNS = ("test_id", "hardware", "sha256", "outcome", "elapsed_s", "started_at", "node", "image",
            "run_id", "attempt", "source", "capped", "outlier", "env", "reason")
#: columns a version 2 store made by an older nightly may lack, in the order they came
_LATER_COLUMNS = ("env", "reason")
_V2_COLUMNS = _COLUMNS[:-len(_LATER_COLUMNS)]
_V1_COLUMNS = _V2_COLUMNS[:-1]
_TABLE = """
CREATE TABLE IF NOT EXISTS {name} (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  test_id TEXT NOT NULL, hardware TEXT NOT NULL, sha256 TEXT NOT NULL,
  outcome TEXT NOT NULL CHECK (outcome IN (OUTCOMES_SQL)),
  elapsed_s REAL NOT NULL CHECK (elapsed_s >= 0), started_at TEXT NOT NULL,
  node TEXT NOT NULL, image TEXT NOT NULL, run_id TEXT NOT NULL, attempt INTEGER NOT NULL,
  source TEXT NOT NULL, capped INTEGER NOT NULL, outlier TEXT NOT NULL DEFAULT '', env TEXT NOT NULL DEFAULT '',
  reason TEXT NOT NULL DEFAULT '',
  UNIQUE (run_id, test_id, hardware, attempt, started_at)
);
""".replace("OUTCOMES_SQL", ", ".join(repr(o) for o in OUTCOMES))
_SCHEMA = _TABLE.format(name="samples")
#: calibrate's est_time rewrites (see pipelines.core.calibrate.lineage); created on first record,
#: so a store without one reads as before and older readers ignore it
_SUCCESSIONS = """
CREATE TABLE IF NOT EXISTS successions (
  before TEXT NOT NULL, after TEXT NOT NULL, path TEXT NOT NULL, why TEXT NOT NULL,
  recorded_at TEXT NOT NULL, PRIMARY KEY (before, after)
);
"""


class HistoryError(RuntimeError):
    """The history store cannot be read or written; the message names the file and the fix."""


class HistoryStore(Protocol):
    """Append-only sample storage; implementations: local file (here), S3 (later)."""

    def append(self, samples: Iterable[Sample]) -> None: ...

    def read(self) -> list[Sample]: ...


def _mtime(path: Path) -> float:
    """A file's modification time; 0 when it went away meanwhile (SQLite removes its companions)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


class FileHistoryStore:
    """Samples in one SQLite file; safe against crashes and concurrent writers on one host."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        #: how long a write waits for another process's transaction before it is reported busy
        self.busy_timeout_s = 30.0
        #: a 0-byte file younger than this may be another process's new history, not yet written: waited for
        self.creating_s = 3.0
        #: one message per row the last ``read`` skipped or marked (also logged as a warning)
        self.skipped: list[str] = []

    def __repr__(self) -> str:
        return f"FileHistoryStore({str(self.path)!r})"

    def _fail(self, exc: Exception) -> HistoryError:
        if isinstance(exc, sqlite3.Error) and _is_busy(exc):  # a healthy file in use: moving it aside would lose it
            return HistoryError(
                f"{self.path}: busy: another nightly process is writing {self.path}; retry when it ends "
                f"(waited {self.busy_timeout_s:g} s; {exc}); nothing was changed."
            )
        return HistoryError(
            f"{self.path}: history store is unreadable ({exc}); nothing was changed. Move the file "
            "aside (keep it for recovery, e.g. `sqlite3 FILE .recover`) and re-import past nights with "
            "`nightly history import`, or point --store / NIGHTLY_HOME at a good copy."
        )

    def _folder_problem(self, exc: BaseException) -> HistoryError:
        folder = self.path.parent
        return HistoryError(
            f"{folder}: the state folder is not writable ({exc}); the history file {self.path.name} "
            "cannot be created or updated there. Make the folder writable by this user, or point "
            "NIGHTLY_HOME / --store at a writable folder."
        )

    def _check_file(self) -> None:
        """A 0-byte history is damage (a full disk, a truncating copy), never a fresh start, except
        while another process creates it: SQLite makes the file, then writes its first page, so a
        file made moments ago, or with SQLite's companions beside it written moments ago, is waited
        for. Old companions beside a 0-byte file are what a first write cut short (a full disk) leaves:
        damage at once, not a wait of ``busy_timeout_s`` in every command."""
        deadline = time.monotonic() + self.busy_timeout_s
        while True:
            try:
                st = self.path.stat()
            except FileNotFoundError:
                return
            except OSError as exc:
                raise self._fail(exc) from exc
            beside = [p for p in (self.path.with_name(self.path.name + end) for end in ("-wal", "-shm", "-journal"))
                      if p.exists()]
            now = time.time()
            creating = now - st.st_mtime < self.creating_s or any(now - _mtime(p) < self.creating_s for p in beside)
            if st.st_size or not creating or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        if st.st_size == 0:
            aside = f"move it aside (with {' and '.join(p.name for p in beside)})" if beside else "move it aside"
            raise HistoryError(
                f"{self.path}: history file is empty (0 bytes) but a history is never empty; nothing was "
                f"changed. Restore it from a backup, or {aside} to start a new history and re-import "
                "past nights with `nightly history import`."
            )

    def _writable(self) -> bool:
        folder = self.path.parent
        if not os.access(folder, os.W_OK):
            return False
        return not self.path.exists() or os.access(self.path, os.W_OK)

    def _connect(self, read_only: bool = False) -> sqlite3.Connection:
        self._check_file()
        try:
            if read_only and not self._writable():
                conn = self._open_read_only()
            else:
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise self._folder_problem(exc) from exc
                conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
                self._use_wal(conn)
                conn.execute("PRAGMA synchronous=FULL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0 and not read_only:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(_SCHEMA)
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                conn.execute("COMMIT")
            elif version == 1 and not read_only:
                _upgrade_v1(conn)
            elif version == SCHEMA_VERSION and not read_only and not set(_LATER_COLUMNS) <= _columns(conn):
                _add_later_columns(conn)
            elif version not in (1, SCHEMA_VERSION):
                conn.close()
                raise HistoryError(
                    f"{self.path}: history schema version {version}, this nightly reads {SCHEMA_VERSION}; "
                    "upgrade nightly-e2e or point --store / NIGHTLY_HOME at a store of this version."
                )
            return conn
        except sqlite3.Error as exc:
            if _is_permission(exc) and not self._writable():
                raise self._folder_problem(exc) from exc
            raise self._fail(exc) from exc

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        """``PRAGMA journal_mode=WAL``, retried while busy until ``busy_timeout_s``: on a file another
        process is creating, SQLite can answer busy at once, without waiting in its busy handler (it
        would deadlock), and the other process is done in moments."""
        deadline = time.monotonic() + self.busy_timeout_s
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(0.02)

    def _open_read_only(self) -> sqlite3.Connection:
        """A reader in a folder it may not write. ``mode=ro`` reads the write-ahead log, so samples a
        writer committed but never checkpointed (it was killed) are seen, and it takes SQLite's locks,
        so it never reads pages a live writer's checkpoint is moving. It needs the log's ``-shm`` index
        beside the file; without one (and no folder to make it in) the file is read as it stands
        (``immutable=1``), which misses what the ``-wal`` holds: the warning says so."""
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=self.busy_timeout_s,
                               isolation_level=None)
        try:
            conn.execute("PRAGMA user_version").fetchone()
            return conn
        except sqlite3.Error as exc:
            conn.close()
            if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) not in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY):
                raise
        wal = self.path.with_name(self.path.name + "-wal")
        if wal.exists() and wal.stat().st_size:
            log.warning("%s: read as it stands: the folder is read-only and %s has no -shm index beside it, so "
                        "samples committed to it (by a writer that was killed) may be missing; make the folder "
                        "writable, or copy the file with its -wal to a writable folder, to read them all",
                        self.path, wal)
        return sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True, isolation_level=None)

    def add(self, samples: Iterable[Sample]) -> int:
        """Append in one transaction; returns how many were new (an attempt already stored is kept once)."""
        return self._insert(
            f"INSERT OR IGNORE INTO samples ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
            [_row(s) for s in samples])

    def _insert(self, sql: str, rows: list[tuple], *setup: str) -> int:
        """``sql`` (an INSERT OR IGNORE) over ``rows`` in one transaction, after the ``setup``
        statements; returns how many rows were new. Nothing is written when any statement fails."""
        if not rows:
            return 0
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            for statement in setup:
                conn.execute(statement)
            before = conn.total_changes
            conn.executemany(sql, rows)
            added = conn.total_changes - before
            conn.execute("COMMIT")
            return added
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if _is_permission(exc) and not self._writable():
                raise self._folder_problem(exc) from exc
            raise self._fail(exc) from exc
        finally:
            conn.close()

    def append(self, samples: Iterable[Sample]) -> None:
        self.add(samples)

    def read(self) -> list[Sample]:
        """Every sample in the order it was stored; a missing file is an empty history (not created)."""
        if not self.path.exists():
            return []
        conn = self._connect(read_only=True)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            have = _columns(conn)
            columns = _V1_COLUMNS if version != SCHEMA_VERSION else \
                _V2_COLUMNS + tuple(c for c in _LATER_COLUMNS if c in have)
            cur = conn.execute(f"SELECT seq, {', '.join(columns)} FROM samples ORDER BY seq")
            return self._samples(cur.fetchall(), columns)
        except sqlite3.Error as exc:
            raise self._fail(exc) from exc
        finally:
            conn.close()

    def add_successions(self, successions: Iterable[Succession]) -> int:
        """Record calibrate's rewrites in one transaction; returns how many were new."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        return self._insert("INSERT OR IGNORE INTO successions (before, after, path, why, recorded_at) "
                            "VALUES (?, ?, ?, ?, ?)",
                            [(s.before, s.after, s.path, s.why, now) for s in successions], _SUCCESSIONS)

    def successions_stamp(self) -> tuple:
        """What changes whenever the recorded rewrites may have (``storage.history.lineage`` rereads them
        only then): the size and modification time of the file and of its write-ahead log, two ``stat``
        calls. Any write changes it, samples too: a reread of one small table, at most once a write."""
        stamp: list[tuple[int, int, int] | None] = []
        for path in (self.path, self.path.with_name(self.path.name + "-wal")):
            try:
                st = path.stat()
            except OSError:
                stamp.append(None)
                continue
            stamp.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(stamp)

    def successions(self) -> list[Succession]:
        """Every recorded rewrite, oldest first; none when the store or its table does not exist."""
        if not self.path.exists():
            return []
        conn = self._connect(read_only=True)
        try:
            if not conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='successions'").fetchone():
                return []
            cur = conn.execute("SELECT before, after, path, why FROM successions ORDER BY rowid")
            return [Succession(*map(str, r)) for r in cur.fetchall()]
        except sqlite3.Error as exc:
            raise self._fail(exc) from exc
        finally:
            conn.close()


    def _samples(self, rows: list[tuple], columns: tuple[str, ...] = _COLUMNS) -> list[Sample]:
        """Rows as samples; a row that cannot be one (a hand edit, another tool) is skipped with a
        located warning, and an implausible duration is kept as an outlier, so one bad row never
        stops calibration, planning or ``history show``."""
        self.skipped = []
        out = []
        for seq, *values in rows:
            field, what = row_problem(dict(zip(columns, values, strict=True)))
            if field:
                self._warn(f"{self.path}: row {seq}: {field}: {what}; the row is skipped and the other rows are "
                           f"used. Delete it (sqlite3 {self.path} \"DELETE FROM samples WHERE seq={seq}\"), "
                           "or re-import its night")
                continue
            sample = _sample(values, columns)
            marked = screen(sample)
            if marked.outlier and not sample.outlier:
                self._warn(f"{self.path}: row {seq}: elapsed_s: {marked.outlier.removeprefix('elapsed ')}; kept as an "
                           "outlier that calibration and planning never use")
            out.append(marked)
        return out

    def _warn(self, message: str) -> None:
        self.skipped.append(message)
        log.warning("%s", message)


def _row(s: Sample) -> tuple:
    if s.outcome not in OUTCOMES:
        raise ValueError(f"sample {s.test_id}: outcome: {s.outcome!r} is not one of {', '.join(OUTCOMES)}")
    if not s.elapsed_s >= 0:
        raise ValueError(f"sample {s.test_id}: elapsed_s: {s.elapsed_s!r} must be a number >= 0")
    return (s.test_id, s.hardware, s.sha256, s.outcome, float(s.elapsed_s), s.started_at, s.node, s.image,
            s.run_id, int(s.attempt), s.source, int(bool(s.capped)), s.outlier, s.env, s.reason)


def _sample(r: tuple, columns: tuple[str, ...] = _COLUMNS) -> Sample:
    values = dict(zip(columns, r, strict=True))
    values["capped"] = bool(values["capped"])
    return Sample(**values)


def _is_busy(exc: sqlite3.Error) -> bool:
    """Another connection holds the lock: the file is fine, only in use."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "database is locked" in str(exc) or (
        "database table is locked" in str(exc))


def _is_permission(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM) or any(
        word in str(exc) for word in ("readonly", "unable to open", os.strerror(errno.EACCES)))


def _upgrade_v1(conn: sqlite3.Connection) -> None:
    """Version 1 -> 2: a new table with the wider outcome check and the outlier column, rows copied."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] == 1:
            conn.execute(_TABLE.format(name="samples_v2"))
            cols = ", ".join(("seq", *_V1_COLUMNS))
            conn.execute(f"INSERT INTO samples_v2 ({cols}) SELECT {cols} FROM samples")
            conn.execute("DROP TABLE samples")
            conn.execute("ALTER TABLE samples_v2 RENAME TO samples")
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except sqlite3.Error:
        conn.execute("ROLLBACK")
        raise


def _columns(conn: sqlite3.Connection) -> set[str]:
    return {row[1] for row in conn.execute("PRAGMA table_info(samples)")}


def _add_later_columns(conn: sqlite3.Connection) -> None:
    """A version 2 store gets the ``env`` and ``reason`` columns it lacks (empty in every existing row:
    no extra environment, no infra reason known)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for name in _LATER_COLUMNS:
            if name not in _columns(conn):  # another process may have added it while this one waited
                conn.execute(f"ALTER TABLE samples ADD COLUMN {name} TEXT NOT NULL DEFAULT ''")
        conn.execute("COMMIT")
    except sqlite3.Error:
        conn.execute("ROLLBACK")
        raise
