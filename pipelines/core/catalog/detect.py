"""Which dialect a repository speaks, and where its tests are, with what was assumed said aloud.

The framework is the truth: its registry module (the ``.py`` file defining ``register_*_ci``)
gives the functions and their keywords; ``assets/repos.yaml`` may pin a profile (``dialect:``)
and the roots. Every choice made without configuration becomes one line of
``Catalog.assumptions`` so a CI maintainer can check it against their runner.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable
from pathlib import Path

from pipelines.core.catalog.dialect import (
    FAMILY_ROOT,
    PROFILES,
    Dialect,
    M,
    derive,
    may_define_registry,
    resembles,
    signatures,
)
from pipelines.core.catalog.scan import ROOTS_SETTING, collected, python_source, root_folder, walk_files
from pipelines.core.pyparse import parse_python

#: folders that never hold the framework's own registry module
_SKIP = frozenset({"node_modules", "site-packages", "venv", "build", "dist"})
#: folders holding another project's checkout: a registry module there is that project's, not the repo's
_VENDORED = frozenset({"3rdparty", "third_party", "thirdparty", "vendor", "vendored"})
_MAX_MODULE = 1 << 20

#: (repo-relative path, stat) -> bytes; the catalog cache passes one that remembers answers
Reader = Callable[[str, os.stat_result], bytes | None]


def _read(repo: Path) -> Reader:
    def read(rel: str, st: os.stat_result) -> bytes | None:
        try:
            return (repo / rel).read_bytes()
        except OSError:
            return None
    return read


class PyFiles(list):
    """``[(rel, stat)]`` of every ``.py`` file, sorted, plus ``links``: the symlinked ones (or under a
    symlinked folder), and ``skipped``: the symlinked folders not followed (rel -> why)."""

    links: frozenset[str] = frozenset()
    skipped: dict[str, str] = {}

    def symlinks(self) -> dict[str, bool]:
        """rel -> is a symlink, as :func:`scan.discover` takes a listing."""
        return {rel: rel in self.links for rel, _ in self}


def not_a_checkout(repo: Path) -> str:
    """Why ``repo`` cannot be a framework's checkout ("" when it can): the file system's root or the home
    folder unless it is a git checkout (``--repo "$UNSET/"``, ``--repo ~``), whose walk would read every file below it for minutes
    (/proc and /sys included) before saying there is no test."""
    home = Path.home().resolve() if "HOME" in os.environ else None
    if repo == Path(repo.anchor) or (repo == home and not (repo / ".git").exists()):  # HOME=WORKDIR=checkout: fine
        where = "the file system's root" if repo == Path(repo.anchor) else "your home folder"
        return (f"is {where}, not a framework's checkout; check --repo (an unset variable in `--repo \"$X/\"` "
                "gives /) or the path in assets/repos.yaml")
    return ""


def python_files(repo: Path) -> PyFiles:
    """Every ``.py`` file of the checkout, walked once as the runner's glob walks (no hidden or ``__pycache__``
    folders; symlinked folders inside the repository followed, see :func:`scan.walk_files`); the test
    discovery and the registry-module search both read this listing."""
    out = PyFiles()
    if not_a_checkout(repo):  # load_catalog says why; nothing else walks the whole disk meanwhile
        return out
    links: set[str] = set()
    skipped: dict[str, str] = {}
    for rel, e, linked in walk_files(repo, "", skipped):
        if not e.name.endswith(".py"):
            continue
        try:
            if e.is_symlink() or linked:
                links.add(rel)
                out.append((rel, os.stat(e.path)))
            elif e.is_file(follow_symlinks=False):
                out.append((rel, e.stat(follow_symlinks=False)))
        except OSError:
            continue
    out.sort()
    out.links = frozenset(links)
    out.skipped = skipped
    return out


def skipped_folders(files: list[tuple[str, os.stat_result]], roots: tuple[str, ...]) -> list[str]:
    """One note per symlinked folder under ``roots`` that the catalog did not follow (the runner's glob would,
    or would loop)."""
    under, everywhere = _under(roots)
    return [f"symlinked folder {rel} not followed, its files are not listed: it {why}"
            for rel, why in sorted(getattr(files, "skipped", {}).items())
            if everywhere or rel.startswith(under)]


#: at most this many files named in the note about registered files outside the roots
_NAMED_OUTSIDE = 10


def outside_roots(repo: Path, files: list[tuple[str, os.stat_result]], roots: tuple[str, ...], dialect: Dialect
                  ) -> list[str]:
    """A note naming the test files under ``tests/`` outside the roots that its runner would collect by name and
    that call a register function: the roots chosen for an unconfigured checkout (framework M's runner's own
    folders) leave them out, and a registered test must not vanish without a word (its CI never runs it either,
    but a layout of its own, ``tests/gpu/``, is more likely an older or different runner than dead tests).
    Framework M's family only (its roots lie under ``tests/``); a note, never a problem: a real M checkout keeps
    its verdict."""
    if "." in roots or not all(r.startswith(FAMILY_ROOT + "/") for r in dialect.roots):
        return []
    under, _ = _under(roots)
    found = []
    for rel, _st in files:
        if not rel.startswith(FAMILY_ROOT + "/") or rel.startswith(under):
            continue
        if not collected(rel.rpartition("/")[2], tuple(dialect.discovery), tuple(dialect.exclude)):
            continue
        try:
            data = (repo / rel).read_bytes()
        except OSError:
            continue
        if b"register_" in data and _registers(data, dialect):
            found.append(rel)
    if not found:
        return []
    shown = ", ".join(found[:_NAMED_OUTSIDE]) + (f" and {len(found) - _NAMED_OUTSIDE} more" if len(found) > _NAMED_OUTSIDE else "")
    return [f"{len(found)} file(s) outside the roots call {'/'.join(sorted(dialect.backends))}: {shown}; they are "
            f"not listed: the {dialect.name} runner collects only {', '.join(dialect.roots)}, so its CI never runs them "
            f"either; move them under one of those folders, or {ROOTS_SETTING} (e.g. `roots: [{FAMILY_ROOT}]`) to "
            "read them"]


def _registers(data: bytes, dialect: Dialect) -> bool:
    """Whether a file calls one of the dialect's register functions at module level, as its runner reads them."""
    try:
        tree = parse_python(python_source(data)[0])
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return False
    return any(isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name)
               and stmt.value.func.id in dialect.backends for stmt in tree.body)


