"""The retention of the home's night logs: ``<home>/logs/<night>/`` of nights older than the last N are removed.

Each night writes its attempts' logs (up to the 20 MB cap each) under ``<home>/logs/<night>/`` and
nothing removed them: a flood night left 641 MB, a normal 100-test night 61 MB, night after night.
When a night starts it removes the folders of nights older than the deployment's last
``keep_log_nights`` (assets/cluster.yaml, default 30; 0 keeps every night), never a night still
running: each night holds a lock on ``.running.lock`` in its own folder for as long as its process
lives (the kernel drops it when the process dies, ``kill -9`` included), and a night whose local
attempts are still running (``<home>/running/``, live owner) is kept too. Only folders named as a
night is named (``2026-12-04T165637Z-a6314ba1``) directly under ``<home>/logs/`` are ever removed:
``logs/builds/`` and anything else there are left alone. S3 copies are kept by the bucket's own
lifecycle rule (docs/storage.md), never deleted from here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

#: a night's name (Night.night): when it started, to the second, and 8 characters of its run id
NIGHT_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{6}Z-[A-Za-z0-9]{1,8}$")
RUNNING_LOCK = ".running.lock"


def hold_running(logs: Path, night: str) -> BinaryIO:
    """Make ``logs/<night>/`` holding an exclusive lock on its :data:`RUNNING_LOCK`, kept while the
    returned file is open (the night's process lives). The folder is made under another name and
    renamed once locked, so another night's retention never sees it unlocked."""
    folder = logs / night
    if folder.is_dir():  # made by an earlier start of the same run
        f = open(folder / RUNNING_LOCK, "ab")  # noqa: SIM115 - held for the night's life
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return f
    starting = logs / f".{night}.starting-{os.getpid()}"
    starting.mkdir(parents=True)
    f = open(starting / RUNNING_LOCK, "ab")  # noqa: SIM115 - held for the night's life
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.rename(starting, folder)
    return f


def _locked(folder: Path) -> bool:
    """Whether a live process holds ``folder``'s running lock (its night still runs)."""
    try:
        fd = os.open(folder / RUNNING_LOCK, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False  # no lock file: a night of an earlier version, or one that never ran a test
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _size(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _amount(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.0f} kB"


@dataclass
class Pruned:
    """What one retention pass did."""

    keep: int
    removed: list[str] = field(default_factory=list)
    freed_bytes: int = 0
    #: older than the last ``keep`` but still running, so left
    running: list[str] = field(default_factory=list)
    #: ``folder: why`` of each that could not be removed
    failed: list[str] = field(default_factory=list)

    def line(self, logs: Path) -> str:
        """The one line the night says ("" when it did nothing)."""
        if not (self.removed or self.failed):
            return ""
        said = (f"removed the logs of {len(self.removed)} night(s) older than the last {self.keep} "
                f"({_amount(self.freed_bytes)}) from {logs}")
        if self.running:
            said += f"; kept {len(self.running)} older night(s) still running ({', '.join(self.running)})"
        if self.failed:
            said += (f"; could not remove {len(self.failed)}: {'; '.join(self.failed)} "
                     "(check the folders' permissions; the next night tries again)")
        return said


def prune(logs: Path, tonight: str, keep: int, running: set[str]) -> Pruned:
    """Remove the folders of nights older than the last ``keep`` (tonight's counted) from ``logs``,
    except tonight's, those in ``running`` and those whose running lock is held."""
    done = Pruned(keep)
    if keep <= 0:
        return done
    try:
        names = sorted((e.name for e in os.scandir(logs)
                        if NIGHT_NAME.match(e.name) and e.is_dir(follow_symlinks=False) and e.name != tonight),
                       reverse=True)
    except FileNotFoundError:
        return done
    except OSError as exc:
        done.failed.append(f"{logs}: {exc.strerror or exc}")
        return done
    for name in names[max(keep - 1, 0):]:  # newest first: the first keep - 1 stay beside tonight's
        folder = logs / name
        if name in running or _locked(folder):
            done.running.append(name)
            continue
        size = _size(folder)
        problems: list[str] = []

        def onerror(_fn, path, exc_info, problems=problems):
            if not isinstance(exc_info[1], FileNotFoundError):  # another night removing it at once
                problems.append(f"{path}: {exc_info[1].strerror or exc_info[1]}")

        shutil.rmtree(folder, onerror=onerror)
        if problems:
            done.failed.append(problems[0])
        else:
            done.removed.append(name)
            done.freed_bytes += size
    return done
