"""What a change lost: cells covered at an earlier revision that no configuration covers now.

A cell counts as lost only if nothing covers it now, so tests merged into one matrix, or a
configuration moved to a sibling, lose nothing. A group with no namesake now is matched to the
groups now holding any of its tests (a group renamed in its comments and coverage.yaml): its cells
are lost only if none of their configurations takes the cell's values. For each lost cell we name
the configurations that covered it then and what happened to their test (deleted, renamed, edited,
or left the group). ``moved`` maps a test file renamed since from its name then to its name now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipelines.core.coverage.check import Source
from pipelines.core.coverage.model import Cell, GroupCoverage, LostCell, Row

DELETED, EDITED, LEFT, UNCHANGED = "deleted", "edited", "left the group", "unchanged"


def describe_change(test: str, before: Source, after: Source, now: GroupCoverage | None,
                    new_name: str | None = None) -> str:
    """How one test of a group differs between two revisions, in the words a reviewer uses.

    ``new_name``: the test's file now, when it was renamed since (``test`` is its name then)."""
    new_name = new_name or test
    text_after = after.read(new_name)
    if text_after is None:
        return DELETED
    if now is None or new_name not in now.tests:
        return LEFT
    idle = dict(now.idle)
    if new_name in idle:  # still there, but disabled or no longer registered: it covers nothing now
        return idle[new_name]
    return UNCHANGED if before.read(test) == text_after else EDITED


def renamed(then: Sequence[GroupCoverage], now: Sequence[GroupCoverage],
            moved: Mapping[str, str] | None = None) -> dict[str, tuple[str, ...]]:
    """Each group of ``then`` with no namesake ``now`` -> the groups now holding any of its tests
    (a test file renamed since, under its name now).

    A group renamed in its tests' comments (and coverage.yaml) is read at the earlier revision
    under its old name, so without this every one of its cells would read as lost."""
    names = {g.group.name for g in now}
    moved = moved or {}
    out = {}
    for old in then:
        if old.group.name not in names:
            tests = {moved.get(t, t) for t in old.tests}
            heirs = tuple(g.group.name for g in now if set(g.tests) & tests)
            if heirs:
                out[old.group.name] = heirs
    return out


def lost_cells(then: Sequence[GroupCoverage], now: Sequence[GroupCoverage], before: Source,
               after: Source, moved: Mapping[str, str] | None = None) -> tuple[LostCell, ...]:
    """Cells each group covered ``then`` that nothing in the same-named group covers ``now`` (or,
    for a group renamed since, nothing in the groups now holding its tests: see ``renamed``)."""
    now_by_name = {g.group.name: g for g in now}
    moved = moved or {}
    heirs = renamed(then, now, moved)
    lost = []
    for old in then:
        matched = [now_by_name[n] for n in heirs.get(old.group.name, (old.group.name,)) if n in now_by_name]
        current = matched[0] if matched else None
        taken = _taken(old, [r for g in matched for r in g.rows])
        for cell in old.cells:
            was = old.covered_by(cell)
            if not was or _raw(old, cell) in taken.get(cell.dims, ()):
                continue
            changes = {}
            for config in was:
                if config.test not in changes:
                    changes[config.test] = _change(config.test, config.path, before, after, current, moved)
            lost.append(LostCell(old.group.name, cell, tuple((c, changes[c.test]) for c in was)))
    return tuple(lost)


def _taken(old: GroupCoverage, rows: Sequence[Row]) -> dict[tuple[str, ...], set[tuple]]:
    """For each dimension tuple of the old group's cells, the field values today's rows take on it:
    compared by the fields each dimension reads, so a group renamed with other dimension names
    still matches; one pass over the rows per tuple, not one per cell."""
    dims = {d.name: d for d in old.dimensions}
    out: dict[tuple[str, ...], set[tuple]] = {}
    for names in dict.fromkeys(c.dims for c in old.cells):
        out[names] = {tuple(r.config.raw(dims[n]) for n in names) for r in rows}
    return out


def _raw(old: GroupCoverage, cell: Cell) -> tuple:
    """The field values of the cell's labels, as the old group's dimensions read them."""
    dims = {d.name: d for d in old.dimensions}
    return tuple(next((raw for label, raw in dims[n].values if label == v), None)
                 for n, v in zip(cell.dims, cell.values, strict=True))


def _change(test: str, path: str, before: Source, after: Source, current: GroupCoverage | None,
            moved: Mapping[str, str]) -> str:
    new_name = moved.get(test, test)
    change = describe_change(test, before, after, current, new_name)
    if change == UNCHANGED and path != test and before.read(path) != after.read(path):
        change = f"{EDITED} ({path})"  # a template entry: the template changed, not the test file
    if new_name == test:
        return change
    # `deleted` would send a reviewer looking for a file that is still there under another name
    return f"renamed ({test} -> {new_name})" + ("" if change == UNCHANGED else f", {change}")
