"""nix/nixpkgs_attrs.py lists a nixpkgs checkout's names per scope, and only at the pinned revision."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess

import pytest

from tests.conftest import PROJECT_ROOT
from tests.nix.conftest import needs_nix

_spec = importlib.util.spec_from_file_location("nixpkgs_attrs", PROJECT_ROOT / "nix" / "nixpkgs_attrs.py")
nixpkgs_attrs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nixpkgs_attrs)

#: A checkout-shaped folder: its default.nix takes what nixpkgs' does and has each scope.
FAKE_NIXPKGS = """{ system, config, overlays }: {
  lib = { genAttrs = 1; importJSON = 2; };
  python311 = { pkgs = { setuptools = 1; buildPythonPackage = 2; }; withPackages = 3; sitePackages = "x"; };
  dockerTools = { pullImage = 1; };
  zlib = 1;
}
"""


@needs_nix
def test_names_are_listed_per_scope_without_building_anything(tmp_path):
    (tmp_path / "default.nix").write_text(FAKE_NIXPKGS)
    names = nixpkgs_attrs.attr_names(tmp_path, "x86_64-linux")
    assert names == {
        "pkgs": ["dockerTools", "lib", "python311", "zlib"],
        "python311": ["pkgs", "sitePackages", "withPackages"],
        "python311.pkgs": ["buildPythonPackage", "setuptools"],
        "dockerTools": ["pullImage"],
        "lib": ["genAttrs", "importJSON"],
    }


@needs_nix
def test_a_checkout_that_does_not_evaluate_is_reported_with_nix_s_error(tmp_path):
    (tmp_path / "default.nix").write_text("{ system, config, overlays }: { lib = { }; dockerTools = { }; }")
    with pytest.raises(SystemExit) as err:
        nixpkgs_attrs.attr_names(tmp_path, "x86_64-linux")
    assert str(err.value) == f"{tmp_path}: nix-instantiate failed: error: attribute 'python311' missing"


@pytest.mark.skipif(shutil.which("git") is None, reason="the checkout's revision is read with git")
def test_a_checkout_at_another_revision_is_refused(tmp_path, capsys):
    (tmp_path / "default.nix").write_text(FAKE_NIXPKGS)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "default.nix"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "fake"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    before = (PROJECT_ROOT / "nix/nixpkgs-attrs.json").read_text()
    assert nixpkgs_attrs.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}: HEAD is {head}; flake.lock pins {nixpkgs_attrs.locked_rev()}; check that revision out first" in err
    assert (PROJECT_ROOT / "nix/nixpkgs-attrs.json").read_text() == before
