"""Checking a group: its required cells and, for each, the test configurations that cover it.

Sources are read through a ``Source`` (the working tree here, a git revision at the CLI edge), so
the same check runs on today's tree and on the tree of any earlier revision for ``--against``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from pipelines.core.catalog.scan import scan_bytes, source_text
from pipelines.core.coverage.matrix import (
    GROUP_MARKER,
    declared_groups,
    python_matrix,
    template_matrix,
    unreadable_group_comments,
)
from pipelines.core.coverage.model import (
    TEMPLATE_MATRIX,
    Catalogued,
    Cell,
    Configuration,
    Dimension,
    Group,
    GroupCoverage,
    Note,
    Row,
    Unlisted,
)
from pipelines.core.model import Problem
from pipelines.core.specs import RepoSpec

#: the GPUs of a template entry that neither the template nor the test file gives (repos.yaml's default)
DEFAULT_GPUS = RepoSpec.default_num_gpus


class Source(Protocol):
    """Repo-relative files at one revision."""

    def read(self, path: str) -> bytes | None:
        """The file's bytes, or None when it does not exist there (readers decode them: :func:`python_text`,
        :func:`template_text`)."""

    def files_mentioning(self, text: str, roots: Sequence[str]) -> list[str]:
        """Repo-relative ``.py`` files under ``roots`` whose text contains ``text``, sorted."""


class TreeSource:
    """The checkout as it is on disk."""

    def __init__(self, repo: Path):
        self.repo = Path(repo)

    def read(self, path: str) -> bytes | None:
        full = self.repo / path
        try:
            full.resolve().relative_to(self.repo.resolve())
            return full.read_bytes()
        except (OSError, ValueError):
            return None

    def files_mentioning(self, text: str, roots: Sequence[str]) -> list[str]:
        needle, out = text.encode(), []
        for root in roots:
            for folder, dirs, files in os.walk(self.repo / root):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
                for name in files:
                    full = Path(folder) / name
                    if name.endswith(".py") and needle in _bytes(full):
                        out.append(full.relative_to(self.repo).as_posix())
        return sorted(set(out))


def python_text(source: Source, path: str) -> tuple[str | None, Problem | None]:
    """A test file's text as Python reads it (a UTF-8 BOM or a ``# -*- coding: ... -*-`` line decides, as
    for the catalog, so a file CI runs is read and no value is misread); (None, None) when it does not
    exist, (None, the located problem) when Python could not read it either."""
    data = source.read(path)
    return (None, None) if data is None else source_text(path, data)


def template_text(source: Source, path: str) -> tuple[str | None, Problem | None]:
    """A workflow template's text, UTF-8 as the catalog reads it; (None, None) when it does not exist,
    (None, the located problem) when it is not UTF-8."""
    data = source.read(path)
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, Problem(path, data.count(b"\n", 0, exc.start) + 1, "template", (
            f"is not UTF-8 ({exc.reason} at byte {exc.start}); save it as UTF-8"))


def _bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def file_groups(source: Source, roots: Sequence[str], declared: Sequence[Group],
                adopt: bool = False) -> tuple[list[Group], list[Problem]]:
    """Groups declared by ``# coverage-group: NAME`` comments, and files naming a group that omits them.

    With ``adopt`` (an earlier revision, for ``--against``) such files join the declared group
    instead, so a test dropped from both the tree and assets/coverage.yaml is still seen as lost.
    """
    members: dict[str, list[tuple[str, int]]] = {}
    groups, problems = [], []
    listed = {t for g in declared for t in g.tests}  # a listed file's reading problem is its group's
    for path in source.files_mentioning(GROUP_MARKER, roots):
        text, bad = python_text(source, path)
        if text is None:
            problems += [bad] if bad and path not in listed else []
            continue
        for name, line in declared_groups(text):
            members.setdefault(name, []).append((path, line))
        problems += unreadable_group_comments(text, path)
    by_name = {g.name: g for g in declared}
    for name, files in sorted(members.items()):
        if name in by_name and adopt:
            extra = tuple(p for p, _ in files if p not in by_name[name].tests)
            by_name[name] = replace(by_name[name], tests=by_name[name].tests + extra)
            continue
        if name in by_name:
            problems += [Unlisted(path, line, "coverage-group", (
                f"{path} says it belongs to {name!r} but {by_name[name].origin} does not list it; add it to the group's tests"),
                group=name) for path, line in files if path not in by_name[name].tests]
            continue
        path, line = files[0]
        groups.append(Group(name, tuple(p for p, _ in files), (), f"{path}:{line}", inferred=True))
    return [by_name[g.name] for g in declared] + groups, problems


def read_configurations(group: Group, source: Source, template: str | Sequence[str] | None,
                        default_gpus: int = DEFAULT_GPUS, groups_file: str = "assets/coverage.yaml"
                        ) -> tuple[list[Configuration], list[Problem]]:
    """Every configuration of every test of the group; a missing test is a located problem.

    ``template``: the workflow template(s); a test's entries may be in any of them (framework S
    keeps a PR template and a nightly one). ``default_gpus``: the repo's ``default_num_gpus``."""
    configs: list[Configuration] = []
    problems: list[Problem] = []
    names = (template,) if isinstance(template, str) else tuple(template or ())
    texts: list[tuple[str, str]] = []
    for name in names if group.matrix == TEMPLATE_MATRIX else ():
        text, bad = template_text(source, name)
        texts += [(name, text)] if text is not None else []
        problems += [bad] if bad else []
    for test in group.tests:
        if group.matrix == TEMPLATE_MATRIX:
            if not texts:
                # a template that is there but not UTF-8 has said so above
                problems += [] if problems else [Problem(names[0] if names else ".github/workflows", 1, "template", (
                    f"group {group.name} reads a workflow template but none was found; set `template:` in assets/repos.yaml"))]
                break
            found, bad = [], []
            scan = scan_bytes(test, source.read(test) or b"", registry=False)
            for name, text in texts:
                here, wrong = template_matrix(text, name, test, scan=scan, default_gpus=default_gpus,
                                              others=[(n, t) for n, t in texts if n != name])
                found += here
                bad += [p for p in wrong if p.field != "test_file" and p not in bad]
            if not found and not bad:
                bad.append(Problem(texts[0][0], 1, "test_file", f"no entry runs {test} in "
                                   f"{', '.join(n for n, _ in texts)}; add one or drop it from the group"))
        else:
            text, unreadable = python_text(source, test)
            if text is None:
                problems.append(unreadable or Problem(test, 1, "test", (
                    f"listed in group {group.name} ({group.origin}) but does not exist; restore it or drop it from the group")))
                continue
            found, bad = python_matrix(text, test, group.matrix, group.fields, groups_file=_declared_in(group, groups_file))
        configs += found
        problems += bad
    return configs, problems


