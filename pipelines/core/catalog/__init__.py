"""The catalog: what a framework repository registers, what each test needs, what is wrong.

``load_catalog`` reads a repository in either format of the frameworks we serve (registry calls
in test files, or a Jinja2 workflow template), never imports test code, never raises on bad
input: each bad file or registration becomes one located :class:`Problem` and the rest loads.
A repository nobody configured is still read: its registry dialect comes from the framework's
own registry module (:mod:`.detect`), and what was assumed is listed in ``Catalog.assumptions``.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from pipelines.core.catalog.assemble import registry_tests, template_path, template_tests
from pipelines.core.catalog.cache import ScanCache, cache_file
from pipelines.core.catalog.cached import defines_registry, scan_cached
from pipelines.core.catalog.detect import choose, not_a_checkout, outside_roots, python_files, skipped_folders
from pipelines.core.catalog.dialect import M_FAST, Dialect, M, with_rules
from pipelines.core.catalog.ids import id_problem, safe_filename, test_id_to_path
from pipelines.core.catalog.incremental import inputs_digest, remember, reuse
from pipelines.core.catalog.requirements import build_requirements
from pipelines.core.catalog.scan import FileScan, checked_path, discover, root_folder, scan_files
from pipelines.core.catalog.template import TEST_DIR, Template, parse_template
from pipelines.core.model import Catalog, Discovery, Problem, Test, effective_timeout
from pipelines.core.specs import RepoSpec, Specs, unconfigured_spec

__all__ = ["load_catalog", "detect_format", "find_template", "find_templates", "id_problem", "safe_filename", "test_id_to_path"]

_WORKFLOWS = ".github/workflows"
_SURPRISE = re.compile(r"several files define|cannot be parsed|not a built-in profile|defines no register|"
                       r"signature cannot say|registry_module .* \(assets/repos.yaml\)|"
                       r"rules from assets/repos.yaml override|symlinked folder .* not followed")
_TEMPLATE_SET = re.compile(r"<%[-+]?\s*set\s")  # `<% set`, `<%set`, and whitespace control `<%- set`


def find_templates(repo: Path) -> list[str]:
    """Every workflow template holding a ``<% set ... %>`` statement, repo-relative, sorted."""
    folder = repo / _WORKFLOWS
    if not folder.is_dir():
        return []
    found = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith((".j2", ".jinja", ".jinja2", ".yml", ".yaml")):
            continue
        try:
            text = (folder / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if _TEMPLATE_SET.search(text):
            found.append(f"{_WORKFLOWS}/{name}")
    return found


def find_template(repo: Path) -> str | None:
    """The first workflow template holding a ``<% set ... %>`` test list, repo-relative, if any."""
    return next(iter(find_templates(repo)), None)


def detect_format(repo: Path, roots: tuple[str, ...], dialect: Dialect = M,
                  scans: list[FileScan] | None = None) -> tuple[str, str]:
    """(format, why): registry when a test file registers itself, else a template when one exists.

    ``scans`` are the registry scans of the collected files when the caller has them already.
    """
    if scans is None:
        files, _ = discover(repo, roots, dialect.discovery, dialect.exclude)
        scans = scan_files(repo, files, registry=True, dialect=dialect)
    registering = sum(1 for s in scans if s.registrations or any(p.field not in ("file", "syntax") for p in s.problems))
    names = ", ".join(dialect.discovery)
    if registering:
        return "registry", f"format: registry ({registering} of {len(scans)} {names} files under {', '.join(roots)} call register_*_ci)"
    templates = find_templates(repo)
    if templates:
        return "template", f"format: template ({', '.join(templates)} {'sets' if len(templates) == 1 else 'set'} the test lists)"
    return "registry", (f"format: registry (no register_*_ci call in {len(scans)} {names} files under {', '.join(roots)} "
                        f"and no workflow template under {_WORKFLOWS}; every file will be reported as unregistered)")


def _auto_spec(repo: Path) -> RepoSpec:
    return unconfigured_spec(repo)


def configured_roots(repo: Path, spec: RepoSpec | None) -> tuple[str, ...] | None:
    """The roots a spec really sets; None when it only carries the default ``tests`` the repo lacks."""
    if spec is None:
        return None
    roots = tuple(spec.roots)
    if roots == ("tests",) and not (repo / "tests").is_dir():
        return None
    return roots


def _gc_paused(fn):
    """Run ``fn`` with the cyclic garbage collector paused: a catalog allocates hundreds of thousands of
    syntax-tree nodes and records, none in a cycle, and collecting them took a tenth of a cold read of
    10,000 files (bench/catalog.py)."""
    @functools.wraps(fn)
    def paused(*args, **kwargs):
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()
    return paused


@_gc_paused
def load_catalog(
    repo: Path | str,
    spec: RepoSpec | None = None,
    specs: Specs | None = None,
    estimates: Mapping[str, int] | None = None,
    *,
    workers: int | None = None,
    roots: tuple[str, ...] | None = None,
    cache_dir: Path | str | None = None,
) -> Catalog:
    """Read every test of ``repo`` (format from ``spec``, or detected) into a :class:`Catalog`.

    ``estimates`` (test id -> seconds, from history) give est_time to template tests, which
    register none; registry tests keep their registered value. ``workers`` forces the number of
    parsing processes (default: a pool only for big trees). ``roots`` overrides the spec's and
    the dialect's roots (``nightly catalog --roots``). ``cache_dir`` (a folder, or a ``.json``
    file) keeps per-file results by content digest so that unchanged files are not parsed again.
    """
    repo = Path(repo).resolve()
    assumptions: list[str] = []
    configured = spec is not None
    whole = not_a_checkout(repo)
    if whole:
        return Catalog(str(repo), (), problems=(Problem(str(repo), 1, "repo", whole),), assumptions=tuple(assumptions))
    if spec is None:
        spec = _auto_spec(repo)
    if not repo.is_dir():
        return Catalog(str(repo), (), problems=(Problem(str(repo), 1, "repo", "is not a folder; check --repo or the path in assets/repos.yaml"),),
                       assumptions=tuple(assumptions))
    cache = ScanCache(cache_file(cache_dir, repo)) if cache_dir is not None else None
    try:
        return _load(repo, spec, specs, estimates, workers, roots, cache, configured, assumptions)
    finally:
        if cache is not None:
            cache.close()  # a load that raised must not leave the scans writer unreaped


def registry_reading(repo: Path, spec: RepoSpec, configured: bool, roots: tuple[str, ...] | None = None,
                     defines=None, py_files=None) -> tuple[Dialect, tuple[str, ...], list[str], RepoSpec]:
    """How the registry files of ``repo`` are read: (dialect, roots, notes, spec with the implicit CPU
    folders in force): the spec's dialect or the one its registry module defines, repos.yaml's rules,
    and an unconfigured framework M checkout's ``tests/fast`` folder. One choice for the catalog and for
    reading a file as an earlier revision registered it (``nightly coverage --against``)."""
    if roots is None:
        roots = configured_roots(repo, spec if configured else None)
    defaulted = roots is None  # the runner's own folders are read: say what they leave out
    if roots is not None:  # `.`, `./tests` and `tests/` as the folders they name; `..` is kept for discovery to refuse
        roots = tuple(dict.fromkeys(root_folder(r) for r in roots))
    py_files = py_files if py_files is not None else python_files(repo)
    dialect, roots, notes = choose(repo, getattr(spec, "dialect", "") or "", roots, defines, py_files,
                                   getattr(spec, "registry_module", "") or "")
    if defaulted and getattr(spec, "format", "registry") != "template":
        notes = [*notes, *outside_roots(repo, py_files, roots, dialect)]
    implicit_suite = getattr(spec, "implicit_cpu_suite", "") or ""
    if implicit_suite:
        dialect = dataclasses.replace(dialect, implicit_suite=implicit_suite)
    dialect, overridden = with_rules(dialect, dict(getattr(spec, "rules", None) or {}))
    if overridden:
        notes = [*notes, overridden]
    if not configured and dialect.name == "m" and not spec.implicit_cpu_dirs:
        # framework M's runner takes an unregistered file of its tests/fast folder as a CPU test of est_time 1, when
        # the roots read it (tests/fast itself, one of its runner's roots, or one holding it: tests, an older layout);
        # only that folder: tests/e2e/fast is an ordinary folder to M's runner
        inside = any(r == "." or M_FAST == r or M_FAST.startswith(r + "/") for r in roots)
        fast = (M_FAST,) if inside and (repo / M_FAST).is_dir() else ()
        if fast:
            spec = dataclasses.replace(spec, implicit_cpu_dirs=fast)
            notes = [*notes, f"implicit CPU folder(s) {', '.join(fast)}: framework M's runner takes an unregistered "
                             "file there as a CPU test of est_time 1 (set implicit_cpu_dirs in assets/repos.yaml "
                             "to change)"]
    return dialect, roots, list(notes), spec


def _load(repo: Path, spec: RepoSpec, specs: Specs | None, estimates: Mapping[str, int] | None,
          workers: int | None, roots: tuple[str, ...] | None, cache: ScanCache | None, configured: bool,
          assumptions: list[str]) -> Catalog:
    """load_catalog's work once the repo is known to be a folder (see there)."""
    defines = defines_registry(repo, cache) if cache is not None else None
    py_files = python_files(repo)
    dialect, roots, notes, spec = registry_reading(repo, spec, configured, roots, defines, py_files)
    notes = [*notes, *skipped_folders(py_files, roots)]
    fmt = spec.format
    scans: list[FileScan] = []
    problems: list[Problem] = []
    memo = None
    listed: dict[str, str] = {}  # test file -> the unread template listing it
    folders: list[str] = []  # where a template's jobs run its files from
    if fmt in ("auto", "registry"):
        files, problems = discover(repo, roots, dialect.discovery, dialect.exclude, py_files.symlinks())
        implicit = tuple(d.strip("/") + "/" for d in spec.implicit_cpu_dirs)
        if cache is not None:
            # a template's entries are named in what is kept; so are the files discovery refused (a new
            # `tests/new dir/test_x.py` is left out of ``files``, so only its problem tells the catalogs apart)
            memo = inputs_digest([dialect.digest(), roots, notes, repr(spec), configured,
                                  repr(specs.models if specs else None), repr(specs.datasets if specs else None),
                                  _workflows_digest(repo), repr(problems)])
            cache.use_rules(dialect.digest())
            known = reuse(repo, files, dict(py_files), cache, memo, dialect, spec.implicit_cpu_dirs)
            if known is not None:
                cache.save()
                return dataclasses.replace(known, discovery=_registry_discovery(roots, dialect))
        if cache is not None:
            scans = scan_cached(repo, files, cache, True, dialect, implicit, workers, dict(py_files))
        else:
            scans = scan_files(repo, files, registry=True, workers=workers, dialect=dialect, implicit=implicit)
    if fmt == "auto":
        fmt, why = detect_format(repo, roots, dialect, scans)
        assumptions.append(why)
        if fmt != "registry":
            problems = []
        else:
            listed = _unread_templates(repo, assumptions)
    if not configured:
        cpu = f"implicit CPU folders {', '.join(spec.implicit_cpu_dirs)}" if spec.implicit_cpu_dirs else \
            "no implicit CPU folders"
        assumptions.insert(0, f"repo {repo} is not configured in assets/repos.yaml; using defaults: {cpu}, "
                              f"NUM_GPUS default {spec.default_num_gpus}, est_time default "
                              f"{spec.default_est_time} s for template tests, local tests run with the checkout importable "
                              "(PYTHONPATH=<checkout> ahead of the shell's, as after the `pip install -e .` CI does "
                              "first; pods rely on the framework's image having it installed); its estimates, "
                              "calibration, quarantine "
                              f"and nights go by the name {spec.name} (the folder name and a digest of the path, so "
                              "that no other checkout's state is read or overwritten)")
    if fmt == "registry":
        # a configured repo hears only about surprises; an unconfigured one about every choice made
        assumptions += notes if not configured else [n for n in notes if _SURPRISE.search(n)]
        tests, more = registry_tests(scans, spec.implicit_cpu_dirs, dialect)
        problems += [dataclasses.replace(p, message=p.message.replace(
            " call at module level;", f" call at module level, but {listed[p.path]} lists it (not read: format registry);",
            1)) if p.field == "registration" and p.path in listed else p for p in more]
        assumed = sorted({r.suite for s in scans for r in s.registrations if r.assumed_gpus})
        if assumed:
            assumptions.append(f"suite(s) {', '.join(assumed)} name no GPU count (-<N>-gpu); their GPU tests are "
                               "planned on 1 GPU")
    elif fmt == "template":
        tests, more, notes, scans, folders = _template(repo, spec, estimates or {}, workers, cache)
        problems += more
        assumptions += notes + _first_night_timeout(tests, spec)
    else:
        problems.append(Problem(f"repos.{spec.name}", 1, "format", f"unknown format {fmt!r}; use registry, template or auto"))
        tests, scans = [], []
    if cache is not None:
        assumptions += cache.notes
    tests, dup = _unique(tests)
    problems += dup
    by_path = {s.path: s for s in scans}
    needs = {t.id: by_path[t.path].needs for t in tests if t.path in by_path}
    tests, requirements, more = build_requirements(tests, needs, spec, specs)
    problems += more
    tests.sort(key=lambda t: (t.path, t.line, t.id))
    problems.sort(key=lambda p: (p.path, p.line))
    discovery = _registry_discovery(roots, dialect) if fmt == "registry" else _template_discovery(folders)
    catalog = Catalog(str(repo), tuple(tests), tuple(requirements), tuple(problems), tuple(assumptions), discovery, fmt)
    if cache is not None:
        if memo is not None and fmt == "registry" and not cache.notes:
            remember(cache, memo, scans, catalog)
        cache.save()
    return catalog


