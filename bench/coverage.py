"""Covering-design benchmark: size found against the best known size, and the time the search takes.

Best known sizes of all-pairs covering arrays are from the published tables (CAN(2,k,v)); the
binary optimum is the Kleitman-Spencer bound. Prints a table; nothing is asserted.
``python bench/coverage.py [moves]`` (default: the designer's default annealing moves).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.core.coverage.design import DEFAULT_MOVES, design  # noqa: E402

#: (dimensions, values, best known all-pairs size, or None where we do not cite one)
CASES = [(4, 3, 9), (5, 3, 11), (10, 2, 6), (13, 3, 15), (6, 4, 19), (5, 5, 25), (20, 2, 8), (10, 4, None), (30, 3, None)]


def main() -> None:
    moves = int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MOVES
    print(f"all-pairs designs, {moves} annealing moves per attempted size")
    print(f"{'dims x values':>14} {'found':>6} {'best known':>11} {'lower bd':>9} {'product':>12} {'seconds':>8}  method")
    for k, v, best in CASES:
        dims = [(f"d{i}", [str(j) for j in range(v)]) for i in range(k)]
        start = time.perf_counter()
        found = design(dims, moves=moves)
        took = time.perf_counter() - start
        print(f"{f'{k} x {v}':>14} {found.size:>6} {best or '-':>11} {found.lower_bound:>9} {found.cartesian:>12,} {took:>8.2f}  {found.method}")


if __name__ == "__main__":
    main()
