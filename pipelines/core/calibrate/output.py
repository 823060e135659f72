"""Writing calibration's files: checked before anything is touched, and never half written.

A command that rewrites the checkout and then fails on its patch path leaves a maintainer with
edits and no record of them, so every output path is checked first (``output_problem``), and
each file is written through a temporary file in its own folder and renamed into place, with the
mode a plain write would give it (0666 less the umask) or, replacing a file, that file's mode.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def output_problem(path: Path | str, flag: str) -> str:
    """``path: flag: what is wrong; how to fix`` when ``path`` cannot take a file, else ""."""
    path = Path(path)
    if path.is_symlink():  # written through (write_atomic): the target's folder must take it
        try:
            path = path.resolve(strict=False)
        except (OSError, RuntimeError) as exc:
            return f"{path}: {flag}: a symlink that cannot be followed ({exc}); fix the link or give another path"
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
    """Write through a temporary file in the same folder and rename: readers never see half a file.
    A symlink is written through: its target (resolved once) is replaced and the link stays."""
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp makes 0600 files; a report or patch must be as readable as any file the user makes
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~current_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def current_umask() -> int:
    """The process umask, read without changing it where Linux shows it (another thread may be
    creating files); elsewhere set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_problem(path: Path | str, exc: OSError) -> str:
    """A failed write as ``path: cannot write (reason); how to fix``."""
    return (f"{path}: cannot write ({exc.strerror or exc}); free space or fix permissions there, or give "
            "another path; nothing after this file was written")


#: what a patch says about its hunks, on the line before them (calibrate.patch)
WHOLE_FILES = ("each file is given whole, its last line restated: git apply takes this patch only on the files as "
               "the evidence's revision holds them, byte for byte")


def remove_stale_patch(path: Path | str) -> str:
    """Remove an earlier run's patch at ``path`` when this run has nothing to change, so that
    ``git apply`` never applies last week's edits; returns what was done, for the message.
    A file that does not look like a patch is kept (nothing is lost) and named."""
    path = Path(path)
    if not path.is_file():
        return ""
    try:
        head = path.read_bytes()[:200].decode("utf-8", "replace")
    except OSError as exc:
        return f"; {path} from an earlier run is still there and cannot be read ({exc.strerror or exc}); remove it"
    if head and not head.startswith(("# left alone: ", f"# {WHOLE_FILES[:40]}", "--- a/", "diff --git ")):
        return f"; {path} is there but is not a calibrate patch, so it is kept; do not `git apply` it"
    try:
        path.unlink()
    except OSError as exc:
        return f"; the patch from an earlier run is still there ({exc.strerror or exc}); remove it before `git apply`"
    return "; removed the patch an earlier run left there"
