"""pyproject.toml declares every distribution pipelines/ imports, and its `test` extra what tests/
imports besides, within the pins of requirements.lock.

An import satisfied only through another package's dependency breaks when that package drops
it; and a bound the lock's pin does not meet would send `uv pip install -e .` to the network."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib

from packaging.requirements import Requirement

from tests.conftest import PROJECT_ROOT


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(extra: str | None = None) -> dict[str, Requirement]:
    """[project] dependencies, or those of one optional-dependencies extra."""
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    specs = project["optional-dependencies"][extra] if extra else project["dependencies"]
    return {normalize(r.name): r for r in map(Requirement, specs)}


def project_modules() -> set[str]:
    """Top-level names the checkout itself provides: pipelines, tests and the example frameworks'
    packages (tests put examples/NAME on sys.path)."""
    examples = {p.stem for p in (PROJECT_ROOT / "examples").glob("*/*") if p.is_dir() or p.suffix == ".py"}
    return {"pipelines", "tests"} | examples


def imported_distributions(folder: str = "pipelines") -> dict[str, str]:
    """distribution -> one file:line importing it, over every module of ``folder`` (lazy imports too)."""
    dists = importlib.metadata.packages_distributions()
    found: dict[str, str] = {}
    for path in sorted((PROJECT_ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for top in {n.split(".")[0] for n in names} - set(sys.stdlib_module_names) - project_modules():
                for dist in dists.get(top, [top]):
                    found.setdefault(normalize(dist), f"{path.relative_to(PROJECT_ROOT)}:{node.lineno}")
    return found


def locked() -> dict[str, str]:
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", (PROJECT_ROOT / "requirements.lock").read_text(), re.M)
    return {normalize(n): v for n, v in pins}


def test_every_distribution_pipelines_imports_is_declared_in_pyproject():
    missing = {d: where for d, where in imported_distributions().items() if d not in declared()}
    assert missing == {}, "add these to [project] dependencies of pyproject.toml (within the lock's pins)"


def test_every_distribution_the_tests_import_is_declared_in_pyproject_or_its_test_extra():
    """packaging, markdown-it-py and numpy were in the lock only as other packages' dependencies."""
    have = declared() | declared("test")
    missing = {d: where for d, where in imported_distributions("tests").items() if d not in have}
    assert missing == {}, "add these to the `test` extra of pyproject.toml (within the lock's pins)"


def test_every_declared_dependency_is_met_by_its_locked_pin():
    pins = locked()
    unmet = {name: (str(req), pins.get(name)) for name, req in (declared() | declared("test")).items()
             if name not in pins or not req.specifier.contains(pins[name], prereleases=True)}
    assert unmet == {}, "a bound the lock does not meet: widen it, or re-lock (uv pip compile) and rerun nix/lock2nix.py"


def test_the_lock_says_pyproject_asks_for_each_declared_dependency():
    """As `uv pip compile` writes it: the lock was compiled from this pyproject (its `# via` lines)."""
    text = (PROJECT_ROOT / "requirements.lock").read_text()
    for name in declared() | declared("test"):
        block = re.search(rf"^{re.escape(name)}==\S+\n((?:    #.*\n)*)", text, re.M | re.I)
        assert block and "nightly-e2e (pyproject.toml)" in block.group(1), name


def test_the_build_backend_is_pinned_within_pyproject_bounds_and_every_install_of_the_project_uses_the_pin():
    """`uv pip install -e .` builds in an isolated environment: without a constraint it takes the
    newest setuptools the bounds allow on the day, the one unpinned piece of an install."""
    requires = [Requirement(r) for r in tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["build-system"]["requires"]]
    text = (PROJECT_ROOT / "build-constraints.lock").read_text()
    pins = {normalize(n): v for n, v in re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", text, re.M)}
    assert {normalize(r.name) for r in requires} == set(pins)
    assert all(r.specifier.contains(pins[normalize(r.name)]) for r in requires)
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    dockerfile = (PROJECT_ROOT / "Dockerfile").read_text()
    assert "--no-deps --build-constraint build-constraints.lock -e ." in makefile
    assert "--no-deps --build-constraint build-constraints.lock ." in dockerfile
    assert "COPY requirements.lock build-constraints.lock" in dockerfile
