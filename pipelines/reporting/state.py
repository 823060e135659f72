"""The quarantine document of a repo, kept in the deployment's state store.

Key ``quarantine/<repo>.json``: locally ``<home>/quarantine/<repo>.json``, on S3 next to the night
summaries. The document itself is handled by pure functions in pipelines.core.flaky.
Changes go through ``update_doc``: the store's atomic read-modify-write (a file lock locally, a
conditional write on S3), so concurrent ``nightly quarantine add|release`` never lose an action.

A checkout nobody configured kept its document under its folder name alone before it went by
``specs.unconfigured_name``: while its own key does not exist, that document is read when it is
unmistakably the checkout's (:func:`legacy_doc`), and the first change stores it, changed, under
the new key (the old file is left as it was).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pipelines.core.flaky import doc_problems
from pipelines.core.jsonlines import key_lines
from pipelines.core.model import CatalogError, Problem
from pipelines.core.specs import unconfigured_name
from pipelines.storage.state import StateStore, Undecodable


def quarantine_key(repo: str) -> str:
    return f"quarantine/{repo}.json"


def load_doc(store: StateStore, repo: str, legacy: Path | None = None) -> dict:
    """The document, ``{}`` when there is none; a broken one is an error naming the file, line and
    field, and the fix: every command that reads it refuses it (nothing is written over it).
    ``legacy``: the path of an unconfigured checkout, whose document may still be under its folder name."""
    key = quarantine_key(repo)
    text = store.get(key)
    if text is None and legacy is not None and (old := legacy_doc(store, legacy)) is not None:
        key, text = old
    return parse_doc(text, store.uri(key))


def legacy_doc(store: StateStore, checkout: Path) -> tuple[str, str] | None:
    """(key, text) of the document an unconfigured checkout kept under its folder name alone, when it is
    unmistakably its own: every readable night recorded under that name ran in this checkout (at least
    one did). Another checkout's folder called the same would have shared it: then it is nobody's, as it
    is when only its document says which tests it held (the caller passes no ``checkout`` for a folder
    called like a configured repo: that document is the repo's)."""
    from pipelines.reporting.inputs import night_keys, night_of, read_summary  # nights: only here

    key = quarantine_key(checkout.name)
    text = store.get(key)
    if text is None:
        return None
    name, ran = unconfigured_name(checkout), False
    for night in night_keys(store):
        try:
            summary = read_summary(store, night)
        except CatalogError:
            continue
        if summary.get("repo") != checkout.name:
            continue
        if not night_of(summary, name):  # recorded under that name in another checkout
            return None
        ran = True
    return (key, text) if ran else None


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


def update_doc(store: StateStore, repo: str, change: Callable[[dict], dict], legacy: Path | None = None) -> str:
    """Apply ``change`` to the current document and store the result atomically against every other
    update (it may be called again with a newer document when another writer got there first; whatever
    it raises stores nothing). Returns where the document is. ``legacy`` as for :func:`load_doc`: while
    the repo's own key does not exist, the change starts from the checkout's document of before."""
    key = quarantine_key(repo)
    where = store.uri(key)
    old = legacy_doc(store, legacy) if legacy is not None and store.get(key) is None else None

    def changed(text: str | None) -> str:
        if isinstance(text, Undecodable):
            raise text.error  # refused, never rewritten with U+FFFD where the maintainer's bytes were
        doc = parse_doc(text, where) if text is not None or old is None else parse_doc(old[1], store.uri(old[0]))
        return dump_doc(change(doc))

    return store.update(key, changed)
