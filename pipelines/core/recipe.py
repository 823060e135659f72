"""What a converted checkpoint was built by, so a cached one is rebuilt when that changes.

A conversion's output folder (its requirement key) is fixed by the tests, so the key cannot say
which converter wrote it. Its *identity* does: the argv the conversion runs (with the machine's
python, model path and output folder left as placeholders, so a laptop and a build pod agree, and
the launch-only GPU count too: it does not change the checkpoint),
the extra environment of ``assets/checkpoints.yaml``, the content of every file of the checkout
it runs (a script named in the argv, or ``-m module``, and the repo-local Python modules those
import, transitively, read with ``ast`` and never imported), the image digest where the
deployment pins one (what lives outside the checkout, site-packages included, is the image's),
and the identity of the model it converts. The cache stores it in the completion marker and
rebuilds an entry whose recorded identity differs.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.core.pyparse import parse_python


@dataclass(frozen=True)
class Recipe:
    """Everything a conversion runs except its model: compared by :attr:`digest`."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    #: checkout-relative path -> sha256 of the converter script and the modules it imports
    files: Mapping[str, str] = field(default_factory=dict)
    image: str = ""

    @property
    def digest(self) -> str:
        body = {
            "argv": list(self.argv),
            "env": [list(p) for p in self.env],
            "files": dict(sorted(self.files.items())),
            "image": self.image,
        }
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    def as_json(self) -> dict:
        return {
            "argv": list(self.argv),
            "env": dict(self.env),
            "files": dict(sorted(self.files.items())),
            "image": self.image,
            "digest": self.digest,
        }


def identity(recipe_digest: str, model_identity: str) -> str:
    """One conversion's identity: its recipe and its model (the build pod computes the same)."""
    return hashlib.sha256(f"{recipe_digest}\0{model_identity}".encode()).hexdigest()


def model_identity(marker: Mapping | None) -> str:
    """A built model's identity from its completion marker: the digest of its files where the
    marker lists them, else when and from what it was built (a marker written by a build pod)."""
    if not marker:
        return ""
    manifest = marker.get("manifest")
    if isinstance(manifest, Mapping) and manifest.get("digest"):
        return f"files:{manifest['digest']}"
    return f"built:{marker.get('key', '')}|{marker.get('source', '')}|{marker.get('built_at', '')}"


def make_recipe(
    repo: Path, argv: Iterable[str], env: Mapping[str, str], *, pythonpath: str = "", image: str = ""
) -> Recipe:
    """The recipe of ``argv`` run from ``repo``; ``pythonpath`` adds import roots inside ``repo``."""
    argv = tuple(argv)
    root = Path(repo).resolve()
    files = {rel: _sha256(root / rel) for rel in converter_files(root, argv, pythonpath)}
    return Recipe(argv, tuple(sorted(env.items())), files, image)


def converter_files(repo: Path, argv: tuple[str, ...], pythonpath: str = "") -> list[str]:
    """Checkout-relative paths of the files ``argv`` runs and the repo-local modules they import.

    An argv word naming a file of the checkout is run (a ``.py`` script, or any file such as a
    shell script, whose own reads are not followed); ``-m pkg.mod`` runs a module. Imports resolve
    as Python would for a script: its own folder, then the checkout root (the conversion's working
    folder) and ``pythonpath`` entries inside the checkout. Modules outside the checkout are skipped.
    """
    root = Path(repo).resolve()
    extra = [Path(p) if os.path.isabs(p) else root / p for p in pythonpath.split(os.pathsep) if p]
    roots = [root, *(p.resolve() for p in extra if _inside(p.resolve(), root))]
    start: list[tuple[Path, list[Path]]] = []
    for i, word in enumerate(argv):
        if i and argv[i - 1] == "-m":
            for path in _module_files(word, roots):
                start.append((path, roots))
            continue
        if not word or word.startswith("-") or "{" in word:
            continue
        path = (root / word).resolve()
        if _inside(path, root) and path.is_file():
            start.append((path, [path.parent, *roots]))
    seen: dict[Path, None] = {}
    todo = list(start)
    while todo:
        path, search = todo.pop()
        if path in seen:
            continue
        seen[path] = None
        if path.suffix != ".py":
            continue
        for module in _imports(path, roots):
            for found in _module_files(module, search):
                if found not in seen:
                    todo.append((found, roots))
    return sorted(p.relative_to(root).as_posix() for p in seen)


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _imports(path: Path, roots: list[Path]) -> list[str]:
    """Dotted names ``path`` imports anywhere in its body (functions too); relative ones made absolute."""
    try:
        tree = parse_python(path.read_bytes(), str(path))
    except (SyntaxError, ValueError, OSError):
        return []  # hashed as it is; a converter that does not parse fails its build anyway
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(path, node.level, roots)
                if package is None:
                    continue
                base = ".".join(p for p in (package, base) if p)
            if not base:
                continue
            names.append(base)
            names += [f"{base}.{a.name}" for a in node.names if a.name != "*"]  # `from pkg import submodule`
    return names


def _package_of(path: Path, level: int, roots: list[Path]) -> str | None:
    """The package a relative import of ``level`` dots in ``path`` starts from, as a dotted name."""
    folder = path.parent
    for _ in range(level - 1):
        folder = folder.parent
    for root in roots:
        if _inside(folder, root):
            return ".".join(folder.relative_to(root).parts)
    return None


def _module_files(dotted: str, search: list[Path]) -> list[Path]:
    """The files importing ``dotted`` executes from the first root that has it: each package's
    ``__init__.py`` on the way and the module itself."""
    parts = dotted.split(".")
    for base in search:
        found: list[Path] = []
        folder = base
        for i, part in enumerate(parts):
            module, init = folder / f"{part}.py", folder / part / "__init__.py"
            if init.is_file():
                found.append(init.resolve())
            elif module.is_file() and i == len(parts) - 1:
                found.append(module.resolve())
                break
            elif module.is_file():  # `mod.attr`: the rest names attributes, not modules
                found.append(module.resolve())
                break
            elif not (folder / part).is_dir():
                break
            folder = folder / part
        if found:
            return found
    return []


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
