"""Where the quarantine document lives: one small class with ``get``/``put`` of text.

Locally ``<home>/quarantine/<repo>.json``; a deployment can swap in an object store with the same
two methods. The document itself is handled by pure functions in pipelines.core.flaky.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.core.calibrate.evidence import write_atomic
from pipelines.core.model import CatalogError, Problem


class QuarantineFile:
    """The quarantine document of one repo as a local file (written atomically)."""

    def __init__(self, home: Path | str, repo: str):
        self.path = Path(home) / "quarantine" / f"{repo}.json"

    def __repr__(self) -> str:
        return f"QuarantineFile({str(self.path)!r})"

    def get(self) -> str | None:
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def put(self, text: str) -> None:
        write_atomic(self.path, text)


def load_doc(store: QuarantineFile) -> dict:
    """The document, ``{}`` when there is none; a broken one is an error naming the file and the fix."""
    text = store.get()
    if text is None:
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CatalogError(Problem(str(store.path), getattr(exc, "lineno", 1), "quarantine",
                                   f"not valid JSON ({exc}); fix it by hand or restore it from a backup")) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("actions", []), list):
        raise CatalogError(Problem(str(store.path), 1, "quarantine",
                                   'expected {"version": 1, "actions": [...]}; fix it by hand or restore it'))
    for i, a in enumerate(doc.get("actions", [])):
        missing = [k for k in ("test", "action", "by", "why", "at") if not isinstance(a, dict) or k not in a]
        if missing:
            raise CatalogError(Problem(str(store.path), 1, f"actions[{i}]",
                                       f"missing {', '.join(missing)}; every action needs test, action, by, why, at"))
    return doc


def save_doc(store: QuarantineFile, doc: dict) -> None:
    store.put(json.dumps(doc, indent=1, sort_keys=True) + "\n")
