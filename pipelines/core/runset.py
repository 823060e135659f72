"""What one run of ``test_runs`` does with the partition keys it was given.

Every way in (the CLI, a schedule, a sensor, a UI pick, a backfill) hands the one asset a set of
partition keys, and optionally a selection: a cadence, labels, suites, pools or explicit test
ids. Schedules, sensors and the CLI pass the whole key range plus a selection, so any selection
is ONE run; a UI pick passes exactly the keys picked and no selection. This module decides,
for each key, whether it runs or why not, with no Dagster import.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipelines.core.catalog.ids import path_problem
from pipelines.core.model import Catalog, Problem, Test
from pipelines.core.plan.cluster import PoolShape, hardware_of, pool_for
from pipelines.core.plan.planner import too_wide, unplanned_reason
from pipelines.core.select import Selection, SelectionError, is_test_file, normalize_path, select


@dataclass(frozen=True)
class RunSelection:
    """A run's selection; all empty = run exactly the keys given (a UI pick or a backfill)."""

    cadence: str = ""
    labels: tuple[str, ...] = ()
    suites: tuple[str, ...] = ()
    #: only tests whose hardware runs on these pools (an infra change of one pool)
    pools: tuple[str, ...] = ()
    #: only these test ids (a sensor's changed files)
    tests: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.cadence or self.labels or self.suites or self.pools or self.tests)

    def describe(self) -> str:
        if self.empty:
            return "the picked partitions"
        parts = [f"cadence {self.cadence}" if self.cadence else "",
                 f"labels {','.join(self.labels)}" if self.labels else "",
                 f"suites {','.join(self.suites)}" if self.suites else "",
                 f"pools {','.join(self.pools)}" if self.pools else "",
                 f"{len(self.tests)} named test(s)" if self.tests else ""]
        return ", ".join(p for p in parts if p)


@dataclass(frozen=True)
class RunSet:
    """The run's tests: to launch, not launched with the reason, and keys it does not cover."""

    run: tuple[Test, ...]
    #: (test, reason) for tests of the run that are never launched: disabled, or no pool
    skipped: tuple[tuple[Test, str], ...]
    #: keys given that no registered test has (a stale partition after the catalog changed)
    unknown: tuple[str, ...] = ()

    @property
    def disabled(self) -> list[Test]:
        return [t for t, why in self.skipped if why.startswith("disabled")]

    @property
    def not_here(self) -> list[Test]:
        return [t for t, why in self.skipped if why.startswith("not run here")]

    @property
    def held(self) -> list[Test]:
        """Quarantined tests held back (the repo's ``flaky: run_quarantined`` is off)."""
        return [t for t, why in self.skipped if why.startswith("quarantined")]

    @property
    def unplanned(self) -> list[Test]:
        return [t for t, why in self.skipped if why.startswith("no pool")]


def resolve_run(keys: Iterable[str] | None, tests: Sequence[Test], selection: RunSelection,
                pools: Sequence[PoolShape], skip_hardware: Iterable[str] = ()) -> RunSet:
    """Tests to run for ``keys`` (None = every registered test) narrowed by ``selection``.

    Raises SelectionError for a selection naming something that does not exist (an unknown
    suite, pool or test id): a typo must never silently run nothing. Tests on ``skip_hardware``
    (hardware the deployment knowingly never runs) are skipped as "not run here", not unplanned.
    """
    skip_hw = set(skip_hardware)
    by_id = {t.id: t for t in tests}
    wanted = list(by_id) if keys is None else list(dict.fromkeys(keys))
    unknown = tuple(k for k in wanted if k not in by_id)
    chosen = [by_id[k] for k in wanted if k in by_id]
    if selection.tests:
        missing = [t for t in selection.tests if t not in by_id]
        if missing:
            raise SelectionError(f"unknown test id(s) {', '.join(missing)}; `nightly catalog` lists them")
        named = set(selection.tests)
        chosen = [t for t in chosen if t.id in named]
    if selection.pools:
        known = {p.name for p in pools}
        bad = [p for p in selection.pools if p not in known]
        if bad:
            raise SelectionError(f"unknown pool(s) {', '.join(bad)}; this deployment has {', '.join(sorted(known))}")
        chosen = [t for t in chosen if (p := pool_for(t, pools)) is not None and p.name in selection.pools]
    if selection.cadence or selection.labels or selection.suites:
        chosen = select(chosen, Selection(cadence=selection.cadence or None, labels=selection.labels,
                                          suites=selection.suites))
    run: list[Test] = []
    skipped: list[tuple[Test, str]] = []
    for t in chosen:
        if not t.enabled:
            skipped.append((t, f"disabled: {t.disabled}"))
        elif hardware_of(t) in skip_hw:
            skipped.append((t, f"not run here: this deployment skips hardware {hardware_of(t)!r} (skip_hardware)"))
        elif pool_for(t, pools) is None or too_wide(t, pools):  # the plan leaves it unplanned, and says why
            skipped.append((t, unplanned_reason(t, pools)))
        else:
            run.append(t)
    return RunSet(tuple(run), tuple(skipped), unknown)


__all__ = ["RunSelection", "RunSet", "SelectionError", "resolve_run"]


def unloadable_files(catalog: Catalog) -> dict[str, tuple[Problem, ...]]:
    """Test files whose registration does not load, keyed by the file's path, with their located problems.

    Such a file has no test id, so without this it would have no partition and its red check would
    vanish from the UI with it: its path (the key a single-entry file's test has) keeps a partition,
    and a run covering it reports it failed with the problems. Only files the runner collects and
    of which no registration loaded are listed: a file with a test that loads keeps its tests' keys (a
    multi-entry file's ``path::variant`` ones too; its other problems, e.g. of ``prepare()``, are
    problems of those tests, not of a file that does not load), and a name that cannot be a partition
    key (``..``, a comma: the catalog's own path problem says to rename it) is no key either.
    """
    loaded = {normalize_path(t.path) for t in catalog.tests}
    out: dict[str, list[Problem]] = {}
    for p in catalog.problems:
        path = normalize_path(p.path)
        if path and path not in loaded and path_problem(path) is None and is_test_file(path, catalog.discovery):
            out.setdefault(path, []).append(p)
    return {k: tuple(v) for k, v in out.items()}
