"""Which registered tests a run covers: cadence, labels, suites, backend (the framework's rules).

Nightly runs every label except ``long``/``ft-long``; weekly and release run everything; a
per-commit (``pr``) run skips ``nightly=True`` tests. Disabled tests stay in the selection so
they can be reported as skipped; callers decide whether to launch them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipelines.core.model import Test

CADENCES = ("pr", "nightly", "weekly", "release")
NIGHTLY_EXCLUDED_LABELS = frozenset({"long", "ft-long"})


@dataclass(frozen=True)
class Selection:
    """The selection flags shared by ``nightly catalog``, ``plan`` and ``run``."""

    cadence: str | None = None
    labels: tuple[str, ...] = ()
    suites: tuple[str, ...] = ()
    backend: str | None = None


class SelectionError(ValueError):
    """A selection flag names something that does not exist."""


def in_cadence(test: Test, cadence: str | None) -> bool:
    """Whether a cadence runs this test, ignoring label picks and disabled state."""
    if cadence is None:
        return True
    if cadence not in CADENCES:
        raise SelectionError(f"unknown cadence {cadence!r}; use one of {', '.join(CADENCES)}")
    if cadence == "pr":
        return not test.nightly and not (set(test.labels) & NIGHTLY_EXCLUDED_LABELS)
    if cadence == "nightly":
        return not (set(test.labels) & NIGHTLY_EXCLUDED_LABELS)
    return True


def select(tests: Iterable[Test], selection: Selection) -> list[Test]:
    """Tests matching every given flag, in catalog order.

    An unknown suite is an error (a typo must not silently select nothing).
    """
    tests = list(tests)
    if selection.suites:
        known = {t.suite for t in tests}
        unknown = [s for s in selection.suites if s not in known]
        if unknown:
            raise SelectionError(
                f"unknown suite(s) {', '.join(unknown)}; registered suites: {', '.join(sorted(known)) or 'none'}"
            )
    wanted_labels = set(selection.labels)
    out = []
    for t in tests:
        if selection.backend and t.backend != selection.backend:
            continue
        if selection.suites and t.suite not in selection.suites:
            continue
        if wanted_labels and not (wanted_labels & set(t.labels)):
            continue
        if not in_cadence(t, selection.cadence):
            continue
        out.append(t)
    return out


def split_csv(values: Sequence[str] | None) -> tuple[str, ...]:
    """Accept ``--labels a,b --labels c`` alike."""
    out: list[str] = []
    for v in values or ():
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return tuple(out)