def _under(roots: tuple[str, ...]) -> tuple[tuple[str, ...], bool]:
    """The path prefixes of ``roots`` (``tests/``), and whether one of them is the whole repository."""
    folders = [root_folder(r) for r in roots]
    return tuple(f + "/" for f in folders), "." in folders


def registry_modules(repo: Path, files: list[tuple[str, os.stat_result]], defines: Callable[[str, os.stat_result], bool],
                     roots: tuple[str, ...] = ()) -> list[str]:
    """The files that define ``register_*_ci`` functions (usually one; never a symlink or a vendored copy).

    A ``test_*.py`` file under the test ``roots`` is a test (it imports the register functions) and is
    read only when no other file defines them; elsewhere the name says nothing (``ci/test_utils.py``
    may well be the registry module).
    """
    links = getattr(files, "links", frozenset())
    under, everywhere = _under(roots)

    def a_test(rel: str) -> bool:
        return rel.rpartition("/")[2].startswith("test_") and (everywhere or rel.startswith(under))

    candidates = [rel for rel, st in files if st.st_size < _MAX_MODULE and rel not in links
                  and not _SKIP.intersection(rel.split("/")[:-1])]
    stat = dict(files)
    found = [rel for rel in candidates if not a_test(rel) and defines(rel, stat[rel])]
    return found or [rel for rel in candidates if a_test(rel) and defines(rel, stat[rel])]


