"""Headless Chromium for the report: a screenshot for the docs, the rendered DOM for tests.

One browser process at a time, argv lists only (never a shell string), a throwaway profile.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--virtual-time-budget=15000")


class BrowserError(RuntimeError):
    """Chromium is missing or failed; the message says what to do."""


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        raise BrowserError("Chromium is missing; install it with `apt-get install -y chromium` (`make system-deps`)")
    return path


def browse(page: Path, *action: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Run one headless Chromium on a local page with ``action`` flags (``--dump-dom``, ``--screenshot=...``)."""
    with tempfile.TemporaryDirectory(prefix="nightly-chromium-") as profile:
        try:
            out = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *action,
                                  Path(page).resolve().as_uri()],
                                 capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise BrowserError(f"chromium did not finish {page} within {timeout_s:g} s and was stopped; on a loaded "
                               "machine run the command again, or open the page in a browser") from exc
        except OSError as exc:
            raise BrowserError(f"chromium could not start ({exc.strerror}); reinstall it with "
                               "`apt-get install -y chromium` (`make system-deps`)") from exc
    if out.returncode != 0:
        said = next((line.strip() for line in reversed(out.stderr.splitlines()) if line.strip()), "no message")
        raise BrowserError(f"chromium exited {out.returncode} on {page}: {said[:300]}; check that "
                           f"`chromium --headless {' '.join(action)} {page}` works here (`make system-deps` installs it)")
    return out


def screenshot(page: Path, png: Path, width: int = 1300, height: int = 2200) -> Path:
    """A PNG of the top of the page (what a reader sees first)."""
    png = Path(png).resolve()
    try:
        png.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # the CLI checks first; this is the race where the folder changed since
        raise BrowserError(f"cannot write the screenshot {png} ({exc.strerror or exc}); give a writable path") from exc
    browse(page, f"--window-size={width},{height}", f"--screenshot={png}")
    if not png.exists() or png.stat().st_size == 0:
        raise BrowserError(f"chromium wrote no screenshot to {png}; check that "
                           f"`chromium --headless --screenshot=PNG {page}` works here")
    return png


def dump_dom(page: Path) -> str:
    """The page's DOM after layout, as Chromium renders it."""
    return browse(page, "--dump-dom").stdout
