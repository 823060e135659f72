"""Where samples live between nights: a small Protocol and a durable local file database.

The local store is SQLite in WAL mode with one transaction per ``append``: a writer killed
mid-night loses at most the batch it was writing, never an earlier sample, and never leaves a
half-written row. Anything unreadable is reported with the file and what to do, never skipped.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from pipelines.core.model import Sample

OUTCOMES = ("passed", "failed", "timed_out", "infra_error", "skipped")
SCHEMA_VERSION = 1
_COLUMNS = ("test_id", "hardware", "sha256", "outcome", "elapsed_s", "started_at", "node", "image",
            "run_id", "attempt", "source", "capped")
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS samples (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  test_id TEXT NOT NULL, hardware TEXT NOT NULL, sha256 TEXT NOT NULL,
  outcome TEXT NOT NULL CHECK (outcome IN ({", ".join(repr(o) for o in OUTCOMES)})),
  elapsed_s REAL NOT NULL CHECK (elapsed_s >= 0), started_at TEXT NOT NULL,
  node TEXT NOT NULL, image TEXT NOT NULL, run_id TEXT NOT NULL, attempt INTEGER NOT NULL,
  source TEXT NOT NULL, capped INTEGER NOT NULL,
  UNIQUE (run_id, test_id, hardware, attempt, started_at)
);
"""


class HistoryError(RuntimeError):
    """The history store cannot be read or written; the message names the file and the fix."""


class HistoryStore(Protocol):
    """Append-only sample storage; implementations: local file (here), S3 (later)."""

    def append(self, samples: Iterable[Sample]) -> None: ...

    def read(self) -> list[Sample]: ...


class FileHistoryStore:
    """Samples in one SQLite file; safe against crashes and concurrent writers on one host."""

    def __init__(self, path: Path | str):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"FileHistoryStore({str(self.path)!r})"

    def _fail(self, exc: Exception) -> HistoryError:
        return HistoryError(
            f"{self.path}: history store is unreadable ({exc}); nothing was changed. Move the file "
            "aside (keep it for recovery, e.g. `sqlite3 FILE .recover`) and re-import past nights with "
            "`nightly history import`, or point --store / NIGHTLY_HOME at a good copy."
        )

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(_SCHEMA)
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                conn.execute("COMMIT")
            elif version != SCHEMA_VERSION:
                conn.close()
                raise HistoryError(
                    f"{self.path}: history schema version {version}, this nightly reads {SCHEMA_VERSION}; "
                    "upgrade nightly-e2e or point --store / NIGHTLY_HOME at a store of this version."
                )
            return conn
        except sqlite3.Error as exc:
            raise self._fail(exc) from exc

    def add(self, samples: Iterable[Sample]) -> int:
        """Append in one transaction; returns how many were new (an attempt already stored is kept once)."""
        rows = [_row(s) for s in samples]
        if not rows:
            return 0
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            before = conn.total_changes
            conn.executemany(
                f"INSERT OR IGNORE INTO samples ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                rows,
            )
            added = conn.total_changes - before
            conn.execute("COMMIT")
            return added
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise self._fail(exc) from exc
        finally:
            conn.close()

    def append(self, samples: Iterable[Sample]) -> None:
        self.add(samples)

    def read(self) -> list[Sample]:
        """Every sample in the order it was stored; a missing file is an empty history."""
        if not self.path.exists():
            return []
        conn = self._connect()
        try:
            cur = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM samples ORDER BY seq")
            return [_sample(r) for r in cur.fetchall()]
        except sqlite3.Error as exc:
            raise self._fail(exc) from exc
        finally:
            conn.close()


def _row(s: Sample) -> tuple:
    if s.outcome not in OUTCOMES:
        raise ValueError(f"sample {s.test_id}: outcome: {s.outcome!r} is not one of {', '.join(OUTCOMES)}")
    if not s.elapsed_s >= 0:
        raise ValueError(f"sample {s.test_id}: elapsed_s: {s.elapsed_s!r} must be a number >= 0")
    return (s.test_id, s.hardware, s.sha256, s.outcome, float(s.elapsed_s), s.started_at, s.node, s.image,
            s.run_id, int(s.attempt), s.source, int(bool(s.capped)))


def _sample(r: tuple) -> Sample:
    values = dict(zip(_COLUMNS, r, strict=True))
    values["capped"] = bool(values["capped"])
    return Sample(**values)
