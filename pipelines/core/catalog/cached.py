"""Reading files through the catalog cache: only contents the cache has not seen are read or parsed.

``defines_registry`` answers the registry-module search from remembered digests;
``scan_cached`` is :func:`scan.scan_files` that parses a file only when the scans file has no
result for its content digest (on every CPU for big batches, see :mod:`.forked`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pipelines.core.catalog.cache import ScanCache
from pipelines.core.catalog.dialect import Dialect, M, may_define_registry
from pipelines.core.catalog.forked import fork_map
from pipelines.core.catalog.scan import FileScan, scan_bytes, scan_file


def defines_registry(repo: Path, cache: ScanCache):
    """``defines(rel, stat)`` for :func:`detect.choose`, answered from the cache where it can."""
    def defines(rel: str, st: os.stat_result) -> bool:
        sha = cache.known_sha(rel, st)
        if sha is not None and sha in cache.defs:
            return bool(cache.defs[sha])
        try:
            data = (repo / rel).read_bytes()
        except OSError:
            return False
        sha = hashlib.sha256(data).hexdigest()
        cache.remember(rel, st, sha)
        flag = may_define_registry(data)
        if cache.defs.get(sha) != flag:
            cache.defs[sha] = flag
            cache.dirty = True
        return flag
    return defines


def scan_cached(repo: Path, rels: list[str], cache: ScanCache, registry: bool = True, dialect: Dialect | None = None,
                implicit: tuple[str, ...] = (), workers: int | None = None,
                stats: dict[str, os.stat_result] | None = None) -> list[FileScan]:
    """:func:`scan.scan_files` that parses only files whose content the cache has not seen.

    ``stats`` are the files' stats when the caller has them already (one stat per file per catalog).
    """
    dialect = dialect or M
    mode = "r" if registry else "t"
    keys = {rel: f"{mode}{'i' if implicit and rel.startswith(implicit) else ''}:{rel}" for rel in rels}
    out: dict[str, FileScan] = {}
    unknown: list[tuple[str, os.stat_result | None]] = []
    base = str(repo) + os.sep
    stats = stats or {}
    for rel in rels:
        try:
            st = stats.get(rel) or os.stat(base + rel)
        except OSError:
            unknown.append((rel, None))
            continue
        sha = cache.known_sha(rel, st)
        hit = cache.scan(keys[rel], rel, sha) if sha is not None else None
        if hit is not None:
            out[rel] = hit
        else:
            unknown.append((rel, st))
    cache.scans  # noqa: B018 - load the scans file here, once, not in each worker

    def read_and_scan(item: tuple[str, os.stat_result | None]) -> tuple[str, FileScan, bool]:
        """(digest, scan, whether it came from the cache): the work of one unknown file, in any process."""
        rel, st = item
        if st is None:
            return "", scan_file(str(repo), rel, registry, dialect), False
        try:
            with open(base + rel, "rb", buffering=0) as fh:  # unbuffered: one read of the whole file, no copy
                data = fh.readall()
        except OSError:
            return "", scan_file(str(repo), rel, registry, dialect), False
        sha = hashlib.sha256(data).hexdigest()
        hit = cache.scan(keys[rel], rel, sha)
        if hit is not None:
            return sha, hit, True
        return sha, scan_bytes(rel, data, registry, dialect, keys[rel][1] == "i", sha), False

    for (rel, st), (sha, scan, hit) in zip(unknown, fork_map(read_and_scan, unknown, workers), strict=True):
        out[rel] = scan
        if sha and st is not None:
            cache.remember(rel, st, sha)
        if sha and not hit:
            cache.store(keys[rel], scan)
    cache.write_scans_soon()
    return [out[rel] for rel in rels]
