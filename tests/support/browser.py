"""One headless Chromium at a time, for every test that looks at a page (Dagster UI, night report).

Why: CI runs on a 2-CPU machine that may be loaded. Several Chromium processes at once starve each
other (and the server they read) until every one of them times out, so pages are rendered one
after another, and a lock file keeps two test modules (or two checkouts on one machine) from
running Chromium at the same time. A page has no limit of its own: a session has one total
limit, so a slow page can use what the fast ones left.

    from tests.support import browser

    dom = browser.dump_dom(url)                         # one page, its own short session
    with browser.session(total_s=600) as pages:         # several pages, one lock, one limit
        text = browser.visible_text(pages.dump_dom(url))
        pages.screenshot(url, tmp_path / "graph.png", size=(1400, 900))

``budget_ms`` is Chromium's virtual time budget: how long the page's scripts may run before the
DOM is taken. Virtual time only advances while the page is idle, so it does not shrink on a
loaded machine; the wall-clock limit (``total_s``) is only a guard against a hang.
"""

from __future__ import annotations

import contextlib
import fcntl
import html
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

VIRTUAL_TIME_MS = 15_000  # the Dagster UI needs ~5 s of its own time to fetch and draw a page
TOTAL_S = 600  # a page takes ~5-15 s idle and up to ~60 s on a loaded 2-CPU machine: a generous guard
LOCK = Path(tempfile.gettempdir()) / "nightly-e2e-chromium.lock"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage")


class BrowserError(AssertionError):
    """Chromium failed or ran out of time; the message names the page and the tail of its stderr."""


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        raise BrowserError("Chromium is missing: `make system-deps` installs it (apt-get install -y chromium)")
    return path


def visible_text(dom: str) -> str:
    """The text a reader sees: scripts and styles dropped, tags removed, whitespace collapsed."""
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S | re.I)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom)))


@dataclass
class Session:
    """Pages rendered one at a time under the lock, all within one wall-clock limit."""

    total_s: float
    deadline: float
    pages: list[tuple[str, float]] = field(default_factory=list)  # (url, seconds) of each page rendered

    def dump_dom(self, url: str, budget_ms: int = VIRTUAL_TIME_MS) -> str:
        """The page's DOM after ``budget_ms`` of virtual time, as HTML text."""
        return self._run(url, ("--dump-dom",), budget_ms).stdout

    def screenshot(self, url: str, path: Path, size: tuple[int, int] = (1400, 900),
                   budget_ms: int = VIRTUAL_TIME_MS) -> Path:
        """A PNG of the page at ``size`` (width, height) pixels, written to ``path``."""
        path = Path(path)
        out = self._run(url, (f"--window-size={size[0]},{size[1]}", f"--screenshot={path}"), budget_ms)
        if not path.is_file():
            raise BrowserError(f"chromium wrote no screenshot of {url} to {path}:\n{out.stderr[-2000:]}")
        return path

    def _run(self, url: str, action: tuple[str, ...], budget_ms: int) -> subprocess.CompletedProcess:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise BrowserError(f"no time left for {url}: the session's {self.total_s:.0f} s went to {self._done()}")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
            argv = [chromium(), *FLAGS, f"--virtual-time-budget={budget_ms}", f"--user-data-dir={profile}",
                    *action, url]
            # its own process group: on a timeout the renderer and GPU helpers go with it
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
            try:
                stdout, stderr = proc.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                raise BrowserError(f"chromium did not finish {url} within the {left:.0f} s left of the session's "
                                   f"{self.total_s:.0f} s (load average {os.getloadavg()[0]:.1f}; "
                                   f"earlier pages: {self._done()})") from None
            finally:
                _kill_group(proc)  # helpers a finished browser left behind
        self.pages.append((url, time.monotonic() - started))
        if proc.returncode != 0:
            raise BrowserError(f"chromium exited with {proc.returncode} on {url}:\n{stderr[-2000:]}")
        return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)

    def _done(self) -> str:
        return ", ".join(f"{url} {s:.0f} s" for url, s in self.pages) or "none"


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


@contextlib.contextmanager
def session(total_s: float = TOTAL_S) -> Iterator[Session]:
    """Hold the machine's one browser slot; the ``total_s`` limit starts once the slot is ours.

    Waiting for the slot is bounded too (``total_s``): whoever holds it is bounded by its own limit.
    """
    with LOCK.open("a") as lock:
        give_up = time.monotonic() + total_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > give_up:
                    raise BrowserError(f"another test held the browser lock {LOCK} for over {total_s:.0f} s") from None
                time.sleep(0.2)
        try:
            yield Session(total_s, time.monotonic() + total_s)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def dump_dom(url: str, budget_ms: int = VIRTUAL_TIME_MS, total_s: float = TOTAL_S) -> str:
    """One page's DOM in a session of its own."""
    with session(total_s) as pages:
        return pages.dump_dom(url, budget_ms)


def screenshot(url: str, path: Path, size: tuple[int, int] = (1400, 900), budget_ms: int = VIRTUAL_TIME_MS,
               total_s: float = TOTAL_S) -> Path:
    """One page's PNG in a session of its own."""
    with session(total_s) as pages:
        return pages.screenshot(url, path, size, budget_ms)
