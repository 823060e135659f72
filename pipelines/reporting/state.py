"""The quarantine document of a repo, kept in the deployment's state store.

Key ``quarantine/<repo>.json``: locally ``<home>/quarantine/<repo>.json``, on S3 next to the night
summaries. The document itself is handled by pure functions in pipelines.core.flaky.
Changes go through ``update_doc``: the store's atomic read-modify-write (a file lock locally, a
conditional write on S3), so concurrent ``nightly quarantine add|release`` never lose an action.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pipelines.core.model import CatalogError, Problem
from pipelines.storage.state import StateStore


def quarantine_key(repo: str) -> str:
    return f"quarantine/{repo}.json"


def load_doc(store: StateStore, repo: str) -> dict:
    """The document, ``{}`` when there is none; a broken one is an error naming the file and the fix."""
    key = quarantine_key(repo)
    return parse_doc(store.get(key), store.uri(key))


def parse_doc(text: str | None, where: str) -> dict:
    """The document in ``text`` (``{}`` for None), checked; ``where`` locates its problems."""
    if text is None:
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CatalogError(Problem(where, getattr(exc, "lineno", 1), "quarantine",
                                   f"not valid JSON ({exc}); fix it by hand or restore it from a backup")) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("actions", []), list):
        raise CatalogError(Problem(where, 1, "quarantine",
                                   'expected {"version": 1, "actions": [...]}; fix it by hand or restore it'))
    for i, a in enumerate(doc.get("actions", [])):
        missing = [k for k in ("test", "action", "by", "why", "at") if not isinstance(a, dict) or k not in a]
        if missing:
            raise CatalogError(Problem(where, 1, f"actions[{i}]",
                                       f"missing {', '.join(missing)}; every action needs test, action, by, why, at"))
    return doc


def dump_doc(doc: dict) -> str:
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
