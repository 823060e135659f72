"""The catalog's per-file cache: scan results keyed by content digest, so a warm catalog parses nothing.

One JSON file per checkout (``catalog-<digest of the path>.json`` in the state folder, or a
path given). ``files`` remembers each file's (mtime, size) -> sha256, a shortcut that is only
trusted for files last modified well before the cache was written (a file changed in the same
instant is read again); ``scans`` holds each file's scan under the rules digest of its dialect
and is reused only when the content digest matches; ``defs`` remembers which contents define
``register_*_ci`` functions. A cache that cannot be read is ignored and rebuilt, with a note:
it can cost time, never correctness.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from pathlib import Path

from pipelines.core.catalog.codec import decode, encode
from pipelines.core.catalog.forked import FORK_MIN_ITEMS, can_fork
from pipelines.core.catalog.scan import FileScan

VERSION = 1


def _code_digest() -> str:
    """Digest of the code that makes a scan: results of other code are never reused."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for shared in ("model.py", "asset_rules.py"):  # the core modules a scan's results depend on
        h.update((here.parent / shared).read_bytes() if (here.parent / shared).is_file() else shared.encode())
    for name in ("cache.py", "codec.py", "dialect.py", "infer.py", "registry.py", "resolve.py", "scan.py", "ids.py",
                 "assemble.py", "requirements.py", "detect.py", "incremental.py", "cached.py", "template.py", "__init__.py"):
        try:
            h.update((here / name).read_bytes())
        except OSError:
            h.update(name.encode())
    return h.hexdigest()[:16]


CODE = _code_digest()
#: a file modified less than this before the cache was written is read again (same-instant edits)
RACY_NS = 2_000_000_000
#: from this many new scans on, the scans file is written by a forked process (see write_scans_soon)
WRITER_MIN_SCANS = FORK_MIN_ITEMS


def cache_file(where: Path | str, repo: Path) -> Path:
    """``where`` itself when it names a .json file, else ``<where>/catalog-<digest of repo>.json``."""
    where = Path(where)
    if where.suffix == ".json":
        return where
    return where / f"catalog-{hashlib.sha256(str(repo).encode()).hexdigest()[:16]}.json"


