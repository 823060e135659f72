"""The quarantine document of a repo, kept in the deployment's state store.

Key ``quarantine/<repo>.json``: locally ``<home>/quarantine/<repo>.json``, on S3 next to the night
summaries. The document itself is handled by pure functions in pipelines.core.flaky.
"""

from __future__ import annotations

import json

from pipelines.core.model import CatalogError, Problem
from pipelines.storage.state import StateStore


def quarantine_key(repo: str) -> str:
    return f"quarantine/{repo}.json"


def load_doc(store: StateStore, repo: str) -> dict:
    """The document, ``{}`` when there is none; a broken one is an error naming the file and the fix."""
    key = quarantine_key(repo)
    text = store.get(key)
    if text is None:
        return {}
    where = store.uri(key)
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


def save_doc(store: StateStore, repo: str, doc: dict) -> str:
    """Store the document; returns where it is."""
    return store.put(quarantine_key(repo), json.dumps(doc, indent=1, sort_keys=True) + "\n")
