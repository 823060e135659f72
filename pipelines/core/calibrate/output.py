"""Writing calibration's files: checked before anything is touched, and never half written.

A command that rewrites the checkout and then fails on its patch path leaves a maintainer with
edits and no record of them, so every output path is checked first (``output_problem``), and
each file is written through a temporary file in its own folder and renamed into place.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def output_problem(path: Path | str, flag: str) -> str:
    """``path: flag: what is wrong; how to fix`` when ``path`` cannot take a file, else ""."""
    path = Path(path)
    if path.is_dir():
        return f"{path}: {flag}: is a folder; give a file path such as {path / _example(flag)}"
    if path.exists() and not path.is_file():
        return f"{path}: {flag}: is not a regular file; give the path of a file to write"
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{path}: {flag}: {folder} is a file, not a folder; choose a path in a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{path}: {flag}: the folder {folder} is not writable; choose a writable folder"
    return ""


def _example(flag: str) -> str:
    return {"--patch": "est_time.patch", "--evidence": "evidence.csv"}.get(flag, "output.txt")


def write_atomic(path: Path | str, text: str) -> None:
    """Write through a temporary file in the same folder and rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_problem(path: Path | str, exc: OSError) -> str:
    """A failed write as ``path: cannot write (reason); how to fix``."""
    return (f"{path}: cannot write ({exc.strerror or exc}); free space or fix permissions there, or give "
            "another path; nothing after this file was written")
