"""A character bigram "model", a greedy decoder, a request scheduler and a matmul kernel.

Everything is pure Python and deterministic so the example's tests run anywhere in seconds.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict, deque

CORPUS = (
    "the quick brown fox jumps over the lazy dog. the dog sleeps in the sun. "
    "a fox and a dog share the road; the road is long and the sun is hot. "
) * 8


def tokenize(text: str) -> list[int]:
    return [ord(c) for c in text]


def detokenize(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids)


class Bigram:
    """Next-token counts; the most frequent follower wins (ties by code point)."""

    def __init__(self, text: str = CORPUS):
        follow: dict[int, Counter] = defaultdict(Counter)
        ids = tokenize(text)
        for a, b in zip(ids, ids[1:], strict=False):
            follow[a][b] += 1
        self.best = {a: min(c, key=lambda b: (-c[b], b)) for a, c in follow.items()}

    def generate(self, prompt: str, max_new: int) -> str:
        ids = tokenize(prompt)
        for _ in range(max_new):
            nxt = self.best.get(ids[-1])
            if nxt is None:
                break
            ids.append(nxt)
        return detokenize(ids)


def serve(model: Bigram, prompts: list[str], max_new: int, batch: int) -> list[str]:
    """Continuous batching, simplified: at most ``batch`` requests in flight, results in request order."""
    queue = deque(enumerate(prompts))
    out: dict[int, str] = {}
    while queue:
        running = [queue.popleft() for _ in range(min(batch, len(queue)))]
        for i, prompt in running:
            out[i] = model.generate(prompt, max_new)
    return [out[i] for i in range(len(prompts))]


def matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    cols = list(zip(*b, strict=True))
    return [[sum(x * y for x, y in zip(row, col, strict=True)) for col in cols] for row in a]


def matrix(n: int, m: int, seed: int) -> list[list[float]]:
    state = seed
    rows = []
    for _ in range(n):
        row = []
        for _ in range(m):
            state = (state * 1103515245 + 12345) % 2**31
            row.append((state % 1000) / 1000.0 - 0.5)
        rows.append(row)
    return rows


def visible_gpus() -> int | None:
    """How many GPUs the runner gave this test (None when it gave no CUDA_VISIBLE_DEVICES)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    return None if value is None else len([v for v in value.split(",") if v.strip()])


def require(ok: bool, what: str) -> None:
    print(("ok: " if ok else "FAILED: ") + what, flush=True)
    if not ok:
        raise SystemExit(1)
