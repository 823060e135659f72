"""Coverage of configuration matrices: do sibling tests together still cover every required cell?

``check_repo`` reads each group's matrices and proves every cell covered (or lists the ones
that are not); ``lost_cells`` compares two revisions; ``design`` searches for the fewest
configurations that cover all cells. ``uncovered_cells`` and ``configurations_by_test`` are what
the night report and the catalog listing call.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from pipelines.core.catalog.assemble import registry_tests, template_path
from pipelines.core.catalog.dialect import Dialect, M
from pipelines.core.catalog.scan import scan_bytes
from pipelines.core.catalog.template import parse_template
from pipelines.core.coverage.check import (
    DEFAULT_GPUS,
    Source,
    TreeSource,
    check_groups,
    python_text,
    required_cells,
    template_text,
)
from pipelines.core.coverage.deal import assign
from pipelines.core.coverage.design import Design, design
from pipelines.core.coverage.diff import lost_cells, renamed
from pipelines.core.coverage.groups import FILE_NAME, load_groups, parse_groups
from pipelines.core.coverage.matrix import GROUP_MARKER, python_matrix
from pipelines.core.coverage.model import (
    DEFAULT_MATRIX,
    Catalogued,
    Cell,
    Configuration,
    Dimension,
    Group,
    GroupCoverage,
    LostCell,
    Registered,
    UncoveredCell,
    Unlisted,
)
from pipelines.core.coverage.outcomes import config_outcomes
from pipelines.core.model import Problem, Test

__all__ = [
    "as_of", "Catalogued", "catalogued", "Cell", "Configuration", "config_outcomes", "CoverageReport", "Design", "Dimension", "Group", "GroupCoverage", "LostCell",
    "Registered", "RegistryReading", "RepoGroups", "Source", "TreeSource", "UncoveredCell", "assign", "check_repo", "declared_then", "design", "locate",
    "lost_cells", "night_coverage", "parse_groups", "renamed", "required_cells", "configurations_by_test", "uncovered_cells",
]


@dataclass(frozen=True)
class RepoGroups:
    """A checkout, its name in repos.yaml (or its folder name), and the groups declared for it."""

    repo: Path
    name: str
    groups: tuple[Group, ...]
    groups_file: Path
    roots: tuple[str, ...] = ("tests",)
    #: the workflow templates holding test matrices (framework S may split them over several)
    templates: tuple[str, ...] = ()
    #: GPUs of a template entry that neither the entry nor its test file's NUM_GPUS gives (repos.yaml)
    default_gpus: int = DEFAULT_GPUS
    #: False: no repo of repos.yaml is this checkout, so ``name`` is its folder name
    configured: bool = True


@dataclass(frozen=True)
class CoverageReport:
    groups: tuple[GroupCoverage, ...]
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems and all(g.ok for g in self.groups)


def locate(repo: str | Path | None, specs_dir: Path | str | None = None, groups_file: Path | None = None) -> RepoGroups:
    """Resolve ``--repo`` as every command does and load its groups from ``coverage.yaml``.

    A checkout nobody configured is looked up under its folder name; its test roots are the ones
    ``nightly catalog`` detects, so ``# coverage-group:`` comments are found where its tests are.
    """
    from pipelines.core.catalog import configured_roots, find_templates
    from pipelines.core.catalog.detect import choose
    from pipelines.core.specs import load_specs

    specs = load_specs(specs_dir)
    path, spec = specs.locate_repo(repo)
    name = spec.name if spec else path.name
    groups_file = Path(groups_file) if groups_file else specs.root / FILE_NAME
    roots = configured_roots(path, spec)
    if roots is None:  # the roots the catalog detects (framework S keeps its tests under test/registered)
        _, roots, _ = choose(path, spec.dialect if spec else "")
    templates = (spec.template,) if spec and spec.template else tuple(find_templates(path))
    default_gpus = spec.default_num_gpus if spec else DEFAULT_GPUS
    return RepoGroups(path, name, load_groups(groups_file, name, set(specs.repos)), groups_file, roots, templates,
                      default_gpus, spec is not None)


def catalogued(tests: Iterable[Test], ran: Collection[str] | None = None,
               why_not: Mapping[str, str] | None = None, cadence: str | None = None) -> Catalogued:
    """The catalog's tests as coverage counts them: a disabled test covers nothing, nor (given
    ``ran``, the ids a night ran or planned) one the night left out, for ``why_not[id]`` if given
    (``Registered.by_selection``: no coverage problem), nor (given ``cadence``) one that cadence never
    runs (framework M's nightly leaves out ``long``)."""
    from pipelines.core.select import in_cadence

    files: dict[str, list[Registered]] = {}
    for t in tests:
        idle = f"disabled: {t.disabled}" if t.disabled is not None else None
        if idle is None and cadence is not None and not in_cadence(t, cadence):
            idle = f"the {cadence} cadence does not run it"
        by_selection = idle is None and ran is not None and t.id not in ran
        if by_selection:
            idle = (why_not or {}).get(t.id) or "not in tonight's selection"
        files.setdefault(t.path, []).append(Registered(t.id, t.path, t.line, idle, by_selection))
    return Catalogued({path: tuple(regs) for path, regs in files.items()})


@dataclass(frozen=True)
class RegistryReading:
    """How ``nightly catalog`` reads a registry checkout's registrations: the dialect and implicit CPU
    folders ``load_catalog`` chose."""

    dialect: Dialect = M
    implicit_cpu_dirs: tuple[str, ...] = ()


def declared_then(where: RepoGroups, moved: Mapping[str, str]) -> RepoGroups:
    """Today's groups as they read at an earlier revision: a member renamed since (``moved``: name
    then -> name now) listed under its name then, so its file is read there and its cells are not
    silently dropped from the comparison."""
    back = {new: old for old, new in moved.items()}
    if not back:
        return where
    groups = tuple(replace(g, tests=tuple(back.get(t, t) for t in g.tests)) for g in where.groups)
    return replace(where, groups=groups)


def as_of(now: Catalogued, where: RepoGroups, then: Source, changed: Container[str], template: bool,
          registry: Callable[[], RegistryReading], cadence: str | None = None) -> Catalogued:
    """What the catalog registered at an earlier revision ``then``, for the files its groups name there.

    ``now`` is read from today's tree; ``changed``: the repo-relative files that differ since;
    ``template``: the catalog reads a workflow template; ``registry``: how it reads a registry file,
    asked only when a group member changed (choosing the dialect reads the whole tree). A file
    unchanged since registered then what it registers now. A changed one is read again from its text
    at ``then`` with the catalog's own scanner, so a test disabled then and still disabled (a comment
    added since) lost nothing. In a template repo the templates decide: unchanged, today's ids hold;
    changed, a file the templates listed then counts as it reads (a template never disables an
    entry) and one they did not list registered nothing. ``cadence``: as ``catalogued`` takes it."""
    members = {t for g in where.groups for t in g.tests} | set(then.files_mentioning(GROUP_MARKER, where.roots))
    files: dict[str, tuple[Registered, ...]] = {}
    if template:
        if not any(t in changed for t in where.templates):
            return Catalogued({p: now.files.get(p, ()) for p in members}, complete=False)
        listed = {template_path(e) for t in where.templates if (text := template_text(then, t)[0]) is not None
                  for e in parse_template(text, t).entries}
        return Catalogued({p: () for p in members if p not in listed}, complete=False)
    reading: RegistryReading | None = None
    for path in sorted(members):
        if path in changed:
            reading = reading or registry()
            files[path] = registered_then(path, then, reading, cadence)
        else:
            files[path] = now.files.get(path, ())
    return Catalogued(files, complete=False)


def registered_then(path: str, then: Source, reading: RegistryReading,
                    cadence: str | None = None) -> tuple[Registered, ...]:
    """The tests a registry file registered at ``then``, read from its text there as the catalog reads it."""
    data = then.read(path)
    if data is None:
        return ()
    scan = scan_bytes(path, data, registry=True, dialect=reading.dialect)  # its bytes, decoded as the catalog does
    tests, _ = registry_tests([scan], reading.implicit_cpu_dirs, reading.dialect)
    return catalogued((t for t in tests if t.path == path), cadence=cadence).files.get(path, ())


def check_repo(where: RepoGroups, source: Source | None = None, adopt: bool = False,
               catalog: Catalogued | None = None) -> CoverageReport:
    """Every group of the repo checked at ``source`` (the working tree by default).

    ``adopt``: test files whose ``# coverage-group:`` comment names a declared group join it (for
    an earlier revision) instead of being reported as missing from assets/coverage.yaml.
    ``catalog``: only configurations of the tests it runs count (``catalogued``); None: all do.
    """
    reports, problems = check_groups(where.groups, source or TreeSource(where.repo), where.roots, where.templates, adopt,
                                     where.default_gpus, catalog, str(where.groups_file))
    return CoverageReport(reports, problems)


def uncovered_cells(repo_path: str | Path, specs_dir: str | Path | None = None,
                    catalog: Catalogued | None = None) -> list[UncoveredCell]:
    """The cells no sibling test covers tonight, for the night report (empty when all are covered).

    ``catalog``: the catalog's tests with what the night ran (``catalogued``), so a disabled or
    skipped sibling covers nothing; None counts every configuration the files hold."""
    return night_coverage(repo_path, specs_dir, catalog)[0]


def night_coverage(repo_path: str | Path, specs_dir: str | Path | None = None,
                   catalog: Catalogued | None = None) -> tuple[list[UncoveredCell], tuple[Problem, ...]]:
    """(the cells no sibling test covers tonight, each with its group's problems as the reason; every
    problem ``nightly coverage`` would list for the tree): what the night report lists and notes.
    A sibling the night merely did not select is no problem (``catalogued``'s ``by_selection``)."""
    report = check_repo(locate(repo_path, specs_dir), catalog=catalog)
    claims: dict[str, list[Problem]] = {}
    for p in report.problems:
        if isinstance(p, Unlisted):
            claims.setdefault(p.group, []).append(p)
    cells = [UncoveredCell(g.group.name, cell, g.tests, (*g.problems, *claims.get(g.group.name, ())))
             for g in report.groups for cell in g.uncovered]
    return cells, (*report.problems, *(p for g in report.groups for p in g.problems))


def configurations_by_test(repo_path: str | Path, specs_dir: str | Path | None = None,
                           tests: Collection[str] | None = None) -> dict[str, tuple[Configuration, ...]]:
    """Each test's configurations (repo-relative path -> rows of its matrix), for the catalog listing.

    Tests of a group use the group's reading; any other test with a readable module-level
    ``_CONFIGS`` (dicts, or tuples under a ``# (a, b, ...)`` comment) is listed too. ``tests``: the
    catalog's test paths, which decide what a test is (SGLang's runner collects ``bench_*.py`` too);
    None: every file under the test roots.
    """
    where = locate(repo_path, specs_dir)
    out: dict[str, list[Configuration]] = {}
    for group in check_repo(where).groups:
        for row in group.rows:
            out.setdefault(row.config.test, []).append(row.config)
    source = TreeSource(where.repo)
    for path in source.files_mentioning(DEFAULT_MATRIX, where.roots):
        if path not in out and (tests is None or path in tests):
            text, _ = python_text(source, path)  # an unreadable file is the catalog's problem: it says so
            configs, _ = python_matrix(text, path, DEFAULT_MATRIX) if text is not None else ([], [])
            if configs:
                out[path] = configs
    return {test: tuple(dict.fromkeys(configs)) for test, configs in sorted(out.items())}
