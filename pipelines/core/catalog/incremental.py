"""The whole catalog between two reads of a checkout: served as is, or patched for a few edited files.

The cache keeps the last registry catalog with the digest of every file it was made from and of
each file's inferred needs. When every digest and every other input (rules, roots, spec) is
unchanged, that catalog is the answer. When a few files changed and each still registers the
same test ids with the same needs (the everyday edit: an est_time, a test body), only those
files are parsed and their tests replaced, keeping the requirement keys. Anything else (a new,
removed or broken file, new needs, other ids) falls back to the full build, which is always
right; this only decides when the full build's answer is already known.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from pipelines.core.catalog.assemble import registry_tests
from pipelines.core.catalog.cache import ScanCache
from pipelines.core.catalog.codec import decode_catalog, encode_catalog, encode_needs
from pipelines.core.catalog.dialect import Dialect
from pipelines.core.catalog.infer import Needs
from pipelines.core.catalog.requirements import with_requirements
from pipelines.core.catalog.scan import FileScan, scan_bytes
from pipelines.core.model import Catalog

#: above this many edited files the full build is about as fast
MAX_PATCHED = 64


def inputs_digest(inputs: list) -> str:
    return hashlib.sha256(repr(inputs).encode()).hexdigest()


def needs_digest(scan: FileScan) -> str:
    """Identifies what a file's prepare() needs."""
    return hashlib.sha256(str(encode_needs(scan.needs)).encode()).hexdigest()[:16]


def remember(cache: ScanCache, inputs: str, scans: list[FileScan], catalog: Catalog) -> None:
    """Keep ``catalog`` as the answer for exactly these inputs and file digests."""
    if any(not s.sha256 for s in scans):
        return
    digests: dict[Needs, str] = {}  # files share needs: digest each distinct one once
    by_id: dict[int, str] = {}  # ... and mostly one object each, found without hashing it (scans hold them alive)
    needs = {}
    for s in scans:
        digest = by_id.get(id(s.needs))
        if digest is None:
            digest = digests.get(s.needs)
            if digest is None:
                digest = digests[s.needs] = needs_digest(s)
            by_id[id(s.needs)] = digest
        needs[s.path] = digest
    cache.keep_result({"inputs": inputs, "shas": {s.path: s.sha256 for s in scans}, "needs": needs, "overlay": {}},
                      encode_catalog(catalog))


def reuse(repo: Path, files: list[str], stats: Mapping[str, os.stat_result], cache: ScanCache, inputs: str,
          dialect: Dialect, implicit_dirs: tuple[str, ...]) -> Catalog | None:
    """The catalog without a full build, or None when it needs one."""
    prev = cache.result
    shas = prev.get("shas")
    if prev.get("inputs") != inputs or not isinstance(shas, dict) or len(shas) != len(files):
        return None
    base = str(repo) + os.sep
    changed: list[tuple[str, os.stat_result | None]] = []
    for rel in files:
        st = stats.get(rel)
        if st is None:
            try:
                st = os.stat(base + rel)
            except OSError:
                return None
        if rel not in shas:
            return None
        if cache.known_sha(rel, st) != shas[rel]:
            changed.append((rel, st))
            if len(changed) > MAX_PATCHED:
                return None
    try:
        catalog = _last(str(repo), cache)
        if catalog is None:
            return None
        return _patch(base, catalog, changed, cache, dialect, implicit_dirs) if changed else catalog
    except (ValueError, TypeError, KeyError, AttributeError):
        return None  # a damaged entry: the full build redoes it


def _last(repo: str, cache: ScanCache) -> Catalog | None:
    """The last full build's catalog with the tests of files edited since (the overlay) swapped in."""
    encoded = cache.base()
    if encoded is None:
        return None
    catalog = decode_catalog(repo, encoded)
    overlay = cache.result.get("overlay") or {}
    if not overlay:
        return catalog
    fresh = decode_catalog(repo, [[row for rows in overlay.values() for row in rows], [], [], []]).tests
    tests = sorted([t for t in catalog.tests if t.path not in overlay] + list(fresh), key=lambda t: (t.path, t.line, t.id))
    return Catalog(repo, tuple(tests), catalog.requirements, catalog.problems, catalog.assumptions)


def _patch(base: str, catalog: Catalog, changed: list, cache: ScanCache, dialect: Dialect,
           implicit_dirs: tuple[str, ...]) -> Catalog | None:
    prev = cache.result
    implicit = tuple(d.strip("/") + "/" for d in implicit_dirs)
    shas, overlay, replaced, fresh = dict(prev["shas"]), dict(prev.get("overlay") or {}), set(), []
    for rel, st in changed:
        try:
            with open(base + rel, "rb") as fh:
                data = fh.read()
        except OSError:
            return None
        sha = hashlib.sha256(data).hexdigest()
        cache.remember(rel, st, sha)
        if sha == shas[rel]:
            continue  # touched, not changed
        scan = scan_bytes(rel, data, True, dialect, bool(implicit) and rel.startswith(implicit), sha)
        cache.store_later(f"r{'i' if implicit and rel.startswith(implicit) else ''}:{rel}", scan)
        if (scan.problems or not scan.registrations or any(r.assumed_gpus for r in scan.registrations)
                or needs_digest(scan) != prev["needs"].get(rel) or any(p.path == rel for p in catalog.problems)):
            return None
        tests, refused = registry_tests([scan], implicit_dirs, dialect)
        old = {t.id: t for t in catalog.tests if t.path == rel}
        if refused or len(tests) != len(old) or {t.id for t in tests} != set(old):  # a new problem: read it all again
            return None
        tests = [with_requirements(t, old[t.id].requirements, old[t.id].unresolved) for t in tests]
        overlay[rel] = encode_catalog(Catalog("", tuple(tests)))[0]
        fresh += tests
        replaced.add(rel)
        shas[rel] = sha
    if not replaced:
        return catalog
    tests = sorted([t for t in catalog.tests if t.path not in replaced] + fresh, key=lambda t: (t.path, t.line, t.id))
    cache.keep_result({**prev, "shas": shas, "overlay": overlay})
    return Catalog(catalog.repo, tuple(tests), catalog.requirements, catalog.problems, catalog.assumptions)
