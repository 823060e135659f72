"""flake.nix parses and its outputs evaluate offline (inputs stubbed: no network for nixpkgs here)."""

import json
import subprocess

EVAL = """
let
  flake = import ./flake.nix;
  systems = [ "x86_64-linux" "aarch64-linux" ];
  fakePkgs = system: {
    inherit system;
    python311 = "/nix/store/python311"; uv = "uv"; gnumake = "make"; git = "git"; kubectl = "kubectl";
    kustomize = "kustomize"; postgresql_15 = "pg"; chromium = "chromium";
    mkShell = args: args // { type = "shell"; };
    writeShellApplication = args: "/nix/store/fake-" + args.name;
  };
  nixpkgs = {
    lib.genAttrs = names: f: builtins.listToAttrs (map (n: { name = n; value = f n; }) names);
    legacyPackages = builtins.listToAttrs (map (s: { name = s; value = fakePkgs s; }) systems);
  };
  out = flake.outputs { self = out; inherit nixpkgs; };
in {
  description = flake.description;
  apps = builtins.attrNames out.apps.x86_64-linux;
  nightly = out.apps.x86_64-linux.nightly.program;
  default = out.apps.x86_64-linux.default.program;
  shell = out.devShells.aarch64-linux.default.packages;
  specs = builtins.mapAttrs (n: p: builtins.pathExists p) out.specs;
}
"""

def test_the_flake_parses(project_root):
    proc = subprocess.run(["nix-instantiate", "--parse", str(project_root / "flake.nix")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_flake_outputs_evaluate_to_the_apps_shell_and_specs(project_root):
    proc = subprocess.run(["nix-instantiate", "--eval", "--strict", "--json", "--expr", EVAL],
                          cwd=project_root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["apps"] == ["default", "nightly", "test", "ui"]
    assert out["nightly"] == "/nix/store/fake-nightly/bin/nightly" == out["default"]
    assert {"/nix/store/python311", "kubectl", "chromium", "pg"} <= set(out["shell"])
    assert out["specs"] and all(out["specs"].values()), out["specs"]
