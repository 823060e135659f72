"""Dealing a design's configurations to sibling test files.

Any split covers the same cells; the useful one lets each sibling on its own exercise as many
values of every dimension as it can, so a failure in one file still points at one value.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence


def assign(rows: Sequence[Sequence[int]], tests: int, passes: int = 5) -> tuple[tuple[int, ...], ...]:
    """Configuration indices per sibling test, balanced, and swapped so siblings share few values.

    So every sibling on its own exercises as many values of each dimension as it can: two
    siblings of a 2x2 grid get the two diagonals.
    """
    dealt = [list(range(t, len(rows), tests)) for t in range(tests)]

    def shared(i: int, members: Sequence[int]) -> int:
        return sum(a == b for j in members if j != i for a, b in zip(rows[i], rows[j], strict=True))

    for _ in range(passes):
        improved = False
        for a, b in itertools.combinations(range(tests), 2):
            for x, i in enumerate(dealt[a]):
                for y, j in enumerate(dealt[b]):
                    now = shared(i, dealt[a]) + shared(j, dealt[b])
                    rest_a, rest_b = [k for k in dealt[a] if k != i], [k for k in dealt[b] if k != j]
                    if shared(j, rest_a) + shared(i, rest_b) < now:
                        dealt[a][x], dealt[b][y], i = j, i, j
                        improved = True
        if not improved:
            break
    return tuple(tuple(sorted(d)) for d in dealt)
