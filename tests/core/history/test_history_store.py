"""The local history store keeps every sample across crashes and says clearly when it cannot."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pipelines.core.history import FileHistoryStore, HistoryError, sample_from_attempt
from pipelines.core.model import Attempt, Sample
from tests.conftest import PROJECT_ROOT, make_test


def sample(i: int = 0, **kw) -> Sample:
    base = dict(test_id=f"tests/e2e/test_{i}.py", hardware="h200", sha256="a" * 64, outcome="passed",
                elapsed_s=100.0 + i, started_at=f"2026-12-01T00:{i % 60:02d}:00+00:00", run_id="r1")
    return Sample(**{**base, **kw})


def test_appended_samples_read_back_equal_and_in_order(tmp_path):
    store = FileHistoryStore(tmp_path / "h" / "history.sqlite")
    store.append([sample(1), sample(2, outcome="timed_out", capped=True)])
    store.append([sample(3, node="n7", image="img:2", attempt=2, source="x.log:4")])
    assert store.read() == [sample(1), sample(2, outcome="timed_out", capped=True),
                            sample(3, node="n7", image="img:2", attempt=2, source="x.log:4")]


def test_a_missing_store_reads_as_empty_without_creating_it(tmp_path):
    store = FileHistoryStore(tmp_path / "none.sqlite")
    assert store.read() == []
    assert not store.path.exists()


def test_the_same_attempt_appended_twice_is_kept_once(tmp_path):
    store = FileHistoryStore(tmp_path / "h.sqlite")
    assert store.add([sample(1), sample(2)]) == 2
    assert store.add([sample(1), sample(3)]) == 1
    assert len(store.read()) == 3


def test_a_sample_with_an_unknown_outcome_is_refused_and_nothing_of_its_batch_is_written(tmp_path):
    store = FileHistoryStore(tmp_path / "h.sqlite")
    with pytest.raises(ValueError, match="outcome: 'exploded' is not one of passed"):
        store.append([sample(1), sample(2, outcome="exploded")])
    assert store.read() == []


def test_a_corrupt_store_is_an_error_naming_the_file_and_the_fix(tmp_path):
    path = tmp_path / "history.sqlite"
    path.write_bytes(b"this is not a database at all, just some bytes " * 100)
    with pytest.raises(HistoryError) as exc:
        FileHistoryStore(path).read()
    assert str(path) in str(exc.value)
    assert "nightly history import" in str(exc.value)
    assert "Move the file aside" in str(exc.value)
    assert path.read_bytes().startswith(b"this is not a database")


def test_a_store_of_another_schema_version_is_refused(tmp_path):
    import sqlite3

    path = tmp_path / "h.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version=9")
    with pytest.raises(HistoryError, match="schema version 9, this nightly reads 1"):
        FileHistoryStore(path).read()


def test_an_attempt_becomes_a_sample_of_its_file_revision_and_a_timeout_is_capped():
    t = make_test(sha256="b" * 64, hardware="h200")
    a = Attempt(test_id=t.id, outcome="timed_out", elapsed_s=750, started_at="2026-12-01T02:00:00+00:00",
                attempt=2, node="node-3", log_path="/logs/a.log")
    s = sample_from_attempt(a, t, "run-9", "img:7")
    assert s == Sample(t.id, "h200", "b" * 64, "timed_out", 750.0, "2026-12-01T02:00:00+00:00", node="node-3",
                       image="img:7", run_id="run-9", attempt=2, source="/logs/a.log", capped=True)


WRITER = textwrap.dedent("""
    import sys
    from pipelines.core.history import FileHistoryStore
    from pipelines.core.model import Sample
    store = FileHistoryStore(sys.argv[1])
    i = 0
    while True:
        batch = [Sample(f"t{i}-{j}", "h200", "a" * 64, "passed", float(j), "", run_id="r", source="x" * 2000)
                 for j in range(50)]
        store.append(batch)
        print(i, flush=True)
        i += 1
""")


def test_a_writer_killed_mid_write_leaves_every_earlier_sample_readable(tmp_path):
    path = tmp_path / "history.sqlite"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    committed = -1
    try:
        deadline = time.monotonic() + 300  # ~1 s idle; only a hang guard, a loaded machine is slow, not wrong
        while committed < 5 and time.monotonic() < deadline:
            committed = int(proc.stdout.readline())
        time.sleep(0.01)  # let it get into the next batch
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert committed >= 5, "the writer never committed"
    samples = FileHistoryStore(path).read()
    ids = {s.test_id for s in samples}
    assert all(f"t{i}-{j}" in ids for i in range(committed + 1) for j in range(50))
    # Batches are all-or-nothing: no batch is half there.
    assert len(samples) % 50 == 0
    FileHistoryStore(path).append([sample(1)])
    assert len(FileHistoryStore(path).read()) == len(samples) + 1
