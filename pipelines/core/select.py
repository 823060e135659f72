"""Which registered tests a run covers: cadence, labels, suites, backend (the framework's rules).

Nightly runs every label except ``long``/``ft-long`` (framework M's runner; a template's jobs
run on whatever cadence their workflow does, whatever their label); weekly and release run
everything; a per-commit (``pr``) run skips only ``nightly=True`` tests (a ``long`` test runs there when
its label is picked, as a PR's ``run-ci-long`` does). Disabled tests stay in the selection so
they can be reported as skipped; callers decide whether to launch them. Changed paths narrow a
run to what a change can break: a changed registered test file selects itself, documentation
(``docs/``, ``*.md``) selects nothing, and any other change (library code, configs) selects all.
A file is a test file only where the runner collects tests (the catalog's roots and globs): a
``test_*.py`` elsewhere is library code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipelines.core.catalog.scan import collected, hidden  # the catalog's own collection rules
from pipelines.core.model import Discovery, Test

CADENCES = ("pr", "nightly", "weekly", "release")
#: the registry family's ``test_*.py`` under ``tests``, for callers without a catalog's ``discovery`` (a catalog gives its roots)
DEFAULT_DISCOVERY = Discovery()
NIGHTLY_EXCLUDED_LABELS = frozenset({"long", "ft-long"})


@dataclass(frozen=True)
class Selection:
    """The selection flags shared by ``nightly catalog``, ``plan`` and ``run``."""

    cadence: str | None = None
    labels: tuple[str, ...] = ()
    suites: tuple[str, ...] = ()
    backend: str | None = None
    #: repo-relative paths a change touched; None = no change-based narrowing
    changed: tuple[str, ...] | None = None


class SelectionError(ValueError):
    """A selection flag names something that does not exist."""


def in_cadence(test: Test, cadence: str | None) -> bool:
    """Whether a cadence runs this test, ignoring label picks and disabled state."""
    if cadence is None:
        return True
    if cadence not in CADENCES:
        raise SelectionError(f"unknown cadence {cadence!r}; use one of {', '.join(CADENCES)}")
    if test.nightly_rule == "exclusive" and cadence in ("pr", "nightly"):  # SGLang family: nightly runs exactly nightly=True
        return test.nightly == (cadence == "nightly")
    if cadence == "pr":  # a per-commit run skips nightly-only tests; a `long` one runs when its label is picked
        return not test.nightly
    if cadence == "nightly":  # the long/ft-long exclusion is framework M's nightly's; a template job runs when its workflow does
        return test.fmt == "template" or not set(test.labels) & NIGHTLY_EXCLUDED_LABELS
    return True


def select(tests: Iterable[Test], selection: Selection, discovery: Discovery = DEFAULT_DISCOVERY) -> list[Test]:
    """Tests matching every given flag, in catalog order.

    An unknown suite is an error (a typo must not silently select nothing). ``discovery`` (the
    catalog's) says which changed paths are test files rather than library code.
    """
    tests = list(tests)
    if selection.suites:
        known = {t.suite for t in tests} | {s for t in tests for s in t.also_suites}
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
        if selection.suites and t.suite not in selection.suites and not set(t.also_suites) & set(selection.suites):
            continue
        if wanted_labels and not (wanted_labels & set(t.labels)):
            continue
        if not in_cadence(t, selection.cadence):
            continue
        out.append(t)
    if selection.changed is not None:
        out = select_changed(out, selection.changed, registered=(t.path for t in tests), discovery=discovery)
    return out


#: how the command line names each selection field (``why_nothing``'s default)
FLAG_NAMES = {"backend": "--backend", "suites": "--suite", "labels": "--labels", "cadence": "--cadence"}
#: how a Dagster run's config names them (the Launchpad's editor), for ``why_nothing``
RUN_CONFIG_NAMES = {"backend": "ops.test_runs.config.backend", "suites": "ops.test_runs.config.suites",
                    "labels": "ops.test_runs.config.labels", "cadence": "ops.test_runs.config.cadence"}


def why_nothing(tests: Iterable[Test], selection: Selection, names: dict[str, str] | None = None) -> str:
    """Which flag left the selection empty, and what exists instead (empty string when it is not empty).

    The flags are applied one at a time in the order a maintainer narrows a run (backend, suite,
    labels, cadence); the first that leaves no test is named, with the values the remaining
    tests have, so a typo'd ``--labels nosuch`` says which labels exist rather than planning 0 tests.
    ``names``: how the caller's user sets each field (default the CLI's flags; RUN_CONFIG_NAMES in the
    UI, where the fix is a run config field, not a flag).
    """
    names = names or FLAG_NAMES
    flag_way = all(n.startswith("--") for n in names.values())
    left = list(tests)
    if not left:
        return "the catalog has no tests; `nightly catalog` says why (roots, registrations, problems)"
    steps = (
        (names["backend"], selection.backend, lambda t: t.backend == selection.backend,
         lambda ts: sorted({t.backend for t in ts}), "backends"),
        (names["suites"], ",".join(selection.suites),
         lambda t: t.suite in selection.suites or bool(set(t.also_suites) & set(selection.suites)),
         lambda ts: sorted({t.suite for t in ts}), "suites"),
        (names["labels"], ",".join(selection.labels), lambda t: bool(set(selection.labels) & set(t.labels)),
         lambda ts: sorted({label for t in ts for label in t.labels}), "labels"),
        (names["cadence"], selection.cadence, lambda t: in_cadence(t, selection.cadence),
         lambda ts: [c for c in CADENCES if any(in_cadence(t, c) for t in ts)], "cadences that run some of them"),
    )
    for flag, value, keep, values_of, what in steps:
        if not value:
            continue
        kept = [t for t in left if keep(t)]
        if not kept:
            shown = ", ".join(values_of(left)) or "none"
            if flag_way:
                return (f"{flag} {value} selects none of the {len(left)} test(s) the other flags leave; {what} "
                        f"there: {shown} (pick one of them, or drop {flag})")
            return (f"run config field {flag} = {value!r} selects none of the {len(left)} test(s) the other fields "
                    f"leave; {what} there: {shown} (set {flag} to one of them, or clear it)")
        left = kept
    return ""


def repo_relative(paths: Iterable[str], root: str) -> tuple[str, ...]:
    """Changed paths as the catalog writes them: an absolute path inside ``root`` becomes relative to it.

    ``root`` is the repo's absolute path (resolved by the caller). A path outside it, absolute or
    relative with ``..`` climbing above the root, cannot name anything the repo's tests depend on:
    SelectionError lists those paths, never ignores them (nor lets them select everything).
    """
    base = normalize_path(root)
    out: list[str] = []
    outside: list[str] = []
    for raw in paths:
        p = normalize_path(raw)
        if raw.replace("\\", "/").startswith("/"):
            p = p[len(base) + 1:] if p.startswith(base + "/") else ("" if p == base else "..")
        if climbs_out(p):
            outside.append(raw)
        else:
            out.append(p)
    if outside:
        raise SelectionError(_outside_message(outside, "/" + base))
    return tuple(out)


def _outside_message(paths: Iterable[str], root: str = "") -> str:
    return (f"--changed: {', '.join(paths)}: outside the repo{' ' + root if root else ''}; give paths inside it "
            "(absolute, or relative to the repo's root)")


def normalize_path(path: str) -> str:
    """``./tests//a.py``, ``tests\\a.py`` and ``tests/x/../a.py`` -> ``tests/a.py`` (the catalog's form).

    Purely textual (no filesystem access): a path that climbs above where it starts keeps its
    leading ``..`` segments, so ``climbs_out`` can refuse it instead of it naming library code.
    """
    parts: list[str] = []
    for part in path.replace("\\", "/").split("/"):
        if part in ("", "."):
            continue
        if part == ".." and parts and parts[-1] != "..":
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)


def climbs_out(path: str) -> bool:
    """Whether a relative path leaves the folder it is relative to (``../x``, ``a/../../x``)."""
    p = normalize_path(path)
    return p == ".." or p.startswith("../")


def is_doc_path(path: str) -> bool:
    """Documentation cannot break a test: ``docs/...`` and any ``*.md``."""
    p = normalize_path(path)
    return p.startswith("docs/") or p == "docs" or p.lower().endswith(".md")


def is_test_file(path: str, discovery: Discovery = DEFAULT_DISCOVERY) -> bool:
    """Whether the runner would collect ``path`` as a test (changing one can only break itself): under one
    of its roots, named like its globs, not excluded, not in a hidden folder. Anything else is library code,
    even ``python/sglang/test/test_utils.py``, which every test imports."""
    p = normalize_path(path)
    folder, _, name = p.rpartition("/")
    if not collected(name, discovery.globs, discovery.exclude):
        return False
    if any(hidden(part) for part in folder.split("/") if part):
        return False
    roots = [normalize_path(r) for r in discovery.roots]
    return any(r in ("", ".") or p.startswith(r + "/") for r in roots)


def select_changed(tests: Iterable[Test], changed: Iterable[str], registered: Iterable[str] | None = None,
                   discovery: Discovery = DEFAULT_DISCOVERY) -> list[Test]:
    """The tests a change can break, in input order.

    A changed registered test file selects its own tests; docs and ``*.md`` select nothing, and so
    does a test file nothing lists (one the runner would collect, see :func:`is_test_file`: a template
    job or registration must list it to run); any other path (library code, configs, a helper next to
    the tests, a ``test_*.py`` outside the runner's roots) selects every test.
    ``registered`` is every registered test file (default: those of ``tests``), so a changed test
    that other flags filtered out still counts as a test file rather than as library code.
    ``discovery`` is where the runner collects tests (``Catalog.discovery``).
    """
    tests, changed = list(tests), list(changed)
    known = {normalize_path(p) for p in (registered if registered is not None else (t.path for t in tests))}
    hit: set[str] = set()
    outside = [raw for raw in changed if climbs_out(raw)]
    if outside:  # a caller that skipped repo_relative: an outside path must not read as library code
        raise SelectionError(_outside_message(outside))
    for raw in changed:
        p = normalize_path(raw)
        if not p or is_doc_path(p):
            continue
        if p not in known:
            if is_test_file(p, discovery):  # a test no registration or template job lists: its change breaks nothing that runs
                continue
            return tests
        hit.add(p)
    return [t for t in tests if normalize_path(t.path) in hit]


def split_csv(values: Sequence[str] | None) -> tuple[str, ...]:
    """Accept ``--labels a,b --labels c`` alike."""
    out: list[str] = []
    for v in values or ():
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return tuple(out)
