"""Regenerate nix/nixpkgs-attrs.json from a nixpkgs checkout at the revision flake.lock pins.

Why: tests/nix evaluates the flake against nix/standin, which offers only the names recorded
in nix/nixpkgs-attrs.json. With a checkout (no network needed once it is on disk) this lists
every name of each scope the flake reaches into, so the stand-in matches the release exactly:

    git clone --depth 1 --branch nixos-26.05 https://github.com/NixOS/nixpkgs /tmp/nixpkgs
    git -C /tmp/nixpkgs checkout <rev from flake.lock>
    python nix/nixpkgs_attrs.py /tmp/nixpkgs

Names are read with ``builtins.attrNames`` (no package is evaluated or built). The checkout's
HEAD must be the revision flake.lock pins, or the script refuses: the record names its source.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "nix" / "nixpkgs-attrs.json"

#: scope name in the record -> Nix expression over `pkgs` whose attribute names it lists.
SCOPES = {
    "pkgs": "pkgs",
    "python311": "pkgs.python311",
    "python311.pkgs": "pkgs.python311.pkgs",
    "dockerTools": "pkgs.dockerTools",
    "lib": "pkgs.lib",
}

EXPR = """
{ checkout, system }:
let pkgs = import checkout { inherit system; config = { }; overlays = [ ]; };
in builtins.mapAttrs (_: expr: builtins.attrNames expr) { %s }
"""


def locked_rev() -> str:
    lock = json.loads((ROOT / "flake.lock").read_text(encoding="utf-8"))
    return lock["nodes"]["nixpkgs"]["locked"]["rev"]


def checkout_rev(checkout: Path) -> str:
    out = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def attr_names(checkout: Path, system: str) -> dict[str, list[str]]:
    bindings = " ".join(f'"{name}" = {expr};' for name, expr in SCOPES.items())
    argv = ["nix-instantiate", "--eval", "--strict", "--json", "--expr", EXPR % bindings,
            "--arg", "checkout", str(checkout.resolve()), "--argstr", "system", system]
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        error = next((line for line in out.stderr.splitlines() if line.startswith("error:")), out.stderr.strip())
        raise SystemExit(f"{checkout}: nix-instantiate failed: {error}")
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="nixpkgs checkout at the revision flake.lock pins")
    parser.add_argument("--system", default="x86_64-linux")
    args = parser.parse_args(argv)
    want, have = locked_rev(), checkout_rev(args.checkout)
    if want != have:
        print(f"{args.checkout}: HEAD is {have}; flake.lock pins {want}; check that revision out first",
              file=sys.stderr)
        return 2
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    names = attr_names(args.checkout, args.system)
    source = f"builtins.attrNames at {have} ({args.system})"
    record["scopes"] = {scope: {name: source for name in names[scope]} for scope in SCOPES}
    record["checked_against"] = f"a nixpkgs checkout at {have}"
    RECORD.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RECORD}: " + ", ".join(f"{s} {len(n)}" for s, n in names.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
