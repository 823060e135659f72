"""Records of configuration coverage: dimensions, groups of sibling tests, configurations, cells.

A *group* is a set of sibling test files whose configuration matrices must together cover every
*required cell*: one combination of values of some dimensions (a pair of dimensions by default).
Frozen dataclasses, no I/O, so reading, checking, diffing and designing are tested on their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from pipelines.core.model import Problem

#: the module-level variable a test's matrix lives in unless the group names another
DEFAULT_MATRIX = "_CONFIGS"
#: ``matrix: template`` reads the test's entries in the workflow template instead
TEMPLATE_MATRIX = "template"


def norm(value: object) -> str:
    """One spelling for a raw value wherever it comes from (YAML ``true``, Python ``True``, ``'1'``).

    Numbers compare by value: a float is Python's shortest spelling (``1e-05`` however either file
    writes it), a whole one as an integer (YAML ``2.0`` is the test's ``2``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    return str(value)


@dataclass(frozen=True)
class Note(Problem):
    """A located remark that does not fail the check: rows the checker cannot read that could only
    add coverage (a ``_CONFIGS.append`` inside an ``if``), so the cells are judged without them."""


@dataclass(frozen=True)
class Unlisted(Problem):
    """A test file whose ``# coverage-group:`` comment claims a declared group that does not list it:
    the group it claims is kept, so the night report can give it as a reason for that group's gaps."""

    group: str = ""


@dataclass(frozen=True)
class Dimension:
    """A named axis of the matrix, read from one field (or several, for a combined layout)."""

    name: str
    fields: tuple[str, ...]
    #: (label, raw values of ``fields``); empty while the values are still to be inferred
    values: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(label for label, _ in self.values)

    def label_of(self, raw: tuple[str, ...]) -> str | None:
        """The label whose raw values (normalized with ``norm``) these are, or None."""
        return next((label for label, want in self.values if want == raw), None)


@dataclass(frozen=True)
class Group:
    """Sibling tests whose matrices must together cover the required cells."""

    name: str
    tests: tuple[str, ...]
    dimensions: tuple[Dimension, ...]
    #: where the group is declared, ``path:line`` (assets/coverage.yaml or a test file's comment)
    origin: str
    matrix: str = DEFAULT_MATRIX
    #: names of tuple positions; None: from the ``# (a, b, ...)`` comment above the matrix
    fields: tuple[str, ...] | None = None
    strength: int = 2
    #: explicit dimension tuples to cover instead of every ``strength``-subset
    require: tuple[tuple[str, ...], ...] = ()
    #: declared by ``# coverage-group:`` comments: dimensions are every field but ``name``, values as seen
    inferred: bool = False


@dataclass(frozen=True)
class Configuration:
    """One row of a test's matrix, located where it is written."""

    test: str
    name: str
    path: str
    line: int
    fields: tuple[tuple[str, str], ...]
    #: the catalog's id of the test this row is (a template entry); "": the file's tests run every row
    test_id: str = ""

    def field(self, name: str) -> str | None:
        return next((v for k, v in self.fields if k == name), None)

    def raw(self, dim: Dimension) -> tuple[str, ...] | None:
        out = tuple(self.field(f) for f in dim.fields)
        return None if any(v is None for v in out) else out  # type: ignore[return-value]


@dataclass(frozen=True)
class Registered:
    """One test the catalog registered, as coverage needs it: where, and why it covers nothing, if it does not."""

    id: str
    path: str
    line: int
    #: ``disabled: <reason>``, or why tonight's selection left it out; None: its configurations count
    idle: str | None = None
    #: idle only because the night did not select it: no fault of the tree, so no coverage problem
    #: (the night report names such siblings itself)
    by_selection: bool = False


@dataclass(frozen=True)
class Catalogued:
    """The catalog's tests by file, so that only configurations of tests that run cover a cell.

    ``complete``: a file it does not hold registers no test (False for an earlier revision, where
    only files unchanged since are known: the others count as they read)."""

    files: Mapping[str, tuple[Registered, ...]]
    complete: bool = True


@dataclass(frozen=True)
class Cell:
    """One required combination: dimension names and one value label each."""

    dims: tuple[str, ...]
    values: tuple[str, ...]

    @property
    def label(self) -> str:
        return ", ".join(f"{d}={v}" for d, v in zip(self.dims, self.values, strict=True))

    def as_dict(self) -> dict[str, str]:
        return dict(zip(self.dims, self.values, strict=True))


@dataclass(frozen=True)
class Row:
    """A configuration and the value label it takes on each dimension of its group."""

    config: Configuration
    labels: tuple[tuple[str, str], ...]

    def covers(self, cell: Cell) -> bool:
        have = dict(self.labels)
        return all(have.get(d) == v for d, v in zip(cell.dims, cell.values, strict=True))


@dataclass(frozen=True)
class GroupCoverage:
    """What one group's tests cover: every required cell and the rows that cover it."""

    group: Group
    tests: tuple[str, ...]
    dimensions: tuple[Dimension, ...]
    rows: tuple[Row, ...]
    cells: tuple[Cell, ...]
    problems: tuple[Problem, ...] = ()
    #: (test, why) for each test whose configurations cover nothing: disabled, not registered, not run tonight
    idle: tuple[tuple[str, str], ...] = ()
    #: rows the checker could not read that could only add coverage: said, never a failure
    notes: tuple[Note, ...] = ()

    def covered_by(self, cell: Cell) -> tuple[Configuration, ...]:
        return self._by_values(cell.dims).get(cell.values, ())

    def _by_values(self, dims: tuple[str, ...]) -> dict[tuple[str, ...], tuple[Configuration, ...]]:
        """The rows by the values they take on ``dims``, built once per dimension tuple: scanning
        every row for every cell took minutes on a group of thousands of rows (bench/coverage.py)."""
        if dims not in self._index:
            by: dict[tuple[str, ...], list[Configuration]] = {}
            for labels, row in zip(self._labels, self.rows, strict=True):
                values = tuple(labels.get(d) for d in dims)
                if None not in values:
                    by.setdefault(values, []).append(row.config)  # type: ignore[arg-type]
            self._index[dims] = {values: tuple(configs) for values, configs in by.items()}
        return self._index[dims]

    @cached_property
    def _labels(self) -> tuple[dict[str, str], ...]:
        return tuple(dict(r.labels) for r in self.rows)

    @cached_property
    def _index(self) -> dict[tuple[str, ...], dict[tuple[str, ...], tuple[Configuration, ...]]]:
        return {}

    @cached_property
    def uncovered(self) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if not self.covered_by(c))

    @property
    def ok(self) -> bool:
        return not self.uncovered and not self.problems


@dataclass(frozen=True)
class UncoveredCell:
    """A cell no test of its group covers, as the night report lists it."""

    group: str
    cell: Cell
    tests: tuple[str, ...]
    #: the group's located problems, why its configurations may not cover the cell: a member that is
    #: missing, disabled or unreadable, a file claiming the group that it does not list (``nightly coverage``'s)
    why: tuple[Problem, ...] = ()


@dataclass(frozen=True)
class LostCell:
    """A cell covered at an earlier revision and no longer covered, with what covered it then."""

    group: str
    cell: Cell
    #: (configuration then, what happened to its test: deleted / edited / left the group)
    was: tuple[tuple[Configuration, str], ...]