def running(group: Group, configs: Sequence[Configuration], catalog: Catalogued
            ) -> tuple[list[Configuration], list[tuple[str, str]], list[Problem]]:
    """The configurations of tests the catalog runs; each member that covers nothing is a located problem,
    unless only the night's selection left it out (``Registered.by_selection``).

    A file's matrix counts while any of its registrations runs (a rocm twin may be disabled while
    the cuda one runs every row); a template entry counts while its own test id runs."""
    kept: list[Configuration] = []
    idle: list[tuple[str, str]] = []
    problems: list[Problem] = []
    for test in dict.fromkeys(c.test for c in configs):
        rows = [c for c in configs if c.test == test]
        regs = catalog.files.get(test)
        if regs is None and not catalog.complete:
            kept += rows
            continue
        if rows[0].test_id:  # template entries: one test each
            by_id = {r.id: r for r in regs or ()}
            for c in rows:
                reg = by_id.get(c.test_id)
                why = reg.idle if reg else f"the catalog has no test {c.test_id} (see `nightly catalog`)"
                if why is None:
                    kept.append(c)
                elif not (reg and reg.by_selection):  # the night's pick is no fault of the tree
                    problems.append(Problem(c.path, c.line, c.name, f"covers nothing: {why}; its cells count "
                                                                    f"for group {group.name} once it runs"))
            continue
        if regs and any(r.idle is None for r in regs):
            kept += rows
            continue
        if regs:
            why = "; ".join(dict.fromkeys(r.idle or "" for r in regs))
            where = (regs[0].path, regs[0].line)
        else:
            why = "not registered (no register_*_ci call the catalog reads; `nightly catalog` says why)"
            where = (test, 1)
        idle.append((test, why))
        if any(r.by_selection for r in regs or ()):  # selected, it would count: the night's pick, not the tree
            continue
        problems.append(Problem(*where, "registration", f"covers nothing: {why}; its configurations count for "
                                                        f"group {group.name} once the test runs"))
    return kept, idle, problems


def infer_dimensions(configs: Sequence[Configuration]) -> tuple[Dimension, ...]:
    """For a group declared in comments: every field but ``name``, with the values the tests use."""
    order: dict[str, list[str]] = {}
    for c in configs:
        for field, value in c.fields:
            if field != "name" and value not in order.setdefault(field, []):
                order[field].append(value)
    return tuple(Dimension(f, (f,), tuple((v, (v,)) for v in vals)) for f, vals in order.items())