#: where any built-in profile's runner collects tests (the roots, while the dialect is not yet known)
_ANY_ROOTS = tuple(dict.fromkeys([FAMILY_ROOT, *(r for d in PROFILES.values() for r in d.roots)]))


def choose(repo: Path, dialect_name: str = "", roots: tuple[str, ...] | None = None,
           defines: Callable[[str, os.stat_result], bool] | None = None,
           files: list[tuple[str, os.stat_result]] | None = None,
           module: str = "") -> tuple[Dialect, tuple[str, ...], list[str]]:
    """(dialect, roots, notes) for ``repo``.

    ``dialect_name`` pins a profile ("" = from the registry module); ``roots`` None means "not
    configured": the dialect's roots, else ``tests``. ``defines`` answers "does this file define
    register functions" (default: read it); ``files`` is :func:`python_files` when already listed;
    ``module`` is the registry module named in assets/repos.yaml (``registry_module:``), if any.
    """
    notes: list[str] = []
    base = None
    if dialect_name and dialect_name not in ("auto",):
        base = PROFILES.get(dialect_name)
        if base is None:
            notes.append(f"dialect {dialect_name!r} is not a built-in profile ({', '.join(PROFILES)}); reading the "
                         "registry module instead")
    read = _read(repo)
    if defines is None:
        def defines(rel: str, st: os.stat_result) -> bool:
            data = read(rel, st)
            return data is not None and may_define_registry(data)

    listing = python_files(repo) if files is None else files
    named = _named(repo, module, notes) if module else None
    if named is not None:
        modules = [module]
        sources = {module: named}
    else:
        modules = registry_modules(repo, listing, defines, _ANY_ROOTS if roots is None else roots)
        own = [rel for rel in modules if not _VENDORED.intersection(rel.split("/")[:-1])]
        if own and len(own) < len(modules):
            notes.append(f"ignored the registry module(s) of vendored checkouts ({', '.join(sorted(set(modules) - set(own)))}): "
                         "another project's rules; set `dialect:` in assets/repos.yaml if the repo's tests use them")
            modules = own
        elif modules and not own:
            notes.append(f"the only registry module(s) are in vendored checkouts ({', '.join(modules)}); using them")
        sources = {}
        for rel in modules:
            try:
                sources[rel], _ = python_source((repo / rel).read_bytes())
            except (OSError, UnicodeDecodeError, SyntaxError):
                continue
    if modules:
        chosen_module, why = _pick(sources, base, listing, _ANY_ROOTS if roots is None else roots, read)
        if chosen_module is None:
            dialect = base or M
        else:
            dialect, more = derive(chosen_module, sources[chosen_module], base)
            notes += more
            if named is not None:
                notes.append(f"the rules come from {module} (registry_module in assets/repos.yaml)")
            elif len(modules) > 1:
                notes.append(f"several files define register_*_ci ({', '.join(modules)}); the rules come from "
                             f"{chosen_module} ({why}; set `registry_module:` in assets/repos.yaml to name another)")
    else:
        dialect = base or M
        notes.append("no module of the repo defines register_*_ci; " + (
            f"using the {dialect.source}" if base else f"assuming the {dialect.source} (set `dialect:` in assets/repos.yaml)"))
    if roots is None:
        chosen = tuple(r for r in dialect.roots if (repo / r).is_dir())
        if chosen:
            notes.append(f"roots: {', '.join(chosen)} (the {dialect.name} runner's; {ROOTS_SETTING} to change)")
        elif all(r.startswith(FAMILY_ROOT + "/") for r in dialect.roots) and (repo / FAMILY_ROOT).is_dir():
            # an older layout, or a framework shaped like M without its folders: read all of tests/
            chosen = (FAMILY_ROOT,)
            notes.append(f"roots: {FAMILY_ROOT} (none of the {dialect.name} runner's {', '.join(dialect.roots)} "
                         f"exists; {ROOTS_SETTING} to change)")
        else:
            chosen = dialect.roots
            notes.append(f"roots: {', '.join(chosen)} (the {dialect.name} runner's; {ROOTS_SETTING} to change)")
    else:
        chosen = roots
    notes.insert(0, dialect.describe())
    return dialect, chosen, notes