def _template_discovery(folders: Sequence[str] = ()) -> Discovery:
    """A template's ``test_file`` is relative to ``tests/``, or to the folder its job's run line runs it from
    (``folders``): a ``test_*.py`` there is a test, listed or not."""
    roots = [TEST_DIR] + [f for f in sorted(set(folders)) if f != TEST_DIR and not f.startswith(f"{TEST_DIR}/")]
    return Discovery(tuple(roots), ("test_*.py",))


def _registry_discovery(roots: tuple[str, ...], dialect: Dialect) -> Discovery:
    """Where the registry runner collects tests: the roots read and the dialect's file names."""
    return Discovery(tuple(roots), tuple(dialect.discovery), tuple(dialect.exclude))


def _template(
    repo: Path, spec: RepoSpec, estimates: Mapping[str, int], workers: int | None, cache: ScanCache | None = None,
) -> tuple[list[Test], list[Problem], list[str], list[FileScan], list[str]]:
    """The tests the workflow templates list, their problems, notes and scans, and the folders their jobs run
    the files from."""
    found = [spec.template] if spec.template else find_templates(repo)
    notes: list[str] = []
    if not found:
        return [], [Problem(_WORKFLOWS, 1, "template", "no workflow template with a `<% set ... %>` test list; "
                                                     "set `template:` for the repo in assets/repos.yaml")], notes, [], []
    tmpls: list[tuple[str, Template]] = []
    problems: list[Problem] = []
    skipped: list[str] = []
    for rel in found:
        try:
            source = (repo / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(Problem(rel, 1, "template", f"cannot be read ({exc}); save it as UTF-8 or fix `template:` "
                                                        "in assets/repos.yaml"))
            continue
        tmpl = parse_template(source, rel)
        if len(found) > 1 and not tmpl.entries and not tmpl.problems:
            skipped.append(rel)  # sets other things (a version, a runner list), not tests
            continue
        tmpls.append((rel, tmpl))
        notes += list(tmpl.notes)
        if tmpl.entries and tmpl.test_dir_said and (tmpl.test_dir != TEST_DIR or not tmpl.test_dir_read):
            notes.append(f"{rel}: test_file is read relative to {tmpl.test_dir}/ " + (
                f"({tmpl.test_dir_said})" if tmpl.test_dir_read else f"because {tmpl.test_dir_said}"))
    if not spec.template and tmpls:
        used = ", ".join(rel for rel, _ in tmpls)
        notes.insert(0, f"template{'s' if len(tmpls) > 1 else ''}: {used} (found under {_WORKFLOWS}; "
                        + ("an entry listed by several with the same environment is one test; " if len(tmpls) > 1 else "")
                        + "set `template:` in assets/repos.yaml to pin " + ("one)" if len(tmpls) > 1 else "it)"))
    if skipped:
        notes.append(f"skipped {', '.join(skipped)}: no test list in its `<% set %>` statements")
    # only files inside the repo are ever opened; template_tests reports the others
    files = sorted({path for path in (template_path(e) for _, t in tmpls for e in t.entries)
                    if checked_path(repo, path) is None and (repo / path).is_file()})
    if cache is not None:
        cache.use_rules("template")
        scans = scan_cached(repo, files, cache, registry=False, workers=workers)
    else:
        scans = scan_files(repo, files, registry=False, workers=workers)
    by_path = {s.path: s for s in scans}
    tests, more, split = template_tests(repo, tmpls, by_path, spec.default_num_gpus, spec.default_est_time, estimates)
    return tests, problems + more, notes + split, scans, [t.test_dir for _, t in tmpls if t.test_dir]


def _workflows_digest(repo: Path) -> str:
    """The workflow templates' names and contents, so a kept catalog that names them is kept only while
    they are unchanged."""
    h = hashlib.sha256()
    for rel in find_templates(repo):
        try:
            h.update(rel.encode() + b"\0" + (repo / rel).read_bytes() + b"\0")
        except OSError:
            continue
    return h.hexdigest()


def _unread_templates(repo: Path, assumptions: list[str]) -> dict[str, str]:
    """A repo detected as registry that also keeps a workflow template: name each template and how many entries it
    lists (they are not read, so a maintainer can tell which format wins), and tell an unregistered file the
    template lists that the template is why it looked like a test, rather than only to register it."""
    listed: dict[str, str] = {}
    for rel in find_templates(repo):
        try:
            entries = parse_template((repo / rel).read_text(encoding="utf-8"), rel).entries
        except (OSError, UnicodeDecodeError):
            continue
        if not entries:
            continue
        assumptions.append(f"format: registry, so {rel} ({len(entries)} entr{'y' if len(entries) == 1 else 'ies'}) is "
                           "not read; set `format: template` for this repo in assets/repos.yaml to read the template "
                           "instead")
        for e in entries:
            listed.setdefault(template_path(e), rel)
    return listed


def _first_night_timeout(tests: list[Test], spec: RepoSpec) -> list[str]:
    """Framework S registers no est_time and has no per-test timeout (each entry is its own CI job), so
    the timeout of a test without history is ours, from ``default_est_time``: say so, with the figure."""
    guessed = sum(t.uncalibrated for t in tests)
    if not guessed:
        return []
    timeout = effective_timeout(spec.default_est_time, spec.timeout_floor_s, spec.timeout_factor)
    return [f"{guessed} template test(s) have no history: they plan with est_time {spec.default_est_time} s "
            f"(default_est_time) and time out after {timeout} s, max(timeout floor {spec.timeout_floor_s} s, "
            f"{spec.timeout_factor:g} x est_time; a test killed there gets about 1.56 x that limit next night); "
            "the framework's own CI sets no per-test timeout, so raise default_est_time in assets/repos.yaml "
            "above its longest test; after a night (or `nightly calibrate --write` on measured history) they plan "
            "from the calibrated estimates"]


def _unique(tests: list[Test]) -> tuple[list[Test], list[Problem]]:
    seen: dict[str, Test] = {}
    problems = []
    for t in tests:
        if t.id in seen:
            first = seen[t.id]
            problems.append(Problem(t.path, t.line, "id", (
                f"duplicate test id {t.id!r} (also line {first.line}); a file may register each backend and suite "
                "only once")))
            continue
        seen[t.id] = t
    return list(seen.values()), problems
