"""Designing matrices: the fewest configurations found that cover every required cell.

A covering array search. Start from the smallest of: a greedy row-by-row construction (each new
row, the best of a few candidates, covers the most still-uncovered cells), an orthogonal array
for dimensions of at most p values with p prime and at most p+1 dimensions (pairs only), and the
binary construction whose columns are the ceil(N/2)-subsets of N-1 rows (pairs of two-valued
dimensions, the known optimum). Then shrink: drop the least useful row and let simulated
annealing re-cover what it covered; repeat until it fails or the size meets the lower bound
(the product of the largest required value counts). Deterministic for a seed.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from pipelines.core.coverage.model import Cell

#: annealing moves per attempted size; more finds smaller designs for big matrices, slower
DEFAULT_MOVES = 20_000


@dataclass(frozen=True)
class Design:
    """The configurations found, as value indices per dimension, and what they leave uncovered."""

    dims: tuple[tuple[str, tuple[str, ...]], ...]
    strength: int
    rows: tuple[tuple[int, ...], ...]
    cells: tuple[Cell, ...]
    uncovered: tuple[Cell, ...]
    lower_bound: int
    method: str

    @property
    def size(self) -> int:
        return len(self.rows)

    @property
    def cartesian(self) -> int:
        return math.prod(len(values) for _, values in self.dims)

    def configuration(self, i: int) -> dict[str, str]:
        return {name: values[v] for (name, values), v in zip(self.dims, self.rows[i], strict=True)}

    def covered_by(self, cell: Cell) -> tuple[int, ...]:
        return tuple(i for i in range(self.size) if all(self.configuration(i)[d] == v for d, v in zip(cell.dims, cell.values, strict=True)))


class _State:
    """Rows plus, per required column subset, how many rows cover each value combination."""

    def __init__(self, levels: Sequence[int], subsets: Sequence[tuple[int, ...]], rows: Sequence[Sequence[int]]):
        self.levels, self.subsets = list(levels), list(subsets)
        self.mult = [[math.prod(levels[c] for c in s[j + 1:]) for j in range(len(s))] for s in subsets]
        self.weight = [dict(zip(s, m, strict=True)) for s, m in zip(subsets, self.mult, strict=True)]
        self.by_col: list[list[int]] = [[i for i, s in enumerate(subsets) if c in s] for c in range(len(levels))]
        self.counts = [[0] * math.prod(levels[c] for c in s) for s in subsets]
        self.rows: list[list[int]] = []
        #: per row, its cell index in each subset (kept in step with the row)
        self.at: list[list[int]] = []
        for row in rows:
            self.rows.append(list(row))
            self.at.append([self.index(s, row) for s in range(len(subsets))])
            for s, i in enumerate(self.at[-1]):
                self.counts[s][i] += 1
        self.open = [(s, i) for s in range(len(subsets)) for i, n in enumerate(self.counts[s]) if n == 0]
        self.where = {cell: k for k, cell in enumerate(self.open)}
        self._affected: dict[tuple[int, ...], list[int]] = {}

    def index(self, s: int, row: Sequence[int]) -> int:
        return sum(row[c] * m for c, m in zip(self.subsets[s], self.mult[s], strict=True))

    def decode(self, s: int, index: int) -> list[int]:
        return [(index // m) % self.levels[c] for c, m in zip(self.subsets[s], self.mult[s], strict=True)]

    def affected(self, cols: tuple[int, ...]) -> list[int]:
        if cols not in self._affected:
            self._affected[cols] = sorted({s for c in cols for s in self.by_col[c]})
        return self._affected[cols]

    def _cover(self, s: int, i: int) -> int:
        self.counts[s][i] += 1
        if self.counts[s][i] > 1:
            return 0
        k, last = self.where.pop((s, i)), self.open.pop()
        if last != (s, i):
            self.open[k], self.where[last] = last, k
        return -1

    def _uncover(self, s: int, i: int) -> int:
        self.counts[s][i] -= 1
        if self.counts[s][i]:
            return 0
        self.where[(s, i)] = len(self.open)
        self.open.append((s, i))
        return 1

    def delta(self, r: int, cols: tuple[int, ...], vals: Sequence[int]) -> int:
        """The change in uncovered cells ``set`` would make, without making it."""
        row, at, delta = self.rows[r], self.at[r], 0
        for s in self.affected(cols):
            weights, counts = self.weight[s], self.counts[s]
            old = new = at[s]
            for c, v in zip(cols, vals, strict=True):
                if c in weights:
                    new += (v - row[c]) * weights[c]
            if new != old:
                delta += (counts[old] == 1) - (counts[new] == 0)
        return delta

    def set(self, r: int, cols: tuple[int, ...], vals: Sequence[int]) -> int:
        """Write ``vals`` into row ``r`` at ``cols``; returns the change in uncovered cells."""
        row, at = self.rows[r], self.at[r]
        for c, v in zip(cols, vals, strict=True):
            row[c] = v
        delta = 0
        for s in self.affected(cols):
            old, new = at[s], self.index(s, row)
            if new != old:
                at[s] = new
                delta += self._uncover(s, old) + self._cover(s, new)
        return delta

    def add(self, row: list[int]) -> None:
        self.rows.append(row)
        self.at.append([self.index(s, row) for s in range(len(self.subsets))])
        for s, i in enumerate(self.at[-1]):
            self._cover(s, i)

    def gain(self, row: Sequence[int | None], cols_fixed: set[int], c: int) -> int:
        return sum(1 for s in self.by_col[c] if all(x in cols_fixed for x in self.subsets[s])
                   and self.counts[s][self.index(s, row)] == 0)  # type: ignore[arg-type]


def _greedy(levels: Sequence[int], subsets: Sequence[tuple[int, ...]], rng: random.Random,
            max_rows: int | None = None, candidates: int = 12) -> list[list[int]]:
    state = _State(levels, subsets, [])
    while state.open and (max_rows is None or len(state.rows) < max_rows):
        best, best_gain = None, -1
        for _ in range(candidates):
            s, i = state.open[rng.randrange(len(state.open))]
            row: list[int | None] = [None] * len(levels)
            for c, v in zip(subsets[s], state.decode(s, i), strict=True):
                row[c] = v
            fixed = set(subsets[s])
            rest = [c for c in range(len(levels)) if row[c] is None]
            rng.shuffle(rest)
            for c in rest:
                fixed.add(c)
                scores = []
                for v in range(levels[c]):
                    row[c] = v
                    scores.append(state.gain(row, fixed, c))
                top = max(scores)
                row[c] = rng.choice([v for v, g in enumerate(scores) if g == top])
            full = [int(v) for v in row]  # type: ignore[arg-type]
            gain = sum(1 for t in range(len(subsets)) if state.counts[t][state.index(t, full)] == 0)
            if gain > best_gain:
                best, best_gain = full, gain
        state.add(best)  # type: ignore[arg-type]
    return state.rows


def _anneal(rows: Sequence[Sequence[int]], levels: Sequence[int], subsets: Sequence[tuple[int, ...]],
            rng: random.Random, moves: int) -> tuple[list[list[int]], int]:
    """Re-cover open cells by rewriting a row's columns at one open cell; worse moves by temperature."""
    state = _State(levels, subsets, rows)
    if not state.rows:
        return [], len(state.open)
    best_rows, best_open = [list(r) for r in state.rows], len(state.open)
    temperature = 1.0
    for _ in range(moves):
        if not state.open:
            return state.rows, 0
        s, i = state.open[rng.randrange(len(state.open))]
        cols, vals = state.subsets[s], state.decode(s, i)
        choice, choice_delta = 0, None
        for r in rng.sample(range(len(state.rows)), min(8, len(state.rows))):
            delta = state.delta(r, cols, vals)
            if choice_delta is None or delta < choice_delta:
                choice, choice_delta = r, delta
        if choice_delta <= 0 or rng.random() < math.exp(-choice_delta / temperature):  # type: ignore[operator]
            state.set(choice, cols, vals)
            if len(state.open) < best_open:
                best_rows, best_open = [list(r) for r in state.rows], len(state.open)
        temperature = max(0.02, temperature * 0.9995)
    return best_rows, best_open