def required_cells(dims: Sequence[Dimension], strength: int, require: Sequence[tuple[str, ...]] = ()) -> tuple[Cell, ...]:
    """Each value combination of each required dimension tuple (every ``strength``-subset by default);
    none without dimensions (a group from comments none of whose rows could be read)."""
    if not dims:
        return ()
    by_name = {d.name: d for d in dims}
    tuples = list(require) or list(itertools.combinations([d.name for d in dims], min(strength, len(dims))))
    cells = []
    for names in tuples:
        for values in itertools.product(*(by_name[n].labels for n in names)):
            cells.append(Cell(tuple(names), tuple(values)))
    return tuple(dict.fromkeys(cells))


def _declared_in(group: Group, groups_file: str) -> str:
    """Where a fix to the group's declaration goes: its own ``path:line`` in the groups file it came from
    (``--groups FILE`` or assets/coverage.yaml); a group from comments is declared there anew."""
    return groups_file if group.inferred else group.origin


def label_rows(configs: Sequence[Configuration], dims: Sequence[Dimension],
               declared_in: str = "assets/coverage.yaml") -> tuple[list[Row], list[Problem]]:
    """Each configuration's value label per dimension; a value no dimension declares is a problem.
    ``declared_in``: where the dimensions are declared, named in the fix."""
    rows, problems = [], []
    for c in configs:
        labels = []
        for d in dims:
            raw = c.raw(d)
            label = d.label_of(raw) if raw is not None else None
            if raw is None:
                missing = [f for f in d.fields if c.field(f) is None]
                problems.append(Problem(c.path, c.line, c.name, f"has no field {', '.join(missing)} for dimension {d.name}; add it to the "
                                        f"configuration or fix the dimension's fields in {declared_in}"))
            elif label is None:
                problems.append(Problem(c.path, c.line, c.name, (
                    f"{d.name} {'+'.join(raw)} is not one of {', '.join(d.labels)}; add it to the dimension's values "
                    f"in {declared_in} or fix the configuration")))
            else:
                labels.append((d.name, label))
        rows.append(Row(c, tuple(labels)))
    return rows, problems


def check_group(group: Group, source: Source, template: str | Sequence[str] | None = None,
                default_gpus: int = DEFAULT_GPUS, catalog: Catalogued | None = None,
                groups_file: str = "assets/coverage.yaml") -> GroupCoverage:
    """What the group's tests cover at ``source``: cells, the rows covering each, and problems.

    ``catalog``: only configurations of tests it runs count (None: every configuration read).
    ``groups_file``: the file the groups came from (``--groups FILE``), which the fixes name."""
    configs, problems = read_configurations(group, source, template, default_gpus, groups_file)
    counted, idle = configs, []
    if catalog is not None:
        counted, idle, quiet = running(group, configs, catalog)
        problems += quiet
    # an idle test's values are still its group's (inferred dimensions) and still checked
    dims = infer_dimensions(configs) if group.inferred else group.dimensions
    rows, bad = label_rows(configs, dims, _declared_in(group, groups_file))
    keep = set(counted)
    rows = [r for r in rows if r.config in keep]
    cells = required_cells(dims, group.strength, group.require)
    # unread rows only add coverage when the dimensions are declared; a group declared by comments takes
    # its dimensions (values, hence cells) from the rows, so rows it cannot read may hide cells: a problem
    notes = () if group.inferred else tuple(p for p in problems if isinstance(p, Note))
    problems = [Problem(p.path, p.line, p.field, p.message.replace(
        "(they could only add coverage: not a failure)", "(this group, declared by comments, takes its values "
        f"from the rows, so they may add cells; declare its dimensions in {groups_file} to check without them)"))
        if group.inferred and isinstance(p, Note) else p for p in problems if group.inferred or not isinstance(p, Note)]
    return GroupCoverage(group, group.tests, dims, tuple(rows), cells, tuple(problems + bad), tuple(idle), notes)


def check_groups(declared: Sequence[Group], source: Source, roots: Sequence[str] = ("tests",),
                 template: str | Sequence[str] | None = None, adopt: bool = False,
                 default_gpus: int = DEFAULT_GPUS, catalog: Catalogued | None = None,
                 groups_file: str = "assets/coverage.yaml") -> tuple[tuple[GroupCoverage, ...], tuple[Problem, ...]]:
    """Every declared group and every group declared in test-file comments, plus stray members.
    ``groups_file``: the file ``declared`` came from, named in the fixes."""
    groups, problems = file_groups(source, roots, declared, adopt)
    reports = tuple(check_group(g, source, template, default_gpus, catalog, groups_file) for g in groups)
    return reports, tuple(problems)