class ScanCache:
    """Load once, answer lookups, save once (only when something changed).

    Three files: the index (stats, digests, what the last catalog was made from, the tests of
    files edited since) read on every catalog; ``<name>.catalog.json`` (the last full build's
    catalog) rewritten only by a full build; ``<name>.scans.json`` (per-file scans) read only
    when a full build needs them.
    """

    def __init__(self, path: Path | None, rules: str = ""):
        self.path, self.rules = path, rules
        self.notes: list[str] = []
        self.written_ns = 0
        self.files: dict[str, list] = {}
        self.defs: dict[str, bool] = {}
        self.result: dict = {}
        self.pending: dict[str, list] = {}
        self._all: dict[str, dict] | None = None
        self._scans: dict[str, list] = {}
        self._fresh: dict[str, FileScan] = {}  # stored since loading, encoded when written
        self._writer = 0  # pid of a process writing the scans file (write_scans_soon)
        self._written_rules: str | None = None  # the rules whose scans it wrote
        self.dirty = self.scans_dirty = False
        self._base: list | None = None  # a full build's encoded catalog waiting to be written
        if path is not None:
            self._load(path)

    @property
    def base_path(self) -> Path | None:
        return None if self.path is None else self.path.with_name(self.path.stem + ".catalog.json")

    def base(self) -> list | None:
        """The encoded catalog of the last full build, when it is the one the index refers to."""
        if self._base is not None:
            return self._base
        data = self._read(self.base_path, "base") if self.base_path is not None else None
        if data is None or data.get("base", {}).get("id") != self.result.get("base"):
            return None
        return data["base"].get("catalog")

    @property
    def scans_path(self) -> Path | None:
        return None if self.path is None else self.path.with_name(self.path.stem + ".scans.json")

    def _read(self, path: Path, what: str) -> dict | None:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.notes.append(f"cache {path} cannot be read ({exc.strerror}); reading every file")
            return None
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("version") != VERSION:
                raise ValueError(f"version {data.get('version') if isinstance(data, dict) else '?'}, expected {VERSION}")
            if data.get("code") != CODE:  # the catalog code changed since: start afresh, nothing to report
                return None
            if not all(isinstance(data.get(k), dict) for k in what.split(",")):
                raise ValueError(f"{what} are not tables")
            return data
        except (ValueError, KeyError, TypeError) as exc:
            self.notes.append(f"cache {path} is corrupt ({str(exc)[:120]}); ignored and rebuilt")
            return None

    def _load(self, path: Path) -> None:
        data = self._read(path, "files,defs")
        if data is None:
            self.dirty = True
            return
        try:
            self.written_ns = int(data["written_ns"])
        except (KeyError, TypeError, ValueError):
            self.notes.append(f"cache {path} is corrupt (no written_ns); ignored and rebuilt")
            self.dirty = True
            return
        self.files, self.defs = data["files"], data["defs"]
        self.result = data.get("result") if isinstance(data.get("result"), dict) else {}
        self.pending = data.get("pending") if isinstance(data.get("pending"), dict) else {}

    @property
    def scans(self) -> dict[str, list]:
        if self._all is None:
            data = self._read(self.scans_path, "scans") if self.scans_path is not None else None
            self._all = data["scans"] if data else {}
            picked = self._all.get(self.rules, {})
            self._scans = picked if isinstance(picked, dict) else {}
            if self.pending:
                self._scans.update(self.pending)
                self.pending, self.scans_dirty, self.dirty = {}, True, True
        return self._scans

    def use_rules(self, rules: str) -> None:
        """Scans are valid under one dialect's rules only (the others are dropped at the next save)."""
        if rules != self.rules:
            self.rules = rules
            self._fresh = {}
            if self._all is not None:
                picked = self._all.get(rules, {})
                self._scans = picked if isinstance(picked, dict) else {}

    def known_sha(self, rel: str, st: os.stat_result) -> str | None:
        """The digest of ``rel`` when its stat matches and it is not racy, else None."""
        entry = self.files.get(rel)
        if (entry and len(entry) == 3 and entry[0] == st.st_mtime_ns and entry[1] == st.st_size
                and st.st_mtime_ns < self.written_ns - RACY_NS):
            return entry[2]
        return None

    def remember(self, rel: str, st: os.stat_result, sha: str) -> None:
        if self.files.get(rel) != [st.st_mtime_ns, st.st_size, sha]:
            self.files[rel] = [st.st_mtime_ns, st.st_size, sha]
            self.dirty = True

    def scan(self, key: str, rel: str, sha: str | None) -> FileScan | None:
        """The cached scan of ``rel`` under ``key`` when its digest is ``sha`` (any digest when None)."""
        fresh = self._fresh.get(key)
        if fresh is not None:
            return fresh if sha is None or fresh.sha256 == sha else None
        data = self.scans.get(key)
        if not isinstance(data, list) or not data or (sha is not None and data[0] != sha):
            return None
        try:
            return decode(rel, data)
        except (ValueError, TypeError):
            return None

    def store(self, key: str, scan: FileScan) -> None:
        self.scans  # noqa: B018 - the table of the current rules, loaded before it is added to
        self._fresh[key] = scan
        self.scans_dirty = True

    def _table(self) -> dict[str, list]:
        """The scans of the current rules as the scans file holds them."""
        if not self._fresh:
            return self._scans
        return {**self._scans, **{key: encode(scan) for key, scan in self._fresh.items()}}

    def write_scans_soon(self) -> None:
        """Start writing the scans file in a forked process, which has the other CPU to itself while this
        one builds the catalog; :meth:`save` waits for it (and writes the file itself if it failed).
        Only for many new scans, where encoding and writing them costs more than the fork."""
        self._reap()
        if (not self.scans_dirty or self.scans_path is None or len(self._fresh) < WRITER_MIN_SCANS
                or not can_fork()):
            return
        try:
            pid = os.fork()
        except OSError:
            return
        if pid == 0:  # the writer: write, report by exit status, never return to the caller
            code = 1
            try:
                code = 0 if self._write_scans() else 1
            finally:
                os._exit(code)
        self._writer, self._written_rules, self.scans_dirty = pid, self.rules, False

    def close(self) -> None:
        """Wait for the scans writer if one is still running (after save() none is): a load that
        raised between the fork and save() would otherwise leave it a zombie until this process exits."""
        self._reap()

    def _reap(self) -> None:
        """Wait for the scans writer, if any; when it failed, the scans are written again by save()."""
        if not self._writer:
            return
        _, status = os.waitpid(self._writer, 0)
        self._writer = 0
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            self.scans_dirty = True
        self.dirty = True  # written_ns must follow the scans

    def _write_scans(self) -> bool:
        return self._write(self.scans_path, {"version": VERSION, "code": CODE, "scans": {self.rules: self._table()}})

    def keep_result(self, result: dict, base: list | None = None) -> None:
        """What the catalog was made from (see :mod:`.incremental`); ``base``: a full build's catalog."""
        if base is not None:
            self._base = base
            result = {**result, "base": hashlib.sha256(str(time.time_ns()).encode() + os.urandom(8)).hexdigest()[:16]}
        if result != self.result:
            self.result = result
            self.dirty = True

    def store_later(self, key: str, scan: FileScan) -> None:
        """A scan kept in the index until the scans file is next read anyway (saves rewriting it)."""
        self.pending[key] = encode(scan)
        self.dirty = True

    def save(self) -> None:
        """Write atomically (temp file + rename); a failure to write is a note, never an error."""
        if self.path is None:
            return
        self._reap()
        if self._written_rules not in (None, self.rules):  # the writer's scans were of rules since left
            self.scans_dirty = True
        if self.scans_dirty and self.scans_path is not None:
            self._write_scans()
            self.scans_dirty = False
            self.dirty = True  # written_ns must follow the scans
        if self._base is not None and self.base_path is not None and self.dirty:
            self._write(self.base_path, {"version": VERSION, "code": CODE,
                                         "base": {"id": self.result.get("base"), "catalog": self._base}})
        if self.dirty:
            self._write(self.path, {"version": VERSION, "code": CODE, "written_ns": time.time_ns(), "files": self.files,
                                    "defs": self.defs, "result": self.result, "pending": self.pending})
            self.dirty = False

    def _write(self, path: Path, data: dict) -> bool:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data, separators=(",", ":"), check_circular=False))
            os.replace(tmp, path)
            return True
        except OSError as exc:
            self.notes.append(f"cache {path} not written ({exc.strerror}); the next catalog reads every file")
            with contextlib.suppress(OSError):  # the folder may not be one (ENOTDIR): nothing was left there
                tmp.unlink(missing_ok=True)
            return False
