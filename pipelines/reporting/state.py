"""The quarantine document of a repo, kept in the deployment's state store.

Key ``quarantine/<repo>.json``: locally ``<home>/quarantine/<repo>.json``, on S3 next to the night
summaries. The document itself is handled by pure functions in pipelines.core.flaky.
Changes go through ``update_doc``: the store's atomic read-modify-write (a file lock locally, a
conditional write on S3), so concurrent ``nightly quarantine add|release`` never lose an action.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pipelines.core.flaky import doc_problems
from pipelines.core.jsonlines import key_lines
from pipelines.core.model import CatalogError, Problem
from pipelines.storage.state import StateStore


def quarantine_key(repo: str) -> str:
    return f"quarantine/{repo}.json"


def load_doc(store: StateStore, repo: str) -> dict:
    """The document, ``{}`` when there is none; a broken one is an error naming the file, line and
    field, and the fix: every command that reads it refuses it (nothing is written over it)."""
    key = quarantine_key(repo)
    return parse_doc(store.get(key), store.uri(key))


#: what to do about a document that cannot be used (commands refuse it rather than lose its actions)
ASIDE = "fix it by hand, or move the file aside to start an empty quarantine"


def parse_doc(text: str | None, where: str) -> dict:
    """The document in ``text`` (``{}`` for None), checked strictly; ``where`` locates its problems
    as ``where:LINE: actions[i].field: what is wrong; what to do``."""
    if text is None:
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CatalogError(Problem(where, getattr(exc, "lineno", 1), "quarantine",
                                   f"not valid JSON ({exc}); {ASIDE} (or restore it from a backup)")) from exc
    problems = doc_problems(doc)
    if problems:
        lines = key_lines(text)
        raise CatalogError([Problem(where, lines.get(path, 1), _field(path), f"{message}; {ASIDE}")
                            for path, message in problems])
    return doc


def _field(path: tuple) -> str:
    """``("actions", 3, "by")`` as ``actions[3].by``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "quarantine"


def dump_doc(doc: dict) -> str:
    """The text stored for ``doc``; a document the next read would refuse is never written."""
    problems = doc_problems(doc)
    if problems:
        raise ValueError("quarantine: not stored: " + "; ".join(f"{_field(p)}: {m}" for p, m in problems))
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def save_doc(store: StateStore, repo: str, doc: dict) -> str:
    """Store the whole document, replacing what is there (setup and repair; changes use update_doc)."""
    return store.put(quarantine_key(repo), dump_doc(doc))


def update_doc(store: StateStore, repo: str, change: Callable[[dict], dict]) -> str:
    """Apply ``change`` to the current document and store the result atomically against every other
    update (it may be called again with a newer document when another writer got there first; whatever
    it raises stores nothing). Returns where the document is."""
    key = quarantine_key(repo)
    where = store.uri(key)
    return store.update(key, lambda text: dump_doc(change(parse_doc(text, where))))
