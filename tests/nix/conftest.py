"""Evaluate the flake offline: its nixpkgs input is nix/standin, built from nix/nixpkgs-attrs.json."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

needs_nix = pytest.mark.skipif(shutil.which("nix-instantiate") is None,
                               reason="nix-instantiate evaluates the flake (make system-deps installs nix-bin)")

#: The flake's outputs (`out`) with the stand-in as nixpkgs, and nix/build.nix's full set for
#: x86_64-linux (`build`: also what the outputs only name by path). `root` is the folder holding flake.nix,
#: `record` the attribute-name record the stand-in is built from. Variables arrive as --argstr,
#: never as text pasted into the expression.
OUTPUTS = """
{ root, record }:
let
  flake = import (/. + root + "/flake.nix");
  nixpkgs = import (/. + root + "/nix/standin") {
    record = builtins.fromJSON (builtins.readFile (/. + record));
  };
  out = flake.outputs { self = out; inherit nixpkgs; };
  build = import (/. + root + "/nix/build.nix") {
    pkgs = nixpkgs.legacyPackages.x86_64-linux;
    root = /. + root;
  };
in
"""


@dataclass(frozen=True)
class Evaluation:
    returncode: int
    stdout: str
    stderr: str

    @property
    def value(self):
        assert self.returncode == 0, self.stderr
        return json.loads(self.stdout)


def evaluate(body: str, root: Path, record: Path | None = None) -> Evaluation:
    """``body`` is a Nix expression over ``out`` (the flake's outputs); strict, as JSON."""
    record = record or root / "nix" / "nixpkgs-attrs.json"
    argv = ["nix-instantiate", "--eval", "--strict", "--json", "--expr", OUTPUTS + body,
            "--argstr", "root", str(root.resolve()), "--argstr", "record", str(record.resolve())]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=root)
    stderr = "\n".join(line for line in proc.stderr.splitlines() if "build-users-group" not in line)
    return Evaluation(proc.returncode, proc.stdout, stderr)


@pytest.fixture
def flake_copy(tmp_path, project_root) -> Path:
    """The files the flake reads, copied so a test may break them without touching the tree."""
    for name in ("flake.nix", "flake.lock", "pyproject.toml", "README.md"):
        shutil.copy(project_root / name, tmp_path / name)
    shutil.copytree(project_root / "nix", tmp_path / "nix", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path
