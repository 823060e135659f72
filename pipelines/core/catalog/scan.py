"""Finding test files and reading each one once: bytes, sha256, registrations, NUM_GPUS, needs.

Discovery walks the roots for the file names the dialect's runner collects (``test_*.py``, or
every ``*.py`` but ``conftest.py``/``__init__.py``) as the runner's recursive glob does, following
symlinked folders that stay inside the repository (a loop or a folder outside is named, not walked);
a file whose name is unsafe for an id, or a symlink resolving outside the repository, is
reported and skipped. Scanning is a pure function of (repo, file) so it can run in a process
pool for big trees; every failure (unreadable, undecodable, syntax error) is a located problem.
Files are decoded as Python decodes them: UTF-8, unless a BOM or a ``# -*- coding: ... -*-`` line says
otherwise.
A registry file without the bytes ``register_`` cannot register anything and is not parsed.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import hashlib
import io
import os
import posixpath
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

from pipelines.core.catalog.dialect import Dialect, M
from pipelines.core.catalog.forked import fork_map
from pipelines.core.catalog.ids import path_problem
from pipelines.core.catalog.infer import Needs, infer_needs
from pipelines.core.catalog.registry import Registration, parse_registrations
from pipelines.core.catalog.resolve import module_constants, resolve
from pipelines.core.model import Problem
from pipelines.core.pyparse import parse_python, unparsed


@dataclass(frozen=True)
class FileScan:
    path: str
    sha256: str = ""
    registrations: tuple[Registration, ...] = ()
    needs: Needs = Needs()
    num_gpus: int | None = None
    problems: tuple[Problem, ...] = ()
    parsed: bool = False
    #: what the catalog assumed reading the file (a NUM_GPUS also set under an ``if``), for the assumptions
    notes: tuple[str, ...] = ()
    #: registrations of calls refused with a problem that still say what they register (SGLang's ``suite=None``
    #: beside ``stage=``): no tests, but the ids of the file's other tests are made over them too
    withheld: tuple[Registration, ...] = ()


def shown(rel: str) -> str:
    """A hostile path as it can be printed safely (escapes, no control characters)."""
    return ascii(rel)[1:-1]


def _inside(repo: Path, full: Path) -> bool:
    try:
        full.resolve().relative_to(repo)
        return True
    except (ValueError, OSError, RuntimeError):
        return False


def checked_path(repo: Path, rel: str, field: str = "path") -> Problem | None:
    """Why ``rel`` cannot be a test file of ``repo`` (unsafe name, outside the repo), or None."""
    why = path_problem(rel)
    if why:
        return Problem(shown(rel), 1, field, f"{why}; rename the file (test ids must be safe partition keys)")
    full = repo / rel
    if not _inside(repo, full):
        return Problem(rel, 1, field, f"resolves outside the repository ({os.path.realpath(full)}); "
                                      "replace the symlink with the file itself")
    return None


#: how a user changes the roots for every command; ``nightly catalog`` adds its own ``--roots``
ROOTS_SETTING = "set `roots:` in assets/repos.yaml"


def root_folder(root: str) -> str:
    """A root as written (``.``, ``./tests``, ``tests/``, ``/``) as the repo-relative folder it names: ``.`` for
    the repository itself, else ``a/b``. A root leaving the repository keeps its ``..`` for discovery to refuse."""
    return posixpath.normpath(root.strip("/") or ".")


def collected(name: str, patterns: tuple[str, ...], exclude: tuple[str, ...] = ()) -> bool:
    """Whether the runner collects a file of this name."""
    return name not in exclude and _any_pattern(tuple(patterns))(name) is not None


@functools.lru_cache(maxsize=64)
def _any_pattern(patterns: tuple[str, ...]):
    """``any(fnmatchcase(name, p) for p in patterns)`` as one compiled match (runs for every file)."""
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or "(?!)").match


def hidden(name: str) -> bool:
    """A folder the runner's recursive glob never enters."""
    return name.startswith(".") or name == "__pycache__"


