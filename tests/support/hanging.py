"""Waiting for the example's hanging test (``MINIRL_HANG``) to hang, from what the night wrote, never a fixed time."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest


def hanging_record(home: Path, test_id: str, proc: subprocess.Popen, said: Callable[[], str],
                   wait_s: float = 600, other_than: str | None = None) -> dict:
    """The running record of ``test_id`` once its log says it hangs (past its last print: a test that
    prints after its night died gets a broken pipe); fails with ``said()`` (the night's output) if
    ``proc`` ends first or the test never hangs within ``wait_s``. ``other_than``: a run id whose
    record does not count (a dead night's, before it is reaped)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for f in sorted((home / "running").glob("*.json")) if (home / "running").is_dir() else ():
            try:
                record = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            log = Path(record.get("log_path") or "/nonexistent")
            if record.get("test_id") == test_id and record.get("pid") and log.is_file() \
                    and (other_than is None or record.get("run_id") != other_than) \
                    and "hanging on purpose" in log.read_text(errors="replace"):
                return record
        if proc.poll() is not None:
            pytest.fail(f"the night ended before {test_id} hung:\n{said()[-3000:]}")
        time.sleep(0.3)
    pytest.fail(f"{test_id} never hung:\n{said()[-3000:]}")
