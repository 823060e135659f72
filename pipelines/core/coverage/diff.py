"""What a change lost: cells covered at an earlier revision that no configuration covers now.

A cell counts as lost only if nothing covers it now, so tests merged into one matrix, or a
configuration moved to a sibling, lose nothing. For each lost cell we name the configurations
that covered it then and what happened to their test (deleted, edited, or left the group).
"""

from __future__ import annotations

from collections.abc import Sequence

from pipelines.core.coverage.check import Source
from pipelines.core.coverage.model import GroupCoverage, LostCell

DELETED, EDITED, LEFT, UNCHANGED = "deleted", "edited", "left the group", "unchanged"


def describe_change(test: str, before: Source, after: Source, now: GroupCoverage | None) -> str:
    """How one test of a group differs between two revisions, in the words a reviewer uses."""
    text_after = after.read(test)
    if text_after is None:
        return DELETED
    if now is None or test not in now.tests:
        return LEFT
    idle = dict(now.idle)
    if test in idle:  # still there, but disabled or no longer registered: it covers nothing now
        return idle[test]
    return UNCHANGED if before.read(test) == text_after else EDITED


def lost_cells(then: Sequence[GroupCoverage], now: Sequence[GroupCoverage], before: Source,
               after: Source) -> tuple[LostCell, ...]:
    """Cells each group covered ``then`` that nothing in the same-named group covers ``now``."""
    now_by_name = {g.group.name: g for g in now}
    lost = []
    for old in then:
        current = now_by_name.get(old.group.name)
        rows_now = current.rows if current else ()
        for cell in old.cells:
            was = old.covered_by(cell)
            if not was or any(r.covers(cell) for r in rows_now):
                continue
            changes = {}
            for config in was:
                if config.test not in changes:
                    changes[config.test] = _change(config.test, config.path, before, after, current)
            lost.append(LostCell(old.group.name, cell, tuple((c, changes[c.test]) for c in was)))
    return tuple(lost)


def _change(test: str, path: str, before: Source, after: Source, current: GroupCoverage | None) -> str:
    change = describe_change(test, before, after, current)
    if change == UNCHANGED and path != test and before.read(path) != after.read(path):
        return f"{EDITED} ({path})"  # a template entry: the template changed, not the test file
    return change