def walk_files(repo: Path, folder: str = "", skipped: dict[str, str] | None = None):
    """Yield ``(rel, entry, linked)`` for every file under ``folder`` (repo-relative) as the runner's recursive
    glob finds it: hidden and ``__pycache__`` folders skipped, a symlinked folder resolving inside the
    repository followed (its files keep the link's path, the one the runner names; ``linked`` marks them).

    A symlinked folder leading outside, or back to a folder it is in (a loop), is not followed and goes into
    ``skipped`` (rel -> why) for the catalog to say so.
    """
    real_repo = os.path.realpath(repo)
    start = os.path.realpath(repo / folder) if folder else real_repo
    # each entry: (rel, its real path, the real (first, last) folders of the stretches walked before the
    # latest link, where that stretch began, under a link): a link to any folder on the way is a loop
    stack: list[tuple[str, str, tuple[tuple[str, str], ...], str, bool]] = [(folder, start, (), start, False)]
    base = str(repo) + os.sep
    while stack:
        rel_dir, real, before, began, linked = stack.pop()
        try:
            entries = list(os.scandir(base + rel_dir if rel_dir else repo))
        except OSError:
            continue
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.is_dir(follow_symlinks=False):
                if not hidden(entry.name):
                    stack.append((rel, f"{real}/{entry.name}", before, began, linked))
                continue
            if entry.is_symlink() and _is_folder(entry):
                if hidden(entry.name):
                    continue
                target = os.path.realpath(entry.path)
                if not _under(target, real_repo):
                    if skipped is not None:
                        skipped[rel] = (f"leads outside the repository ({target}); replace the link with the "
                                        "folder itself if the runner should collect its files")
                elif any(_under(target, first) and _under(last, target) for first, last in (*before, (began, real))):
                    if skipped is not None:
                        skipped[rel] = (f"leads back to {os.path.relpath(target, real_repo)}, a folder it is in; "
                                        "the runner's recursive glob walks such a loop again and again: remove the link")
                else:
                    stack.append((rel, target, (*before, (began, real)), target, True))
                continue
            yield rel, entry, linked


