"""Convert a hub checkpoint (config.json + weights.npz) into minirl's sharded torch_dist format.

    python tools/convert_hf_to_torch_dist.py --hf-checkpoint /root/models/tiny-lm \
        --save /root/models/tiny-lm_torch_dist --model-type tiny --num-gpus 4

Every tensor is flattened and split across --num-gpus rank shards. The output is written to a
temporary sibling folder and renamed into place, so an interrupted run leaves nothing behind.
Unknown extra arguments are accepted (real launchers pass their own) and recorded in
metadata.json. Exit 2 with a message on bad input.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minirl.checkpoint import CheckpointError, file_sha256, read_hub, save_torch_dist  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hf-checkpoint", required=True, help="hub model folder (config.json + weights.npz)")
    parser.add_argument("--save", required=True, help="output folder; must not exist yet")
    parser.add_argument("--model-type", required=True, help="must equal model_type in config.json")
    parser.add_argument("--num-gpus", type=int, required=True, help="number of rank shards to write")
    args, extra = parser.parse_known_args(argv)
    start = time.monotonic()
    src, dst = Path(args.hf_checkpoint), Path(args.save)
    try:
        if args.num_gpus < 1:
            raise CheckpointError(f"--num-gpus: {args.num_gpus} is not a positive number of ranks")
        if dst.exists():
            raise CheckpointError(f"--save: {dst} already exists; remove it or choose another folder")
        config, params = read_hub(src)
        if config.model_type != args.model_type:
            raise CheckpointError(
                f"--model-type: {args.model_type!r} does not match model_type {config.model_type!r} "
                f"in {src / 'config.json'}; pass --model-type {config.model_type}"
            )
        extra_meta = {
            "source": {"path": str(src), "weights_sha256": file_sha256(src / "weights.npz")},
            "extra_args": extra,
        }
        save_torch_dist(dst, config, params, args.num_gpus, iteration=0, extra=extra_meta)
    except CheckpointError as err:
        print(f"convert_hf_to_torch_dist: error: {err}", file=sys.stderr)
        return 2
    print(f"converted {src} -> {dst} ({args.num_gpus} shards, {time.monotonic() - start:.2f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
