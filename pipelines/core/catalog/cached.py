"""Reading files through the catalog cache: only contents the cache has not seen are read or parsed.

``defines_registry`` answers the registry-module search from remembered digests;
``scan_cached`` is :func:`scan.scan_files` that parses a file only when the scans file has no
result for its content digest (a pool for big trees, as ``scan_files`` decides).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pipelines.core.catalog.cache import ScanCache
from pipelines.core.catalog.dialect import Dialect, M, may_define_registry
from pipelines.core.catalog.scan import (
    PARALLEL_MIN_CPUS,
    PARALLEL_MIN_FILES,
    FileScan,
    scan_bytes,
    scan_file,
    scan_files,
)


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
    cpus = os.cpu_count() or 1
    pool = workers is not None and workers > 1 or (
        workers is None and len(unknown) >= PARALLEL_MIN_FILES and cpus >= PARALLEL_MIN_CPUS)
    fresh: list[str] = []
    for rel, st in unknown:
        if st is None:
            out[rel] = scan_file(str(repo), rel, registry, dialect)
            continue
        try:
            with open(base + rel, "rb") as fh:
                data = fh.read()
        except OSError:
            out[rel] = scan_file(str(repo), rel, registry, dialect)
            continue
        sha = hashlib.sha256(data).hexdigest()
        cache.remember(rel, st, sha)
        hit = cache.scan(keys[rel], rel, sha)
        if hit is not None:
            out[rel] = hit
        elif pool:
            fresh.append(rel)
        else:
            out[rel] = scan = scan_bytes(rel, data, registry, dialect, keys[rel][1] == "i")
            cache.store(keys[rel], scan)
    if fresh:
        for scan in scan_files(repo, fresh, registry, workers, dialect, implicit):
            out[scan.path] = scan
            if scan.sha256:
                cache.store(keys[scan.path], scan)
    return [out[rel] for rel in rels]
