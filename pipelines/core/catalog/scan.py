"""Finding test files and reading each one once: bytes, sha256, registrations, NUM_GPUS, needs.

Discovery walks the configured roots for ``test_*.py`` without following symlinked folders;
a file whose name is unsafe for an id, or a symlink resolving outside the repository, is
reported and skipped. Scanning is a pure function of (repo, file) so it can run in a process
pool for big trees; every failure (unreadable, not UTF-8, syntax error) is a located problem.
"""

from __future__ import annotations

import ast
import hashlib
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pipelines.core.catalog.ids import path_problem
from pipelines.core.catalog.infer import Needs, infer_needs
from pipelines.core.catalog.registry import Registration, parse_registrations
from pipelines.core.catalog.resolve import module_constants
from pipelines.core.model import Problem

#: below this many files a process pool costs more than it saves (measured by bench/catalog.py)
PARALLEL_MIN_FILES = 3000
#: below this many CPUs a process pool costs more than it saves (measured by bench/catalog.py on
#: 2 CPUs: 10,000 files in 4.0 s serial, 9.2 s with 2 processes)
PARALLEL_MIN_CPUS = 4


@dataclass(frozen=True)
class FileScan:
    path: str
    sha256: str = ""
    registrations: tuple[Registration, ...] = ()
    needs: Needs = Needs()
    num_gpus: int | None = None
    problems: tuple[Problem, ...] = ()
    parsed: bool = False


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


def _walk(repo: Path, folder: str, found: dict[str, bool]) -> None:
    """Collect ``test_*.py`` under ``folder`` (repo-relative); True marks a symlinked file."""
    try:
        entries = sorted(os.scandir(repo / folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        rel = f"{folder}/{entry.name}" if folder else entry.name
        if entry.is_dir(follow_symlinks=False):
            if not entry.name.startswith(".") and entry.name != "__pycache__":
                _walk(repo, rel, found)
        elif entry.name.startswith("test_") and entry.name.endswith(".py"):
            found[rel] = entry.is_symlink()


def discover(repo: Path, roots: tuple[str, ...]) -> tuple[list[str], list[Problem]]:
    """Repo-relative ``test_*.py`` paths under ``roots`` (sorted), and what was wrong on the way.

    Symlinked folders are not followed; a symlinked file is kept only if it resolves inside.
    """
    found: dict[str, bool] = {}
    problems: list[Problem] = []
    for root in roots:
        root = root.strip("/")
        base = repo / root
        if (root and path_problem(root)) or not _inside(repo, base):
            problems.append(Problem(shown(root), 1, "roots", "must be a folder inside the repository; fix roots in assets/repos.yaml"))
            continue
        if not base.is_dir():
            problems.append(Problem(shown(root), 1, "roots", "no such folder in the repository; fix roots in assets/repos.yaml"))
            continue
        _walk(repo, root, found)
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


def scan_file(repo: str, rel: str, registry: bool = True) -> FileScan:
    """Read one test file: never raises, every failure is a problem on the file."""
    try:
        data = (Path(repo) / rel).read_bytes()
    except OSError as exc:
        return FileScan(rel, problems=(Problem(rel, 1, "file", f"cannot be read ({exc.strerror or exc})"),))
    sha = hashlib.sha256(data).hexdigest()
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return FileScan(rel, sha, problems=(Problem(rel, 1, "file", f"is not UTF-8 ({exc.reason} at byte {exc.start})"),))
    try:
        tree = ast.parse(source, filename=rel)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 1
        msg = getattr(exc, "msg", str(exc))
        return FileScan(rel, sha, problems=(Problem(rel, line, "syntax", f"{msg}; fix the file so Python can parse it"),))
    regs, problems = parse_registrations(tree, rel, source) if registry else ([], [])
    constants = module_constants(tree)
    num_gpus = constants.get("NUM_GPUS")
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, int):
        num_gpus = None
    return FileScan(rel, sha, tuple(regs), infer_needs(tree, constants), num_gpus, tuple(problems), parsed=True)


def _scan_chunk(repo: str, rels: list[str], registry: bool) -> list[FileScan]:
    return [scan_file(repo, rel, registry) for rel in rels]


def scan_files(repo: Path, rels: list[str], registry: bool = True, workers: int | None = None) -> list[FileScan]:
    """Scan every file, in a process pool when the tree is big enough for it to pay off."""
    if workers is None:
        cpus = os.cpu_count() or 1
        workers = min(4, cpus) if len(rels) >= PARALLEL_MIN_FILES and cpus >= PARALLEL_MIN_CPUS else 1
    if workers <= 1:
        return _scan_chunk(str(repo), rels, registry)
    size = max(1, len(rels) // (workers * 4))
    chunks = [rels[i:i + size] for i in range(0, len(rels), size)]
    # forkserver, not fork: callers (a Dagster code server) may have threads, which fork can deadlock
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("forkserver")) as pool:
        parts = pool.map(_scan_chunk, [str(repo)] * len(chunks), chunks, [registry] * len(chunks))
        return [scan for part in parts for scan in part]
