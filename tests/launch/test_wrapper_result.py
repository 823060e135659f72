"""Where the wrapper's completion record can go: a file it may rename onto, or, on Kubernetes, the
container's termination-message file (a bind mount the kubelet reads, 4096 bytes at most)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading

import pytest

from pipelines.launch import wrapper
from tests.conftest import PROJECT_ROOT

RECORD = {"file": "t.py", "func": "execute", "ok": False, "exit_code": 1, "finished": True, "token": "t-1"}


def test_a_target_that_refuses_a_rename_is_written_in_place_and_no_tmp_is_left(tmp_path, monkeypatch):
    """/dev/termination-log is bind-mounted: os.replace onto it fails with EBUSY."""
    target = tmp_path / "termination-log"
    target.write_text("")

    def busy(src, dst):
        raise OSError(errno.EBUSY, "Device or resource busy", dst)

    monkeypatch.setattr(os, "replace", busy)
    wrapper._write_result(str(target), RECORD)
    assert json.loads(target.read_text()) == RECORD
    assert [p.name for p in tmp_path.iterdir()] == ["termination-log"]


def test_a_long_error_is_cut_so_the_record_stays_within_what_the_kubelet_reads(tmp_path, monkeypatch):
    target = tmp_path / "termination-log"
    monkeypatch.setattr(os, "replace", lambda src, dst: (_ for _ in ()).throw(OSError(errno.EBUSY, "busy")))
    error = "RuntimeError: " + "é" * 20000  # non-ASCII: 6 bytes each in JSON
    wrapper._write_result(str(target), {**RECORD, "error": error})
    assert len(target.read_bytes()) <= 4096
    record = json.loads(target.read_text())
    assert record["token"] == "t-1" and record["finished"] is True and record["error"].startswith("RuntimeError: éé")


def test_an_ordinary_result_file_is_still_replaced_atomically_and_kept_whole(tmp_path):
    target = tmp_path / "r.json"
    wrapper._write_result(str(target), {**RECORD, "error": "x" * 10000})
    assert json.loads(target.read_text())["error"] == "x" * 10000
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_the_wrapper_writes_its_record_into_a_target_that_is_not_a_regular_file(tmp_path):
    """A FIFO stands in for a file that must not be replaced: the reader gets the record."""
    (tmp_path / "test_t.py").write_text("def execute():\n    print('step 10 of 10')\n")
    fifo = tmp_path / "result.fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(PROJECT_ROOT), "NIGHTLY_ATTEMPT_TOKEN": "t-9"}
    proc = subprocess.run([sys.executable, "-m", "pipelines.launch.wrapper", "--file", "test_t.py", "--result", str(fifo)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    reader.join(10)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(got[0])
    assert (record["ok"], record["finished"], record["token"]) == (True, True, "t-9")
    assert fifo.exists() and not fifo.is_file()


def test_a_result_that_cannot_be_written_is_said_and_exits_with_the_reserved_code(tmp_path):
    """The test passed, but its record cannot be written (the logs folder went away): exit 1 would
    read as the test's failure; the reserved code tells the launcher it is the folder's."""
    (tmp_path / "test_t.py").write_text("def execute():\n    pass\n")
    result = tmp_path / "gone" / "x.result.json"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(PROJECT_ROOT), "NIGHTLY_ATTEMPT_TOKEN": "t-3"}
    proc = subprocess.run([sys.executable, "-m", "pipelines.launch.wrapper", "--file", "test_t.py", "--result",
                           str(result)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == wrapper.RESULT_NOT_WRITTEN, proc.stderr
    assert f"# nightly wrapper: could not write the test's result to {result}" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("body", "exit_code"), [("print('all good')", 0), ("raise AssertionError('loss')", 1)])
def test_a_pipes_report_that_fails_is_one_line_and_never_changes_the_tests_exit_status(tmp_path, body, exit_code):
    """On Kubernetes the Pipes report comes after the record is written: a bad DAGSTER_PIPES_CONTEXT (garbage,
    or a stale session's) made a passing test exit 1 with a traceback, and the pod's exit status failed it."""
    (tmp_path / "test_t.py").write_text(f"def execute():\n    {body}\n")
    result = tmp_path / "x.result.json"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(PROJECT_ROOT), "NIGHTLY_ATTEMPT_TOKEN": "t-4",
           "DAGSTER_PIPES_CONTEXT": "not base64 at all!", "DAGSTER_PIPES_MESSAGES": "not base64 either!"}
    proc = subprocess.run([sys.executable, "-m", "pipelines.launch.wrapper", "--file", "test_t.py", "--result",
                           str(result)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == exit_code, proc.stderr
    assert json.loads(result.read_text())["ok"] is (exit_code == 0)
    said = [line for line in proc.stderr.splitlines() if "Pipes" in line]
    assert len(said) == 1 and said[0].startswith("# nightly wrapper: the Dagster Pipes report failed ("), proc.stderr
    assert said[0].endswith("); the test's result stands (the launcher judges the pod, not this report)")
    assert proc.stderr.count("Traceback") == (exit_code == 1), "only the test's own failure has a traceback"
