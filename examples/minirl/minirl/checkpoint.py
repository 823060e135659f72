"""The two checkpoint formats: the hub format and the sharded "torch_dist"-like format.

Hub format (what `hf download` fetches): `config.json` + `weights.npz`.
torch_dist format (what training loads, written by tools/convert_hf_to_torch_dist.py):
  <dir>/latest_checkpointed_iteration.txt   the iteration number
  <dir>/metadata.json                       config, ranks, and per-tensor shape/dtype/splits
  <dir>/iter_<NNNNNNN>/__<rank>_0.distcp.npz one shard per rank: every tensor flattened and split
Both are written to a temporary sibling and renamed, so a reader never sees half a checkpoint.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from minirl.model import Params, TinyConfig

FORMAT = "minirl-torch-dist"


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be read; the message says which file and how to fix it."""


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """An .npz that np.load reads, with fixed zip timestamps so identical arrays give identical bytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue())


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        raise CheckpointError(f"{path}: not a readable .npz ({err}); re-download or re-convert it") from None


def write_hub(folder: Path, config: TinyConfig, params: Params) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config.to_json(), indent=2, sort_keys=True) + "\n")
    write_npz(folder / "weights.npz", params)


def read_hub(folder: str | Path) -> tuple[TinyConfig, Params]:
    """Config and weights of a downloaded model, checked against each other."""
    folder = Path(folder)
    for name in ("config.json", "weights.npz"):
        if not (folder / name).is_file():
            raise CheckpointError(
                f"{folder / name}: not found; a hub model folder holds config.json and weights.npz "
                f"(download it with `hf download minirl/<model> --local-dir {folder}`)"
            )
    try:
        config = TinyConfig.from_json(json.loads((folder / "config.json").read_text()))
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(
            f"{folder / 'config.json'}: invalid config ({err!r}); re-download the model"
        ) from None
    params = _read_npz(folder / "weights.npz")
    _check_shapes(folder / "weights.npz", config, params)
    return config, params


def _check_shapes(path: Path, config: TinyConfig, params: Params) -> None:
    from minirl.model import init_params

    expected = {k: v.shape for k, v in init_params(config, seed=0).items()}
    got = {k: v.shape for k, v in params.items()}
    if got != expected:
        raise CheckpointError(f"{path}: tensors {got} do not match config.json (expected {expected})")


def save_torch_dist(
    folder: str | Path,
    config: TinyConfig,
    params: Params,
    num_ranks: int,
    iteration: int = 0,
    extra: dict | None = None,
) -> Path:
    """Shard `params` across `num_ranks` and write them atomically to `folder` (which must not exist)."""
    folder = Path(folder)
    if num_ranks < 1:
        raise CheckpointError(f"num_ranks must be >= 1, got {num_ranks}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        iter_dir = tmp / f"iter_{iteration:07d}"
        iter_dir.mkdir()
        tensors = {}
        shards: list[dict[str, np.ndarray]] = [{} for _ in range(num_ranks)]
        for name in sorted(params):
            array = np.asarray(params[name])
            pieces = np.array_split(array.reshape(-1), num_ranks)
            tensors[name] = {
                "shape": list(array.shape),
                "dtype": str(array.dtype),
                "splits": [len(p) for p in pieces],
            }
            for rank, piece in enumerate(pieces):
                shards[rank][name] = piece
        for rank, shard in enumerate(shards):
            write_npz(iter_dir / f"__{rank}_0.distcp.npz", shard)
        metadata = {
            "format": FORMAT,
            "iteration": iteration,
            "num_ranks": num_ranks,
            "config": config.to_json(),
            "tensors": tensors,
            **(extra or {}),
        }
        (tmp / "metadata.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
        (tmp / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, folder)
        except OSError as err:
            raise CheckpointError(
                f"{folder}: cannot be created ({err.strerror}); remove it or choose another folder"
            ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def load_torch_dist(folder: str | Path) -> tuple[TinyConfig, Params, dict]:
    """Reassemble full tensors from all rank shards of the latest iteration."""
    folder = Path(folder)
    meta_path = folder / "metadata.json"
    if not meta_path.is_file():
        raise CheckpointError(
            f"{meta_path}: not found; {folder} is not a converted checkpoint "
            "(run prepare(), which calls convert_checkpoint())"
        )
    metadata = json.loads(meta_path.read_text())
    if metadata.get("format") != FORMAT:
        raise CheckpointError(
            f"{meta_path}: format {metadata.get('format')!r} is not {FORMAT!r}; re-convert it"
        )
    iteration = int((folder / "latest_checkpointed_iteration.txt").read_text().strip())
    shards = [
        _read_npz(folder / f"iter_{iteration:07d}" / f"__{rank}_0.distcp.npz")
        for rank in range(metadata["num_ranks"])
    ]
    params = {}
    for name, info in metadata["tensors"].items():
        pieces = [shard[name] for shard in shards]
        if [len(p) for p in pieces] != info["splits"]:
            raise CheckpointError(f"{folder}: shards of {name!r} do not match metadata.json; re-convert it")
        params[name] = np.concatenate(pieces).reshape(info["shape"]).astype(info["dtype"])
    return TinyConfig.from_json(metadata["config"]), params, metadata


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
