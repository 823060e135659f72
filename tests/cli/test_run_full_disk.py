"""``nightly run`` when the state folder's disk fills mid-night: Dagster's own storage fails too, and the
command still ends with one message and exit 4, never a stack, and the night's samples kept off that disk."""

from __future__ import annotations

import errno
import os
import sqlite3
import tempfile
import threading
from pathlib import Path

import pytest

from pipelines.cli import main

pytestmark = pytest.mark.slow  # a real night through Dagster


def sleepy_repo(root: Path) -> Path:
    """A framework checkout nobody configured, with two tests that pass at once."""
    (root / "tests/e2e").mkdir(parents=True)
    (root / "fw").mkdir()
    (root / "fw/__init__.py").write_text("")
    (root / "fw/ci_register.py").write_text(
        (Path(__file__).resolve().parents[2] / "examples/minirl/minirl/ci_register.py").read_text())
    for i in (1, 2):
        (root / f"tests/e2e/test_s{i}.py").write_text(
            "from fw.ci_register import register_cuda_ci\n"
            "register_cuda_ci(est_time=3, suite='stage-c-4-gpu-h200', labels=['short'])\n"
            "def execute():\n    pass\n"
            "if __name__ == '__main__':\n    execute()\n")
    return root


def test_a_disk_that_fills_mid_night_is_one_message_exit_4_and_the_samples_kept_off_that_disk(tmp_path, monkeypatch,
                                                                                              capsys):
    from dagster import DagsterInstance
    from sqlalchemy.exc import OperationalError

    from pipelines.core.calibrate import output
    from pipelines.core.history import HistoryError
    from pipelines.core.history.store import FileHistoryStore
    from pipelines.night import Night
    from pipelines.storage import state
    from pipelines.storage.s3 import decode_lines

    home, spare = tmp_path / "home", tmp_path / "spare"  # spare: $TMPDIR, on another disk
    spare.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spare))
    full, dagster_full = threading.Event(), threading.Event()

    write = output.write_atomic

    def no_space_in_home(path, text):
        if full.is_set() and Path(path).resolve().is_relative_to(home.resolve()):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return write(path, text)

    def history_full(self, sql, rows, *setup):  # the disk fills as the first sample is written
        full.set()
        raise HistoryError(f"{self.path}: history store is unreadable (database or disk is full)")

    keep = Night.keep_unsaved

    def keep_then_dagster_fails(self, *a, **k):
        try:
            return keep(self, *a, **k)
        finally:
            dagster_full.set()  # the step's failure is the next thing Dagster writes: its storage is full too

    run_record = DagsterInstance.get_run_record_by_id

    def run_storage(self, run_id):  # where the review's full disk stopped Dagster (its run storage's read)
        if dagster_full.is_set():
            raise OperationalError('PRAGMA main.table_xinfo("runs")', {}, sqlite3.OperationalError("disk I/O error"))
        return run_record(self, run_id)

    for owner, name, fake in ((output, "write_atomic", no_space_in_home), (state, "write_atomic", no_space_in_home),
                              (FileHistoryStore, "_insert", history_full), (Night, "keep_unsaved", keep_then_dagster_fails),
                              (DagsterInstance, "get_run_record_by_id", run_storage)):
        monkeypatch.setattr(owner, name, fake)
    assert main(["run", "--home", str(home), "--repo", str(sleepy_repo(tmp_path / "fw")), "--timeout-floor", "60"]) == 4
    out, err = capsys.readouterr()
    assert dagster_full.is_set()
    assert "Traceback" not in err and "sqlalchemy" not in err.lower().replace("operationalerror", ""), err
    assert err.count("nightly run: error:") == 1, err
    said = err[err.index("nightly run: error:"):]
    assert said.startswith("nightly run: error: the Dagster instance's storage failed mid-night (OperationalError: "
                           "(sqlite3.OperationalError) disk I/O error); check the disk of "), said
    (mine,) = (spare / "nightly-unsaved").iterdir()  # not under the full home; this home's own folder there
    (folder,) = mine.iterdir()
    assert f"They are kept in {folder} (not in {home / 'unsaved' / folder.name}: " in said
    assert "No space left on device" in said
    samples, problems = decode_lines("kept", (folder / "history.jsonl").read_bytes())
    assert len(samples) == 2 and not problems
    assert f"nightly readd --deployment local --home {home} {folder}" in said


def test_a_night_never_names_another_homes_results_kept_in_the_shared_temp_folder(tmp_path, monkeypatch):
    """Nights of different homes share a host and its $TMPDIR: the fallback folder of one home is not
    where another home's night looks, so a night whose run id is lost never points at their results."""
    import time

    from pipelines.night import unsaved_roots, unsaved_since

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)
    started = time.time()
    other = unsaved_roots(tmp_path / "home_b")[1] / "2026-12-01T000000Z-bbbbbbbb"
    (other / "state" / "runs").mkdir(parents=True)
    (other / "README.txt").write_text(f"... --home {tmp_path / 'home_b'}\n")
    assert unsaved_since(tmp_path / "home_a", started) is None
    assert unsaved_since(tmp_path / "home_b", started) == other
    assert unsaved_roots(tmp_path / "home_a")[1] != unsaved_roots(tmp_path / "home_b")[1]
