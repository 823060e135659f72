"""Coverage benchmarks: covering designs (size found against the best known size, and seconds),
``nightly coverage --against HEAD`` on a big synthetic checkout, and the check of one big group.

Best known sizes of all-pairs covering arrays are from the published tables (CAN(2,k,v)); the
binary optimum is the Kleitman-Spencer bound. ``--against`` writes a git checkout of N registered
test files (two of them siblings of one group), then times the check and ``--against HEAD`` with a
warm catalog cache: clean, and with one sibling edited. ``big`` checks one group of 10x10x10x5
values whose test holds 1,000 or 5,000 rows, for pairs and triples, with and without
``--against HEAD``. Prints figures; nothing is asserted.

    python bench/coverage.py [moves] [--files N] [--only design|against|big]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.core.coverage.design import DEFAULT_MOVES, design  # noqa: E402

#: (dimensions, values, best known all-pairs size, or None where we do not cite one)
CASES = [(4, 3, 9), (5, 3, 11), (10, 2, 6), (13, 3, 15), (6, 4, 19), (5, 5, 25), (20, 2, 8), (10, 4, None), (30, 3, None)]

REGISTER = 'register_cuda_ci(est_time=60, suite="stage-b-2-gpu-h200", labels=["lora"])\n'
SIBLING = ('"""A LoRA sibling."""\nNUM_GPUS = 2\n\n# (name, backend, shared_outer, virtual_experts)\n'
           "_CONFIGS = [\n    {rows}\n]\n" + REGISTER)
GROUPS = """\
repos:
  fw:
    groups:
      - name: lora-moe
        tests: [tests/lora/test_moe_5layer.py, tests/lora/test_moe_6layer.py]
        dimensions:
          backend: [megatron, tilelang]
          layout:
            fields: [shared_outer, virtual_experts]
            values: {shared+virtual: [true, true], per-expert: [false, false]}
"""
FIVE, SIX = "tests/lora/test_moe_5layer.py", "tests/lora/test_moe_6layer.py"


def designs(moves: int) -> None:
    print(f"all-pairs designs, {moves} annealing moves per attempted size")
    print(f"{'dims x values':>14} {'found':>6} {'best known':>11} {'lower bd':>9} {'product':>12} {'seconds':>8}  method")
    for k, v, best in CASES:
        dims = [(f"d{i}", [str(j) for j in range(v)]) for i in range(k)]
        start = time.perf_counter()
        found = design(dims, moves=moves)
        took = time.perf_counter() - start
        print(f"{f'{k} x {v}':>14} {found.size:>6} {best or '-':>11} {found.lower_bound:>9} {found.cartesian:>12,} {took:>8.2f}  {found.method}")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@example.com", *args],
                   check=True, capture_output=True)


def _checkout(root: Path, files: int) -> tuple[Path, Path]:
    repo = root / "fw"
    for i in range(files - 2):
        path = repo / "tests" / f"area{i % 40}" / f"test_case_{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'"""Synthetic e2e test {i}."""\n\n{REGISTER}\n\ndef test_it():\n    assert {i} >= 0\n')
    (repo / "tests" / "lora").mkdir(parents=True)
    (repo / FIVE).write_text(SIBLING.format(rows="('m-shared', 'megatron', True, True), ('t-per', 'tilelang', False, False),"))
    (repo / SIX).write_text(SIBLING.format(rows="('m-per', 'megatron', False, False), ('t-shared', 'tilelang', True, True),"))
    _git(repo, "init", "-q")
    _git(repo, "add", "tests")
    _git(repo, "commit", "-q", "-m", "synthetic")
    groups = root / "coverage.yaml"
    groups.write_text(GROUPS)
    return repo, groups


def _timed(argv: list[str]) -> tuple[float, int]:
    from pipelines.cli import main

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return time.perf_counter() - start, code


def against(files: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["NIGHTLY_HOME"] = str(root / "home")
        repo, groups = _checkout(root, files)
        check = ["coverage", "--repo", str(repo), "--groups", str(groups)]
        _timed(check)  # warms the catalog cache, as a second run on a checkout finds it
        print(f"\nnightly coverage on {files:,} registered test files (warm catalog cache), seconds:")
        for what, argv, edit in [("check", check, None), ("--against HEAD, clean tree", [*check, "--against", "HEAD"], None),
                                 ("--against HEAD, one sibling disabled and edited", [*check, "--against", "HEAD"], SIX)]:
            if edit:
                text = (repo / edit).read_text().replace('labels=["lora"])', 'labels=["lora"], disabled="flaky")')
                (repo / edit).write_text(text + "# edited\n")
            took, code = _timed(argv)
            print(f"  {what:<48} {took:>6.2f}  (exit {code})")


BIG_GROUPS = """\
repos:
  big:
    groups:
      - name: huge
        strength: {strength}
        tests: [tests/test_big.py]
        dimensions:
          a: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
          b: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
          c: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
          d: [0, 1, 2, 3, 4]
"""


def big() -> None:
    """One group of 10x10x10x5 values: 1,000 rows (d follows a+b+c) or all 5,000, pairs and triples."""
    print("\nnightly coverage on one group of 10x10x10x5 values (warm catalog cache), seconds:")
    print(f"  {'rows':>5} {'strength':>8} {'check':>7} {'--against HEAD':>15}")
    for rows in (1000, 5000):
        if rows == 1000:
            values = [(a, b, c, (a + b + c) % 5) for a, b, c in itertools.product(range(10), repeat=3)]
        else:
            values = list(itertools.product(range(10), range(10), range(10), range(5)))
        body = "".join(f"    ('r{i}', {a}, {b}, {c}, {d}),\n" for i, (a, b, c, d) in enumerate(values))
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            os.environ["NIGHTLY_HOME"] = str(root / "home")
            repo = root / "big"
            (repo / "tests").mkdir(parents=True)
            (repo / "tests" / "test_big.py").write_text(f"{REGISTER}# (name, a, b, c, d)\n_CONFIGS = [\n{body}]\n")
            _git(repo, "init", "-q")
            _git(repo, "add", "tests")
            _git(repo, "commit", "-q", "-m", "big")
            for strength in (2, 3):
                groups = root / f"coverage{strength}.yaml"
                groups.write_text(BIG_GROUPS.format(strength=strength))
                check = ["coverage", "--repo", str(repo), "--groups", str(groups)]
                _timed(check)  # warms the catalog cache
                took, _ = _timed(check)
                against_took, _ = _timed([*check, "--against", "HEAD"])
                print(f"  {rows:>5,} {strength:>8} {took:>7.2f} {against_took:>15.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("moves", nargs="?", type=int, default=DEFAULT_MOVES, help="annealing moves per attempted size")
    parser.add_argument("--files", type=int, default=2000, help="test files of the --against checkout (default 2000)")
    parser.add_argument("--only", choices=("design", "against", "big"), help="run one of the benchmarks")
    args = parser.parse_args()
    if args.only in (None, "design"):
        designs(args.moves)
    if args.only in (None, "against"):
        against(args.files)
    if args.only in (None, "big"):
        big()


if __name__ == "__main__":
    main()