def _drop_least_useful(rows: Sequence[Sequence[int]], levels: Sequence[int], subsets: Sequence[tuple[int, ...]]) -> list[list[int]]:
    state = _State(levels, subsets, rows)
    unique = [sum(1 for s in range(len(subsets)) if state.counts[s][state.index(s, row)] == 1) for row in state.rows]
    drop = unique.index(min(unique))
    return [list(r) for k, r in enumerate(state.rows) if k != drop]


def _binary_rows(k: int) -> int:
    """The fewest rows covering all pairs of ``k`` two-valued columns (Kleitman-Spencer, Katona)."""
    return next(n for n in itertools.count(4) if math.comb(n - 1, math.ceil(n / 2)) >= k)


def _constructions(levels: Sequence[int], strength: int) -> list[tuple[str, list[list[int]]]]:
    k, out = len(levels), []
    if strength != 2 or k < 2:
        return out
    if max(levels) == 2:
        n = _binary_rows(k)
        columns = list(itertools.combinations(range(1, n), math.ceil(n / 2)))[:k]
        out.append(("binary construction", [[int(r in col) % levels[c] for c, col in enumerate(columns)] for r in range(n)]))
    p = next(p for p in itertools.count(max(levels)) if all(p % d for d in range(2, int(p**0.5) + 1)))
    if k <= p + 1:
        rows = []
        for a, b in itertools.product(range(p), repeat=2):
            full = [b, *((a + j * b) % p for j in range(p))]
            rows.append([v % levels[c] for c, v in enumerate(full[:k])])
        out.append(("orthogonal array", [list(r) for r in dict.fromkeys(map(tuple, rows))]))
    return out


