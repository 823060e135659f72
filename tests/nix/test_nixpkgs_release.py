"""The flake may use only names the pinned nixpkgs release has: the stand-in offers exactly the
recorded ones, and evaluation fails, naming the attribute, when the flake asks for another."""

from __future__ import annotations

import json
import re

import pytest

from tests.nix.conftest import evaluate, needs_nix

pytestmark = needs_nix


def record(project_root) -> dict:
    return json.loads((project_root / "nix/nixpkgs-attrs.json").read_text())


def test_flake_nix_flake_lock_and_the_record_name_the_same_release(project_root):
    release = record(project_root)["release"]
    lock = json.loads((project_root / "flake.lock").read_text())["nodes"]["nixpkgs"]
    url = re.search(r'inputs\.nixpkgs\.url = "github:NixOS/nixpkgs/([^"]+)";', (project_root / "flake.nix").read_text())
    assert url and url.group(1) == release["branch"] == lock["original"]["ref"]
    assert re.fullmatch(r"nixos-\d\d\.(05|11)", release["branch"]), "a release branch, not unstable or master"
    assert lock["locked"]["rev"] == release["rev"] and re.fullmatch(r"[0-9a-f]{40}", release["rev"])
    assert lock["locked"]["lastModified"] == release["lastModified"]


def test_every_recorded_name_says_where_it_was_confirmed(project_root):
    scopes = record(project_root)["scopes"]
    assert set(scopes) == {"pkgs", "python311", "python311.pkgs", "dockerTools", "lib"}
    for scope, names in scopes.items():
        for name, source in names.items():
            assert len(source) > 10, f"{scope}.{name} has no source"


def test_the_stand_in_offers_exactly_the_recorded_names(project_root):
    out = evaluate("""let p = nixpkgs.legacyPackages.aarch64-linux; in {
        pkgs = builtins.attrNames p; python311 = builtins.attrNames (builtins.removeAttrs p.python311
          [ "type" "name" "outPath" "drvPath" ]);
        "python311.pkgs" = builtins.attrNames p.python311.pkgs;
        dockerTools = builtins.attrNames p.dockerTools; lib = builtins.attrNames nixpkgs.lib;
    }""", project_root).value
    assert out == {scope: sorted(names) for scope, names in record(project_root)["scopes"].items()}


@pytest.mark.parametrize(("used", "bogus"), [
    ("pkgs.kustomize", "kustomise"),
    ("python.pkgs.setuptools", "setuptoolz"),
    ("pkgs.dockerTools.pullImage", "pullimage"),
    ("lib.makeLibraryPath", "makeLibPath"),
])
def test_a_name_the_release_lacks_fails_the_evaluation_and_is_named(flake_copy, used, bogus):
    sources = [flake_copy / "nix/build.nix", flake_copy / "nix/images.nix"]
    changed = 0
    for path in sources:
        text = path.read_text()
        if used in text:
            path.write_text(text.replace(used, used.rsplit(".", 1)[0] + "." + bogus, 1))
            changed += 1
    assert changed == 1, f"{used} must appear in nix/build.nix or nix/images.nix"
    result = evaluate("builtins.deepSeq out true", flake_copy)
    assert result.returncode != 0
    assert f"attribute '{bogus}' missing" in result.stderr


def test_dropping_a_name_from_the_record_fails_the_real_flake(flake_copy, tmp_path):
    data = record(flake_copy)
    del data["scopes"]["pkgs"]["uv"]
    trimmed = tmp_path / "trimmed-attrs.json"
    trimmed.write_text(json.dumps(data))
    result = evaluate("builtins.deepSeq out true", flake_copy, record=trimmed)
    assert result.returncode != 0
    assert "attribute 'uv' missing" in result.stderr


def test_the_unchanged_copy_evaluates(flake_copy):
    # the copy the negative tests break is itself sound, so their failures come from the change
    assert evaluate("builtins.deepSeq out true", flake_copy).value is True