def _named(repo: Path, module: str, notes: list[str]) -> str | None:
    """The source of the registry module named in assets/repos.yaml, or None (with a note) when it cannot be used."""
    full = repo / module
    try:
        full.resolve().relative_to(repo.resolve())
    except (ValueError, OSError):
        why = "is outside the repository"
    else:
        try:
            source, _ = python_source(full.read_bytes())
            return source
        except OSError as exc:
            why = f"cannot be read ({exc.strerror or exc})"
        except (UnicodeDecodeError, SyntaxError) as exc:
            why = f"cannot be decoded ({exc})"
    notes.append(f"registry_module {module} (assets/repos.yaml) {why}; reading the registry modules found instead "
                 "(fix `registry_module:`, a path relative to the repository)")
    return None


#: ``from pkg.ci_register import register_cuda_ci`` (one line, or a parenthesized list)
_IMPORT = re.compile(r"^[ \t]*from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.MULTILINE)
#: test files read for their imports before the most imported module is taken as the repo's own
_IMPORTS_SEEN = 50


def _pick(sources: dict[str, str], base: Dialect | None, files: list[tuple[str, os.stat_result]],
          roots: tuple[str, ...], read: Reader) -> tuple[str | None, str]:
    """The registry module the rules come from, and why, when several define ``register_*_ci``.

    A module that fits the pinned profile (``dialect:``) first, then the one the test files import
    the register functions from (an SGLang checkout under ``external/`` defines more functions but
    is not the repo's own), then the one defining most functions.
    """
    if len(sources) <= 1:
        return next(iter(sources), None), ""
    fits = {rel: base is not None and _profile(text) is base for rel, text in sources.items()}
    imported = _imported(sources, files, roots, read)
    defs = {rel: text.count("def register_") for rel, text in sources.items()}
    best = max(sources, key=lambda r: (fits[r], imported.get(r, 0), defs[r], -len(r)))
    rivals = [r for r in sources if r != best]
    if fits[best] and not all(fits[r] for r in rivals):
        why = f"the {base.name} profile pinned in assets/repos.yaml"  # type: ignore[union-attr]
    elif imported.get(best, 0) > max(imported.get(r, 0) for r in rivals):
        n = imported[best]
        why = f"{n} test file{'s import' if n > 1 else ' imports'} the register functions from it"
    else:
        why = "it defines most register functions"
    return best, why


def _profile(source: str) -> Dialect | None:
    try:
        sigs, _, opaque = signatures(source)
    except (SyntaxError, ValueError):
        return None
    return resembles(sigs, opaque) if sigs or opaque else None


def _imported(sources: dict[str, str], files: list[tuple[str, os.stat_result]], roots: tuple[str, ...],
              read: Reader) -> dict[str, int]:
    """How many files under the roots import ``register_*_ci`` names from each module (the first
    :data:`_IMPORTS_SEEN` importing files are enough to tell the repo's own module)."""
    dotted = {rel: rel[:-3].removesuffix("/__init__").replace("/", ".") for rel in sources}
    under, everywhere = _under(roots)
    counts: dict[str, int] = {}
    seen = 0
    for rel, st in files:
        if rel in sources or not (everywhere or rel.startswith(under)):
            continue
        data = read(rel, st)
        if not data or b"register_" not in data or b"import" not in data:
            continue
        text = data.decode("utf-8", errors="replace")
        hits = {m for name, names in _IMPORT.findall(text) if "register_" in names
                for m, d in dotted.items() if d == name or d.endswith("." + name)}
        for m in hits:
            counts[m] = counts.get(m, 0) + 1
        seen += bool(hits)
        if seen >= _IMPORTS_SEEN:
            break
    return counts