def design(dims: Sequence[tuple[str, Sequence[str]]], strength: int = 2, require: Sequence[Sequence[str]] = (),
           max_rows: int | None = None, seed: int = 0, moves: int = DEFAULT_MOVES) -> Design:
    """The smallest design found (at most ``max_rows`` configurations when given) and what it leaves open."""
    names = [n for n, _ in dims]
    levels = [len(v) for _, v in dims]
    subsets = ([tuple(names.index(n) for n in t) for t in require] if require
               else list(itertools.combinations(range(len(levels)), min(strength, len(levels)))))
    lower = max((math.prod(levels[c] for c in s) for s in subsets), default=1)
    if not require and strength == 2 and len(levels) >= 2 and set(levels) == {2}:
        lower = _binary_rows(len(levels))  # Kleitman-Spencer: no fewer rows cover all pairs of k binary columns
    rng = random.Random(seed)
    candidates = [*(_constructions(levels, strength) if not require else []), ("greedy", _greedy(levels, subsets, rng))]
    method, best = min(candidates, key=lambda mc: len(mc[1]))
    while len(best) > lower:
        rows, still_open = _anneal(_drop_least_useful(best, levels, subsets), levels, subsets, rng, moves)
        if still_open:
            break
        best, method = rows, method if method.endswith("annealing") else f"{method} + annealing"
    if max_rows is not None and len(best) > max_rows:
        start = _greedy(levels, subsets, rng, max_rows=max_rows)
        best, _ = _anneal(start, levels, subsets, rng, moves) if start else ([], 0)
        method = f"greedy + annealing within {max_rows}"
    state = _State(levels, subsets, best)
    cells = [Cell(tuple(names[c] for c in s), tuple(dims[c][1][v] for c, v in zip(s, state.decode(si, i), strict=True)))
             for si, s in enumerate(subsets) for i in range(len(state.counts[si]))]
    uncovered = [Cell(tuple(names[c] for c in subsets[si]),
                      tuple(dims[c][1][v] for c, v in zip(subsets[si], state.decode(si, i), strict=True)))
                 for si, i in sorted(state.open)]
    return Design(tuple((n, tuple(v)) for n, v in dims), strength, tuple(tuple(r) for r in best),
                  tuple(cells), tuple(uncovered), lower, method)
