"""Test ids: Dagster partition keys that are stable, reversible to the file, and safe.

An id is the repo-relative path of the test file (``tests/e2e/test_grpo.py``) when the file holds
one test, and ``<path>::<variant>`` for each test when it holds several (``<backend>-<suite>``
for registry calls, a readable summary of env/args for template matrix entries). Paths are
checked against a whitelist instead of being cleaned up: a hostile or odd name is rejected with
a reason, never mangled into something that could collide with another test.
"""

from __future__ import annotations

import hashlib
import re

SEPARATOR = "::"

# Repo-relative path: ASCII letters, digits and ``._-+=@/``; no ':' so that ``::`` stays unambiguous.
_PATH_CHARS = re.compile(r"[A-Za-z0-9._+=@/-]+")
# A variant may also not contain ':' (it follows the only ``::``).
_VARIANT_CHARS = re.compile(r"[A-Za-z0-9._+=@/-]+")
# Characters kept verbatim in file names; everything else is %XX-escaped (so '%' itself is too).
_FILENAME_KEEP = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._+=@-")
_MAX_FILENAME = 200


def describe_char(ch: str) -> str:
    """A character a name may not hold, as an error says it (whitespace and control characters by repr)."""
    if ord(ch) > 127:
        return f"non-ASCII character {ascii(ch)}"
    if ch.isspace():
        return f"whitespace {ch!r}"
    if ord(ch) < 32 or ord(ch) == 127:
        return f"control character {ch!r}"
    return f"character {ch!r}"


#: the paths :func:`path_problem` accepts, in one match (it runs for every collected file)
_SAFE_PATH = re.compile(r"(?![./])(?!.*(?:\.\.|//|/\.))[A-Za-z0-9._+=@/-]*[A-Za-z0-9._+=@-]")


def path_problem(rel: str) -> str | None:
    """Why ``rel`` cannot be part of a test id, or None when it can."""
    if _SAFE_PATH.fullmatch(rel):
        return None
    if not rel:
        return "empty path"
    if rel.startswith("/"):
        return "absolute path; test paths must be relative to the repository"
    if ".." in rel:
        return "contains '..'"
    bad = [] if _PATH_CHARS.fullmatch(rel) else [ch for ch in rel if not _PATH_CHARS.fullmatch(ch)]
    if bad:
        return f"contains {describe_char(bad[0])}; test paths may only use ASCII letters, digits and ._-+=@/"
    if "//" in rel or rel.endswith("/"):
        return "contains an empty path segment"
    if rel.startswith(".") or "/." in rel:
        return "has a path segment starting with '.'"
    return None


def variant_problem(variant: str) -> str | None:
    """Why ``variant`` cannot follow ``::`` in an id, or None when it can."""
    if not variant:
        return "empty variant"
    if ".." in variant:
        return "contains '..'"
    bad = [] if _VARIANT_CHARS.fullmatch(variant) else [ch for ch in variant if not _VARIANT_CHARS.fullmatch(ch)]
    if bad:
        return f"contains {describe_char(bad[0])}; variants may only use ASCII letters, digits and ._-+=@/"
    return None


def make_id(path: str, variant: str | None = None) -> str:
    """The id of a test of ``path`` (already checked with :func:`path_problem`)."""
    return path if variant is None else f"{path}{SEPARATOR}{variant}"


def id_problem(test_id: str) -> str | None:
    """Why ``test_id`` is not a valid id, or None (used on ids from outside: CLI, history)."""
    path, sep, variant = test_id.partition(SEPARATOR)
    return path_problem(path) or (variant_problem(variant) if sep else None)


def test_id_to_path(test_id: str) -> str:
    """The repo-relative file a test id refers to."""
    return test_id.partition(SEPARATOR)[0]


# Not a pytest test despite the name.
test_id_to_path.__test__ = False  # type: ignore[attr-defined]


def safe_filename(test_id: str) -> str:
    """A file name for ``test_id``: no '/', reversible with :func:`id_from_filename`, collision-free.

    Every character outside ``[A-Za-z0-9._+=@-]`` (including '%') becomes ``%XX`` per UTF-8 byte,
    and a leading '.' is escaped too, so distinct ids always give distinct names and none is
    hidden or special (``.``/``..``). Names longer than 200 characters are cut and end in ``~``
    plus a hash of the id: still distinct ('~' never appears otherwise) but no longer reversible.
    """
    out = []
    for i, ch in enumerate(test_id):
        if ch in _FILENAME_KEEP and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    name = "".join(out) or "%"
    if len(name) > _MAX_FILENAME:
        digest = hashlib.sha256(test_id.encode("utf-8")).hexdigest()[:16]
        name = f"{name[:_MAX_FILENAME - 17]}~{digest}"
    return name


def id_from_filename(name: str) -> str:
    """Undo :func:`safe_filename` (for names that were not shortened)."""
    if "~" in name:
        raise ValueError(f"{name!r} was shortened with a hash and cannot be reversed")
    if name == "%":
        return ""
    raw = bytearray()
    i = 0
    while i < len(name):
        if name[i] == "%":
            raw += bytes.fromhex(name[i + 1:i + 3])
            i += 3
        else:
            raw += name[i].encode("ascii")
            i += 1
    return raw.decode("utf-8")
