"""Turn requirements.lock into nix/python-lock.json: every pin with the wheel Nix fetches for it.

Why: requirements.lock (uv pip compile) carries versions but no file hashes, and Nix may only
fetch what it can check. pip itself resolves each pin to its PyPI wheel for each platform the
flake builds (``pip install --dry-run --report``, no dependency resolution: the lock already
is the resolution) and reports the file's URL and sha256. Nothing here edits the lock.

Each pin is also marked ``runtime`` or ``test``: runtime when pyproject.toml's
``[project] dependencies`` name it, or when a runtime pin needs it (the lock's ``# via``
comments); the image and ``packages.default`` carry only runtime pins.

    python nix/lock2nix.py                      # asks PyPI through pip; writes nix/python-lock.json
    python nix/lock2nix.py --reports DIR        # reuse DIR/<arch>.json reports pip wrote before
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Flake system -> the manylinux platform tags pip may pick a wheel for.
PLATFORMS = {
    "x86_64-linux": ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"],
    "aarch64-linux": ["manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64", "linux_aarch64"],
}
PYTHON = "3.11"


def normalize(name: str) -> str:
    """PEP 503 name, the form both the lock and pip's report can be compared in."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, dict]:
    """``name -> {version, via}`` from a uv-compiled requirements file."""
    pins: dict[str, dict] = {}
    current = None
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if match:
            current = normalize(match.group(1))
            pins[current] = {"version": match.group(2), "via": []}
            continue
        via = re.match(r"^\s+#\s+(?:via\s+)?([A-Za-z0-9][A-Za-z0-9._-]*)(?:\s|$)", line)
        if current and via and via.group(1) != "via":
            pins[current]["via"].append(normalize(via.group(1)))
    return pins


def runtime_names(pins: dict[str, dict], pyproject: Path) -> set[str]:
    """Pins the application needs at run time: pyproject's dependencies and what they pull in."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    own = normalize(project["name"])
    direct = {normalize(re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0]) for spec in project["dependencies"]}
    runtime = set(direct) & set(pins)
    changed = True
    while changed:
        changed = False
        for name, pin in pins.items():
            if name not in runtime and any(p in runtime and p != own for p in pin["via"]):
                runtime.add(name)
                changed = True
    return runtime


def pip_report(system: str, lock: Path, out: Path) -> dict:
    """pip's dry-run report for one platform: which wheel each pin would install."""
    argv = [sys.executable, "-m", "pip", "install", "--isolated", "--index-url", "https://pypi.org/simple",
            "--dry-run", "--ignore-installed", "--no-deps", "--only-binary=:all:", "--python-version", PYTHON,
            "--implementation", "cp", "--abi", "cp311", "--abi", "abi3", "--abi", "none",
            "--target", str(out / f"target-{system}"), "--report", str(out / f"{system}.json"), "-r", str(lock)]
    for tag in PLATFORMS[system]:
        argv += ["--platform", tag]
    subprocess.run(argv, check=True)
    return json.loads((out / f"{system}.json").read_text(encoding="utf-8"))


def wheels_by_name(report: dict) -> dict[str, dict]:
    found = {}
    for item in report["install"]:
        info = item["download_info"]
        found[normalize(item["metadata"]["name"])] = {
            "version": item["metadata"]["version"],
            "url": info["url"],
            "sha256": info["archive_info"]["hashes"]["sha256"],
        }
    return found


def build(lock: Path, pyproject: Path, reports: dict[str, dict]) -> dict:
    pins = read_lock(lock)
    runtime = runtime_names(pins, pyproject)
    per_system = {system: wheels_by_name(report) for system, report in reports.items()}
    packages = {}
    for name, pin in sorted(pins.items()):
        wheels = {}
        for system, found in per_system.items():
            if name not in found or found[name]["version"] != pin["version"]:
                raise SystemExit(f"{lock}: {name}=={pin['version']}: pip found no wheel for {system}")
            wheels[system] = {"url": found[name]["url"], "sha256": found[name]["sha256"]}
        urls = {w["url"] for w in wheels.values()}
        native = len(urls) > 1 or not next(iter(urls)).endswith("-none-any.whl")
        packages[name] = {
            "version": pin["version"],
            "group": "runtime" if name in runtime else "test",
            "native": native,
            "wheels": wheels if native else {"any": next(iter(wheels.values()))},
        }
    return {
        "generated_by": "nix/lock2nix.py from requirements.lock; do not edit by hand",
        "lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest(),
        "python": PYTHON,
        "systems": sorted(reports),
        "packages": packages,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=Path, help="folder with <system>.json pip reports to reuse")
    parser.add_argument("--out", type=Path, default=ROOT / "nix" / "python-lock.json")
    args = parser.parse_args(argv)
    lock, pyproject = ROOT / "requirements.lock", ROOT / "pyproject.toml"
    if args.reports:
        reports = {s: json.loads((args.reports / f"{s}.json").read_text(encoding="utf-8")) for s in PLATFORMS}
    else:
        with tempfile.TemporaryDirectory(prefix="lock2nix-") as work:
            reports = {s: pip_report(s, lock, Path(work)) for s in PLATFORMS}
    args.out.write_text(json.dumps(build(lock, pyproject, reports), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
