"""Prompt/response datasets (JSON lines) and the training windows built from them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from minirl.model import BOS, EOS, PAD, encode


@dataclass(frozen=True)
class Example:
    prompt: str
    response: str


@dataclass(frozen=True)
class Windows:
    """Supervised next-token windows: contexts [n, k] and the response token that follows each."""

    contexts: np.ndarray
    targets: np.ndarray

    def __len__(self) -> int:
        return len(self.targets)


def load_dataset(folder: str | Path, split: str = "train") -> list[Example]:
    """Read `<folder>/<split>.jsonl`; a bad row is reported as path:line."""
    path = Path(folder) / f"{split}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: dataset split not found; run prepare() (hf_download_dataset) first")
    examples = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            example = Example(str(row["prompt"]), str(row["response"]))
            encode(example.prompt + example.response)
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(
                f"{path}:{lineno}: row: {err}; each row needs string 'prompt' and 'response'"
            ) from None
        examples.append(example)
    if not examples:
        raise ValueError(f"{path}: no rows; regenerate the hub with hub/generate.py")
    return examples


def split_eval(examples: list[Example], eval_every: int = 5) -> tuple[list[Example], list[Example]]:
    """Every `eval_every`-th example is held out, so both halves cover the whole distribution."""
    train = [e for i, e in enumerate(examples) if i % eval_every]
    held = [e for i, e in enumerate(examples) if not i % eval_every]
    return train, held


def prompt_context(prompt: str, k: int) -> list[int]:
    """The last k tokens of <bos> + prompt, left-padded."""
    ids = [PAD] * k + [BOS] + encode(prompt)
    return ids[-k:]


def build_windows(examples: list[Example], k: int) -> Windows:
    """One window per response token (and the closing <eos>); prompt tokens carry no loss."""
    contexts, targets = [], []
    for ex in examples:
        seq = [PAD] * k + [BOS] + encode(ex.prompt)
        for token in [*encode(ex.response), EOS]:
            contexts.append(seq[-k:])
            targets.append(token)
            seq.append(token)
    return Windows(np.array(contexts, np.int64), np.array(targets, np.int64))
