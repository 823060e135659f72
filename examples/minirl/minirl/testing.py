"""Helpers the e2e tests' prepare() uses: downloads, checkpoint conversion, path mapping.

Tests write the paths of the real CI container literally (`/root/models/...`,
`/root/datasets/...`). `host_path` maps the `/root` prefix onto `$MINIRL_ROOT` when it is set,
so the same test runs in a container (unset: /root) and under the nightly orchestrator (set to
its asset cache). Downloads read a local hub folder (`$MINIRL_HUB`) instead of the network.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CONVERTER = "tools/convert_hf_to_torch_dist.py"
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_USAGE = "hf download <org/name> --local-dir DIR [--repo-type model|dataset]"


def host_path(path: str | os.PathLike) -> Path:
    """`/root/...` under `$MINIRL_ROOT` when set; any other path unchanged."""
    path = Path(path)
    root = os.environ.get("MINIRL_ROOT")
    if not root or not (path == Path("/root") or Path("/root") in path.parents):
        return path
    return Path(root) / path.relative_to("/root")


def _hub() -> Path:
    hub = os.environ.get("MINIRL_HUB")
    if not hub:
        raise RuntimeError("MINIRL_HUB is not set; point it at the local hub folder (examples/minirl/hub)")
    if not Path(hub).is_dir():
        raise RuntimeError(
            f"MINIRL_HUB={hub!r} is not a folder; point it at the local hub folder (examples/minirl/hub)"
        )
    return Path(hub)


def parse_hf_download(cmd: str) -> tuple[str, str, str]:
    """(repo_id, repo_type, local_dir) of an `hf download` command line, or ValueError."""
    try:
        argv = shlex.split(cmd)
    except ValueError as err:
        raise ValueError(f"exec_command: cannot parse {cmd!r} ({err}); expected `{_USAGE}`") from None
    if argv[:2] != ["hf", "download"] or len(argv) < 3 or argv[2].startswith("-"):
        raise ValueError(f"exec_command: {cmd!r} is not supported; expected `{_USAGE}`")
    repo_id, options, rest = argv[2], {}, argv[3:]
    while rest:
        flag, _, value = rest.pop(0).partition("=")
        if flag not in ("--local-dir", "--repo-type"):
            raise ValueError(f"exec_command: unsupported argument {flag!r} in {cmd!r}; expected `{_USAGE}`")
        if not value:
            if not rest:
                raise ValueError(f"exec_command: {flag} needs a value in {cmd!r}")
            value = rest.pop(0)
        options[flag] = value
    if not _REPO_ID.fullmatch(repo_id):
        raise ValueError(f"exec_command: repo id {repo_id!r} is not of the form org/name")
    repo_type = options.get("--repo-type", "model")
    if repo_type not in ("model", "dataset"):
        raise ValueError(f"exec_command: --repo-type {repo_type!r} is not model or dataset")
    if "--local-dir" not in options:
        raise ValueError(f"exec_command: {cmd!r} has no --local-dir; expected `{_USAGE}`")
    return repo_id, repo_type, options["--local-dir"]


def exec_command(cmd: str) -> None:
    """Run an `hf download` command line against the local hub (parsed with shlex, no shell)."""
    repo_id, repo_type, local_dir = parse_hf_download(cmd)
    src = _hub() / ("datasets" if repo_type == "dataset" else "models") / repo_id
    if not src.is_dir():
        raise FileNotFoundError(
            f"{src}: {repo_type} {repo_id!r} is not in the hub (MINIRL_HUB); regenerate it with hub/generate.py"
        )
    dest = host_path(local_dir)
    print(f"[minirl] hf download {repo_id} -> {dest}", flush=True)
    for file in sorted(p for p in src.rglob("*") if p.is_file()):
        target = dest / file.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        os.close(fd)
        shutil.copyfile(file, tmp)
        os.replace(tmp, target)


def hf_download_dataset(repo_id: str) -> str:
    """Download dataset `org/name` to /root/datasets/<name>; returns that (container) path."""
    local_dir = f"/root/datasets/{repo_id.split('/')[-1]}"
    exec_command(
        f"hf download {shlex.quote(repo_id)} --repo-type dataset --local-dir {shlex.quote(local_dir)}"
    )
    return local_dir


def converted_path(model_name: str, dir_dst: str = "/root") -> str:
    """Where convert_checkpoint puts a model (container path)."""
    return f"{dir_dst.rstrip('/')}/{model_name}_torch_dist"


def convert_checkpoint(
    model_name: str,
    megatron_model_type: str,
    num_gpus_per_node: int,
    multinode: bool = False,
    extra_args: str = "",
    dir_dst: str = "/root",
    hf_checkpoint: str | None = None,
) -> str:
    """Convert /root/models/<model_name> into <dir_dst>/<model_name>_torch_dist, once.

    Runs the converter as an argv list from the repository root. `multinode` only changes how
    a real framework launches the converter; the output is the same, so it is not passed on.
    """
    src = hf_checkpoint or f"/root/models/{model_name}"
    dst = converted_path(model_name, dir_dst)
    if host_path(dst).exists():
        print(f"[minirl] {host_path(dst)} exists; skipping conversion", flush=True)
        return dst
    argv = [
        sys.executable,
        CONVERTER,
        "--hf-checkpoint",
        str(host_path(src)),
        "--save",
        str(host_path(dst)),
        "--model-type",
        megatron_model_type,
        "--num-gpus",
        str(num_gpus_per_node),
        *shlex.split(extra_args),
    ]
    print(f"[minirl] converting{' (multinode)' if multinode else ''}: {shlex.join(argv)}", flush=True)
    done = subprocess.run(argv, cwd=REPO_ROOT, check=False)
    if done.returncode != 0 and (host_path(dst) / "metadata.json").is_file():
        print(f"[minirl] {host_path(dst)} was created concurrently; using it", flush=True)
    elif done.returncode != 0:
        raise RuntimeError(
            f"checkpoint conversion of {model_name} failed with exit {done.returncode}: {shlex.join(argv)}"
        )
    return dst
