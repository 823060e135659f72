"""Regenerate the local stand-in for the Hugging Face Hub, byte for byte.

    python hub/generate.py            # rewrite hub/models/** and hub/datasets/**
    python hub/generate.py --check    # exit 1 if the shipped files differ from a fresh build

Models are randomly initialized TinyLMs (fixed seeds); datasets are templated prompt/response
pairs. Everything is small enough to ship in the repository.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import sys
import tempfile
from pathlib import Path

HUB = Path(__file__).resolve().parent
sys.path.insert(0, str(HUB.parent))

import numpy as np  # noqa: E402
from minirl.checkpoint import write_hub  # noqa: E402
from minirl.model import TinyConfig, init_params  # noqa: E402

MODELS = {
    "minirl/tiny-lm": (TinyConfig(hidden=48), 11),
    "minirl/tiny-lm-wide": (TinyConfig(hidden=96), 12),
}
GREETINGS = [("hi", "hello"), ("hey", "hi"), ("yo", "hey"), ("hello", "hi there"), ("bye", "see you")]
NAMES = [
    "ann",
    "bob",
    "cy",
    "dan",
    "eve",
    "fay",
    "gus",
    "ida",
    "jo",
    "kim",
    "lu",
    "max",
    "ned",
    "ola",
    "pam",
    "quin",
    "rex",
    "sam",
    "tom",
    "uma",
    "vic",
    "wes",
    "xia",
    "yan",
    "zoe",
    "al",
    "bo",
    "cal",
    "dee",
    "eli",
]


def toy_math() -> list[dict]:
    """Sums of two numbers below 30: a closed task with an exact answer for rewards."""
    rows = [{"prompt": f"{a}+{b}=", "response": str(a + b)} for a in range(30) for b in range(30)]
    return _shuffled(rows, seed=1)


def toy_chat() -> list[dict]:
    """Greet-by-name exchanges: the reply starts by copying the name from the prompt."""
    rows = [{"prompt": f"{g} {n}!", "response": f"{n}, {r}."} for n in NAMES for g, r in GREETINGS]
    return _shuffled(rows, seed=2)


def _shuffled(rows: list[dict], seed: int) -> list[dict]:
    """A fixed permutation, so any every-n-th held-out split mixes all templates."""
    order = np.random.default_rng(seed).permutation(len(rows))
    return [rows[i] for i in order]


def build(root: Path) -> None:
    for repo_id, (config, seed) in MODELS.items():
        write_hub(root / "models" / repo_id, config, init_params(config, seed))
    for name, rows in (("toy-math", toy_math()), ("toy-chat", toy_chat())):
        folder = root / "datasets" / "minirl" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "train.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def differences(a: Path, b: Path) -> list[str]:
    files = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    return [
        str(f) for f in sorted(files) if not (b / f).is_file() or not filecmp.cmp(a / f, b / f, shallow=False)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    if not args.check:
        build(HUB)
        print(f"wrote {HUB / 'models'} and {HUB / 'datasets'}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp))
        stale = differences(Path(tmp), HUB)
    for name in stale:
        print(f"hub/{name}: differs from a fresh build; run python hub/generate.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
