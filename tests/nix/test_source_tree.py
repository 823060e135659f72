"""`nix flake check` runs the unit tests (checks.unit) on a copy of nix/source.nix's `tree`, not on
the checkout: a file a test reads that the tree lacks fails there only (build-constraints.lock and
the Dockerfile once did, for tests/test_dependencies.py).

Which top-level paths the tests read is taken from the tests themselves: every
``PROJECT_ROOT / "NAME..."`` (or the ``project_root`` fixture, or ``.joinpath``) in a test file
outside tests/nix, which checks.unit skips. Slow tests are counted too: a few more files in the
tree cost nothing, a missing one fails the check.
"""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

from tests.conftest import PROJECT_ROOT
from tests.nix.conftest import needs_nix

ROOT_NAMES = {"PROJECT_ROOT", "project_root"}
TREE = """{ root }: (import (/. + root + "/nix/source.nix") { root = /. + root; }).tops.tree"""


def tops_read(source: str) -> set[str]:
    """The first path component of every literal path joined onto the project root in ``source``."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            base, arg = node.left, node.right
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "joinpath"
        ):
            base, arg = node.func.value, node.args[0] if node.args else None
        else:
            continue
        if isinstance(base, ast.Name) and base.id in ROOT_NAMES and isinstance(arg, ast.Constant):
            if isinstance(arg.value, str):
                found.add(arg.value.strip("/").split("/", 1)[0])
    return found


def unit_test_files() -> list[Path]:
    return [
        p
        for p in sorted((PROJECT_ROOT / "tests").rglob("*.py"))
        if "nix" not in p.relative_to(PROJECT_ROOT / "tests").parts[:1]
    ]


def test_the_scan_finds_each_way_a_test_names_a_path_under_the_root():
    src = """
A = PROJECT_ROOT / "Dockerfile"
B = (project_root / "docs/nix.md").read_text()
C = PROJECT_ROOT.joinpath("scripts", "x.py")
D = tmp_path / "not-the-root"
"""
    assert tops_read(src) == {"Dockerfile", "docs", "scripts"}


def test_the_tests_read_files_the_scan_can_see():
    """If the scan found nothing (a renamed root constant), the check below would pass vacuously."""
    read = set().union(*(tops_read(p.read_text()) for p in unit_test_files()))
    assert {"assets", "Makefile", "build-constraints.lock", "Dockerfile"} <= read


@needs_nix
def test_every_path_the_unit_tests_read_is_in_the_tree_checks_unit_copies():
    proc = subprocess.run(
        [
            "nix-instantiate",
            "--eval",
            "--strict",
            "--json",
            "--argstr",
            "root",
            str(PROJECT_ROOT),
            "-E",
            TREE,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    tree = set(json.loads(proc.stdout))
    missing = {}
    for path in unit_test_files():
        for top in sorted(tops_read(path.read_text()) - tree):
            missing.setdefault(top, str(path.relative_to(PROJECT_ROOT)))
    assert missing == {}, f"add these to `tops.tree` in nix/source.nix (read by the test named): {missing}"
