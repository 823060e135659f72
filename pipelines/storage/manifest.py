"""What a finished cache entry holds, so reuse can prove the bytes are still the ones built.

The completion marker lists every file with its size and sha256, and one digest over that list.
Before an entry is reused the files are checked against it: a truncated shard, a deleted file or
a bit flip makes the entry damaged (rebuilt, counted as infra), never a test failure the next
morning. ``level="size"`` checks names and sizes only, for caches too large to hash every night.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MARKER = ".nightly-complete.json"
_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and p.name != MARKER)


def make_manifest(folder: Path) -> dict:
    """Every file of ``folder`` (relative path -> size, sha256) and a digest over all of them."""
    files = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": file_sha256(p)}
             for p in _files(folder)}
    return {"files": files, "digest": _digest(files)}


def _digest(files: dict) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def read_marker(folder: Path) -> dict | None:
    try:
        data = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def damage(folder: Path, level: str = "full") -> str:
    """Why the entry in ``folder`` cannot be reused as it is, or "" when it matches its manifest."""
    marker = read_marker(folder)
    if marker is None:
        return f"{folder / MARKER}: completion marker is missing or unreadable"
    manifest = marker.get("manifest")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return f"{folder / MARKER}: no manifest (built by an older nightly)"
    files = manifest["files"]
    if _digest(files) != manifest.get("digest"):
        return f"{folder / MARKER}: the manifest does not match its own digest"
    for rel, want in sorted(files.items()):
        path = folder / rel
        try:
            size = path.stat().st_size
        except OSError:
            return f"{path}: listed in the manifest but missing"
        if size != want.get("size"):
            return f"{path}: {size} bytes, the manifest says {want.get('size')}"
        if level == "full" and file_sha256(path) != want.get("sha256"):
            return f"{path}: content differs from the manifest (sha256)"
    return ""
