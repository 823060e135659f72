"""Digest successions: a test file that calibrate only re-estimated is still the same test.

History keys every sample by the sha256 of the whole test file, so that an edit to the test
makes its old durations stale. Calibrate's own edit (the literal ``est_time``, which does nothing
at run time) changes that digest too; without a record of it, writing the calibrated estimate
would throw away the very samples it was computed from. So every rewrite calibrate makes (into
the checkout or as a patch) is recorded as a succession ``before -> after``, and the staleness
checks accept samples of any predecessor of the current digest, following chains A -> B -> C.
A genuine edit has no succession and still makes every earlier sample stale.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: what the only kind of succession means; stored with each record so a reader of the store knows
CALIBRATE_REWRITE = "est_time rewritten by nightly calibrate"


@dataclass(frozen=True)
class Succession:
    """The file with digest ``after`` is the file with digest ``before`` with only est_time rewritten."""

    before: str
    after: str
    path: str
    why: str = CALIBRATE_REWRITE


def digest(text: str) -> str:
    """The sha256 the catalog gives a file, for its text as calibrate writes it (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def rewrite_successions(edits: Mapping[str, tuple[str, str]]) -> list[Succession]:
    """One succession per rewritten file of a patch (``path -> (old text, new text)``)."""
    return [Succession(digest(old), digest(new), path) for path, (old, new) in sorted(edits.items())
            if old != new]


@dataclass(frozen=True)
class Lineage:
    """Which digests count as the current revision of a test file: itself and its predecessors."""

    parents: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, successions: Iterable[Succession]) -> Lineage:
        parents: dict[str, set[str]] = {}
        for s in successions:
            if s.before != s.after:
                parents.setdefault(s.after, set()).add(s.before)
        return cls({after: frozenset(before) for after, before in parents.items()})

    def same_revision(self, sha256: str) -> frozenset[str]:
        """``sha256`` and every digest it descends from through calibrate rewrites (cycle-safe)."""
        seen = {sha256}
        todo = [sha256]
        while todo:
            for parent in self.parents.get(todo.pop(), ()):
                if parent not in seen:
                    seen.add(parent)
                    todo.append(parent)
        return frozenset(seen)