def _is_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _under(path: str, folder: str) -> bool:
    """Whether real path ``path`` is ``folder`` or inside it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _walk(repo: Path, folder: str, found: dict[str, bool], patterns: tuple[str, ...], exclude: tuple[str, ...]) -> None:
    """Collect the files the runner collects under ``folder`` (repo-relative); True marks a symlinked file or
    one under a symlinked folder."""
    for rel, entry, linked in walk_files(repo, folder):
        if collected(entry.name, patterns, exclude):
            found[rel] = linked or entry.is_symlink()


def discover(repo: Path, roots: tuple[str, ...], patterns: tuple[str, ...] = ("test_*.py",),
             exclude: tuple[str, ...] = (), listing: dict[str, bool] | None = None) -> tuple[list[str], list[Problem]]:
    """Repo-relative paths of collected files under ``roots`` (sorted), and what was wrong on the way.

    A root may be written ``.``/``/`` (the whole repository) or ``./tests``; one leaving the repository is a
    problem. A symlinked folder is followed when it stays inside (:func:`walk_files`); a symlinked file is kept only
    if it resolves inside.
    ``listing`` (every ``.py`` file -> is a symlink, walked the same way) saves walking again.
    """
    if listing is not None and not all(p.endswith(".py") for p in patterns):
        listing = None
    found: dict[str, bool] = {}
    problems: list[Problem] = []
    seen: set[str] = set()
    for written in roots:
        root = root_folder(written)
        if root in seen:
            continue
        seen.add(root)
        whole = root == "."
        base = repo if whole else repo / root
        if (not whole and path_problem(root)) or not _inside(repo, base):
            problems.append(Problem(shown(written), 1, "roots", f"must be a folder inside the repository; {ROOTS_SETTING}"))
            continue
        if not base.is_dir():
            problems.append(Problem(shown(written), 1, "roots", f"no such folder in the repository; {ROOTS_SETTING}"))
            continue
        if listing is None:
            _walk(repo, "" if whole else root, found, patterns, exclude)
            continue
        prefix = "" if whole else root + "/"
        matches = _any_pattern(tuple(patterns))
        for rel, link in listing.items():
            if rel.startswith(prefix):
                name = rel.rpartition("/")[2]
                if name not in exclude and matches(name):
                    found[rel] = link
    paths = []
    for rel in sorted(found):
        why = path_problem(rel)
        if why:
            problems.append(Problem(shown(rel), 1, "path", f"{why}; rename the file (test ids must be safe partition keys)"))
        elif found[rel] and not _inside(repo, repo / rel):
            problems.append(Problem(rel, 1, "path", f"resolves outside the repository ({os.path.realpath(repo / rel)}); "
                                                    "replace the symlink with the file itself"))
        else:
            paths.append(rel)
    return paths, problems


_BOM = b"\xef\xbb\xbf"


def python_source(data: bytes) -> tuple[str, str]:
    """(text, encoding) of a ``.py`` file's bytes as Python reads them: a UTF-8 BOM or a PEP 263 coding
    line in the first two lines decides, else UTF-8 (the runner runs what Python accepts, so must we).

    Raises SyntaxError for an unknown or conflicting declaration, UnicodeDecodeError for bytes that are
    not in the encoding.
    """
    first = data.find(b"\n")
    second = data.find(b"\n", first + 1) if first >= 0 else -1
    if not data.startswith(_BOM) and b"coding" not in data[:second if second >= 0 else len(data)]:
        return data.decode("utf-8"), "utf-8"  # the usual file: no need to tokenize its first lines
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), encoding


def source_text(rel: str, data: bytes) -> tuple[str | None, Problem | None]:
    """:func:`python_source`'s text of the file ``rel``, or (None, the located problem saying why Python
    cannot read it and what to do): every reader of test sources decodes them this one way."""
    try:
        return python_source(data)[0], None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        said = "UTF-8" if exc.encoding in ("utf-8", "utf-8-sig") else f"{exc.encoding}, as its coding line says"
        return None, Problem(rel, line, "file", (
            f"is not {said} ({exc.reason} at byte {exc.start}); save the file as UTF-8 or declare its encoding "
            "with a `# -*- coding: <name> -*-` line, as Python reads it so"))
    except SyntaxError as exc:  # an unknown encoding, or a coding line that contradicts a UTF-8 BOM
        line = 1 if b"coding" in data.split(b"\n", 1)[0] else 2
        return None, Problem(rel, line, "file", (
            f"{exc.msg} (Python refuses to run it); fix the `# -*- coding: <name> -*-` line: name a codec Python "
            "knows, and only utf-8 in a file that starts with a UTF-8 BOM"))


def scan_file(repo: str, rel: str, registry: bool = True, dialect: Dialect = M, parse_all: bool = False) -> FileScan:
    """Read one test file: never raises, every failure is a problem on the file.

    ``parse_all`` parses a registry file even without ``register_`` (an implicit CPU folder's).
    """
    try:
        data = (Path(repo) / rel).read_bytes()
    except OSError as exc:
        return FileScan(rel, problems=(Problem(rel, 1, "file", f"cannot be read ({exc.strerror or exc}); check the file's "
                                                                     "permissions or remove it"),))
    return scan_bytes(rel, data, registry, dialect, parse_all)


def scan_bytes(rel: str, data: bytes, registry: bool = True, dialect: Dialect = M, parse_all: bool = False,
               sha: str = "") -> FileScan:
    """:func:`scan_file` on bytes already read (``sha``: their digest, when the caller has it)."""
    sha = sha or hashlib.sha256(data).hexdigest()
    source, bad = source_text(rel, data)
    if source is None:
        return FileScan(rel, sha, problems=(bad,))
    if registry and not parse_all and "register_" not in source:  # cannot register anything: no ast needed
        return FileScan(rel, sha, parsed=True)
    try:
        tree = parse_python(source, rel)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 1
        msg = getattr(exc, "msg", str(exc))
        return FileScan(rel, sha, problems=(Problem(rel, line, "syntax", f"{msg}; fix the file so Python can parse it"),))
    regs, problems, withheld = parse_registrations(tree, rel, source, dialect) if registry else ([], [], [])
    constants = module_constants(tree)
    num_gpus, notes = None, ()
    if not registry:  # NUM_GPUS is framework S's; in a registry file the suite name gives the count
        num_gpus, bad, notes = _num_gpus(tree, constants, rel)
        problems += [bad] if bad else []
    return FileScan(rel, sha, tuple(regs), infer_needs(tree, constants), num_gpus, tuple(problems), parsed=True,
                    notes=notes, withheld=tuple(withheld))


def _num_gpus(tree: ast.Module, constants: dict, rel: str) -> tuple[int | None, Problem | None, tuple[str, ...]]:
    """The file's module-level ``NUM_GPUS`` (None when it sets none), or a problem when the catalog cannot
    read it as a whole number: a computed value, a string, or one set where its value depends on how the
    file runs (inside an ``if``/``try``/``with``/``for``, imported, ``+=``) is never taken as the default
    silently. ``NUM_GPUS, NUM_NODES = 2, 1`` is read. The statement binding it last at module level decides,
    as it does when the file runs; but an ``if`` that may leave it as a plain assignment before set it
    (``NUM_GPUS = 2`` then ``if os.environ.get('X'): NUM_GPUS = 1``) keeps that value, the one CI's
    default environment gives, and is named in a note."""
    last, node = None, None
    overridden: list[ast.If] = []  # `if` blocks after the plain assignment that may set it again
    for stmt in _as_run(tree.body):
        found, value = _plain_binding(stmt)
        if found:
            last, node, overridden = stmt, value, []
        elif _bound_lines(stmt):
            if isinstance(stmt, ast.If) and node is not None and _may_keep(stmt):
                overridden.append(stmt)
            else:
                last, node, overridden = stmt, None, []
    if last is None:
        return None, None, ()
    if node is None:
        return None, _unread(rel, last), ()
    plain = (isinstance(last, ast.AnnAssign) or (len(last.targets) == 1 and isinstance(last.targets[0], ast.Name))) \
        and last in tree.body  # under the main guard: not what the module's constants hold
    value = constants["NUM_GPUS"] if plain and "NUM_GPUS" in constants else resolve(node, constants).value
    shown_value = unparsed(node)
    shown_value = shown_value if len(shown_value) <= 60 else shown_value[:57] + "..."
    if isinstance(value, bool) or not isinstance(value, int):
        return None, Problem(rel, last.lineno, "NUM_GPUS", (
            f"`{shown_value}` must be an integer literal (the catalog reads the file without running it); "
            "write NUM_GPUS = <N> or give the template entry 'num_gpus' (entries without one use default_num_gpus)")), ()
    if value < 0:
        return None, Problem(rel, last.lineno, "NUM_GPUS", f"{value} must be 0 or more; write the number of GPUs "
                                                           "the test needs"), ()
    notes = tuple(
        f"{rel}:{_bound_lines(stmt)[0]}: NUM_GPUS: set again under an `if` (line {stmt.lineno}), which the catalog "
        f"does not evaluate; the test plans on {value} from line {last.lineno}, the value when the condition does not "
        "hold (give the template entry 'num_gpus' to plan otherwise)" for stmt in overridden)
    return value, None, notes


def _as_run(body: list[ast.stmt]):
    """Module-level statements as running the file executes them: the body of an ``if __name__ ==
    "__main__":`` block always runs (CI and the wrapper run test files as scripts), its ``else`` never."""
    for stmt in body:
        if isinstance(stmt, ast.If) and _is_main_guard(stmt.test):
            yield from _as_run(stmt.body)
        else:
            yield stmt


def _is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides) and \
        any(isinstance(x, ast.Constant) and x.value == "__main__" for x in sides)


def _may_keep(stmt: ast.If) -> bool:
    """Whether some branch of the ``if`` (an ``elif``, the ``else`` or its absence) leaves NUM_GPUS as it was."""
    while True:
        if not any(_bound_lines(s) for s in stmt.body) or not stmt.orelse:
            return True
        if len(stmt.orelse) == 1 and isinstance(stmt.orelse[0], ast.If):
            stmt = stmt.orelse[0]
            continue
        return not any(_bound_lines(s) for s in stmt.orelse)


_NAMED = "NUM_GPUS"
#: where a name bound inside is not the module's (the catalog does not look into these)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
           ast.GeneratorExp)
_SET_BY = {ast.If: "an `if` block", ast.Try: "a `try` block", ast.With: "a `with` block", ast.AsyncWith: "a `with` block",
           ast.For: "a `for` loop", ast.AsyncFor: "a `for` loop", ast.While: "a `while` loop", ast.Match: "a `match` block",
           ast.Import: "an import", ast.ImportFrom: "an import", ast.AugAssign: "an augmented assignment"}
if hasattr(ast, "TryStar"):
    _SET_BY[ast.TryStar] = "a `try` block"


def _plain_binding(stmt: ast.stmt) -> tuple[bool, ast.expr | None]:
    """(binds NUM_GPUS, the expression it gets) for a module-level ``=`` statement: ``NUM_GPUS = 4``,
    ``NUM_GPUS = TOTAL = 4``, ``NUM_GPUS, NUM_NODES = 2, 1``; the expression is None when the value cannot
    be told without running the file (``NUM_GPUS, N = sizes()``). (False, None) for any other statement."""
    if isinstance(stmt, ast.AnnAssign):
        found = stmt.value is not None and isinstance(stmt.target, ast.Name) and stmt.target.id == _NAMED
        return found, stmt.value if found else None
    if not isinstance(stmt, ast.Assign):
        return False, None
    found, node = False, None
    for target in stmt.targets:  # `a = b = v` assigns left to right: the last target binding the name wins
        hit, value = _unpacked(target, stmt.value)
        if hit:
            found, node = True, value
    return found, node


def _unpacked(target: ast.expr, value: ast.expr | None) -> tuple[bool, ast.expr | None]:
    """What ``target = value`` gives NUM_GPUS: (bound, expression or None when unreadable)."""
    if isinstance(target, ast.Name):
        return target.id == _NAMED, value if target.id == _NAMED else None
    if not isinstance(target, ast.Tuple | ast.List) or not _bound_lines(target):
        return False, None
    if (not isinstance(value, ast.Tuple | ast.List) or len(value.elts) != len(target.elts)
            or any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts))):
        return True, None
    found, node = False, None
    for t, v in zip(target.elts, value.elts, strict=True):
        hit, got = _unpacked(t, v)
        if hit:
            found, node = True, got
    return found, node


def _bound_lines(node: ast.AST) -> list[int]:
    """The lines where ``node`` binds NUM_GPUS in the module's own scope (not inside a def, class or comprehension)."""
    lines = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.AnnAssign) and n.value is None:  # `NUM_GPUS: int` only annotates
            continue
        if isinstance(n, ast.Name) and n.id == _NAMED and isinstance(n.ctx, ast.Store):
            lines.append(n.lineno)
        elif isinstance(n, ast.alias) and (n.asname or n.name.partition(".")[0]) == _NAMED:
            lines.append(getattr(n, "lineno", 0))
        elif isinstance(n, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and n.name == _NAMED:
            lines.append(n.lineno)
        if isinstance(n, _SCOPES):
            continue
        stack.extend(ast.iter_child_nodes(n))
    return sorted(lines)


def _unread(rel: str, stmt: ast.stmt) -> Problem:
    """A NUM_GPUS the file sets in a form whose value the catalog cannot know without running it."""
    line = next((n for n in _bound_lines(stmt) if n), stmt.lineno)
    where = _SET_BY.get(type(stmt))
    if where is None:  # `NUM_GPUS, NUM_NODES = sizes()`, `*NUM_GPUS, = ...`
        shown = unparsed(stmt)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        said = f"`{shown}` cannot be unpacked without running the file"
    else:
        said = (f"is set in {where}" + (f" (line {stmt.lineno})" if stmt.lineno != line else "")
                + ", not by a plain module-level assignment, so its value depends on how the file runs and the "
                "catalog reads the file without running it")
    return Problem(rel, line, "NUM_GPUS", f"{said}; write NUM_GPUS = <N> at module level or give the template entry "
                                          "'num_gpus' (entries without one use default_num_gpus)")


def scan_files(repo: Path, rels: list[str], registry: bool = True, workers: int | None = None, dialect: Dialect = M,
               implicit: tuple[str, ...] = ()) -> list[FileScan]:
    """Scan every file, on every CPU when the tree is big enough for it to pay off (:mod:`.forked`).

    ``implicit`` are folder prefixes (``tests/fast/``) whose files are parsed even unregistered.
    """
    base = str(repo)
    return fork_map(lambda rel: scan_file(base, rel, registry, dialect, rel.startswith(implicit) if implicit else False),
                    rels, workers)
