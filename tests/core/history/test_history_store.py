"""The local history store keeps every sample across crashes and says clearly when it cannot."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

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
    with pytest.raises(HistoryError, match="schema version 9, this nightly reads 2"):
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


def test_a_zero_byte_store_is_an_error_and_is_never_recreated(tmp_path):
    path = tmp_path / "history.sqlite"
    path.write_bytes(b"")
    os.utime(path, (time.time() - 60, time.time() - 60))  # found by a later command, not being created now
    for action in (lambda s: s.read(), lambda s: s.append([sample(1)])):
        with pytest.raises(HistoryError) as exc:
            action(FileHistoryStore(path))
        assert f"{path}: history file is empty (0 bytes) but a history is never empty; nothing was changed" \
            in str(exc.value)
        assert path.read_bytes() == b""


@contextlib.contextmanager
def read_only_folder(folder: Path):
    """``folder`` not writable by this process: chmod for a user, ``chattr +i`` for root (root
    ignores modes); skipped only where neither can be had."""
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
        undo = ["chmod", "755", str(folder)]
    else:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)],
                                                            capture_output=True).returncode:
            pytest.skip("running as root where chattr +i is unavailable: cannot make a folder read-only")
        undo = ["chattr", "-i", str(folder)]
    try:
        yield folder
    finally:
        subprocess.run(undo, check=True)


def test_a_read_only_state_folder_is_named_as_such_and_reading_still_works(tmp_path):
    store = FileHistoryStore(tmp_path / "state" / "history.sqlite")
    store.append([sample(1)])
    with read_only_folder(tmp_path / "state"):
        assert store.read() == [sample(1)]
        with pytest.raises(HistoryError) as exc:
            store.append([sample(2)])
    assert f"{tmp_path / 'state'}: the state folder is not writable" in str(exc.value)
    assert "point NIGHTLY_HOME / --store at a writable folder" in str(exc.value)
    assert store.read() == [sample(1)]


def test_a_store_in_a_read_only_folder_that_does_not_exist_yet_is_named_too(tmp_path):
    with read_only_folder(tmp_path):
        with pytest.raises(HistoryError, match=f"{tmp_path}/state: the state folder is not writable"):
            FileHistoryStore(tmp_path / "state" / "history.sqlite").append([sample(1)])


def test_a_version_1_store_is_upgraded_in_place_and_keeps_its_samples(tmp_path):
    import sqlite3

    path = tmp_path / "h.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("""CREATE TABLE samples (seq INTEGER PRIMARY KEY AUTOINCREMENT, test_id TEXT NOT NULL,
            hardware TEXT NOT NULL, sha256 TEXT NOT NULL, outcome TEXT NOT NULL CHECK (outcome IN ('passed')),
            elapsed_s REAL NOT NULL, started_at TEXT NOT NULL, node TEXT NOT NULL, image TEXT NOT NULL,
            run_id TEXT NOT NULL, attempt INTEGER NOT NULL, source TEXT NOT NULL, capped INTEGER NOT NULL,
            UNIQUE (run_id, test_id, hardware, attempt, started_at))""")
        conn.execute("INSERT INTO samples (test_id, hardware, sha256, outcome, elapsed_s, started_at, node, image,"
                     " run_id, attempt, source, capped) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                     ("tests/e2e/test_1.py", "h200", "a" * 64, "passed", 101.0, "2026-12-01T00:01:00+00:00",
                      "", "", "r1", 1, "", 0))
        conn.execute("PRAGMA user_version=1")
    store = FileHistoryStore(path)
    assert store.read() == [sample(1)]  # reading does not upgrade
    store.append([sample(2, outcome="interrupted")])
    assert store.read() == [sample(1), sample(2, outcome="interrupted")]


def test_a_store_from_before_the_env_column_reads_and_takes_samples_with_an_env(tmp_path):
    import sqlite3

    from pipelines.core.history.store import _TABLE

    path = tmp_path / "h.sqlite"
    with sqlite3.connect(path) as conn:  # a version 2 store as an older nightly made it: no env column
        conn.execute(_TABLE.format(name="samples").replace(", env TEXT NOT NULL DEFAULT '',\n  reason TEXT NOT NULL "
                                                            "DEFAULT ''", ""))
        conn.execute("INSERT INTO samples (test_id, hardware, sha256, outcome, elapsed_s, started_at, node, image,"
                     " run_id, attempt, source, capped, outlier) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                     ("tests/e2e/test_1.py", "h200", "a" * 64, "passed", 101.0, "2026-12-01T00:01:00+00:00",
                      "", "", "r1", 1, "", 0, ""))
        conn.execute("PRAGMA user_version=2")
    store = FileHistoryStore(path)
    assert store.read() == [sample(1)]  # reading changes nothing
    store.append([sample(2, env="MINIRL_FAIL#0123456789ab")])
    assert store.read() == [sample(1), sample(2, env="MINIRL_FAIL#0123456789ab")]
    with sqlite3.connect(path) as conn:  # an older nightly, which names its columns, still writes it
        conn.execute("INSERT INTO samples (test_id, hardware, sha256, outcome, elapsed_s, started_at, node, image,"
                     " run_id, attempt, source, capped, outlier) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                     ("tests/e2e/test_3.py", "h200", "a" * 64, "passed", 103.0, "2026-12-01T00:03:00+00:00",
                      "", "", "r1", 1, "", 0, ""))
    assert store.read()[-1] == sample(3)


def test_a_store_from_before_the_reason_column_reads_and_keeps_an_infra_errors_reason(tmp_path):
    import sqlite3

    from pipelines.core.history.store import _TABLE

    path = tmp_path / "h.sqlite"
    with sqlite3.connect(path) as conn:  # a version 2 store as an older nightly made it: env, no reason
        conn.execute(_TABLE.format(name="samples").replace(",\n  reason TEXT NOT NULL DEFAULT ''", ""))
        conn.execute("INSERT INTO samples (test_id, hardware, sha256, outcome, elapsed_s, started_at, node, image,"
                     " run_id, attempt, source, capped, outlier, env) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                     ("tests/e2e/test_1.py", "h200", "a" * 64, "passed", 101.0, "2026-12-01T00:01:00+00:00",
                      "", "", "r1", 1, "", 0, "", ""))
        conn.execute("PRAGMA user_version=2")
        assert "reason" not in {row[1] for row in conn.execute("PRAGMA table_info(samples)")}
    store = FileHistoryStore(path)
    assert store.read() == [sample(1)]  # reading changes nothing
    evicted = sample(2, outcome="infra_error", node="h200-a", reason="evicted")
    store.append([evicted])
    assert store.read() == [sample(1), evicted]


def test_implausible_durations_are_kept_as_outliers_with_their_reason(tmp_path):
    t = make_test()
    store = FileHistoryStore(tmp_path / "h.sqlite")
    cases = {-5.0: "elapsed -5 s is negative", float("nan"): "elapsed nan is not a finite number",
             1e9: "elapsed 1e+09 s is over the ceiling of 86400 s"}
    for i, value in enumerate(cases):
        store.append([sample_from_attempt(Attempt(t.id, "passed", value, f"2026-12-01T00:0{i}:00+00:00"), t, "r")])
    kept = store.read()
    assert [s.outlier for s in kept] == list(cases.values())
    assert [s.elapsed_s for s in kept] == [0.0, 0.0, 1e9]


def test_calibrate_rewrites_are_recorded_once_and_read_back_in_order(tmp_path):
    from pipelines.core.calibrate import Succession

    store = FileHistoryStore(tmp_path / "h.sqlite")
    store.append([sample(1)])
    rewrites = [Succession("a" * 64, "b" * 64, "tests/e2e/test_1.py"), Succession("b" * 64, "c" * 64, "tests/e2e/test_1.py")]
    assert store.add_successions(rewrites) == 2
    assert store.add_successions(rewrites[:1]) == 0
    assert store.successions() == rewrites
    assert store.read() == [sample(1)]


def test_a_store_without_recorded_rewrites_has_none_and_reading_creates_nothing(tmp_path):
    store = FileHistoryStore(tmp_path / "h.sqlite")
    assert store.successions() == []
    assert not store.path.exists()
    store.append([sample(1)])
    assert store.successions() == []


def damaged(path: Path, *elapsed: object) -> None:
    """A store holding one good row, then rows whose elapsed_s a hand edit or another tool broke."""
    import sqlite3

    FileHistoryStore(path).append([sample(1)])
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA ignore_check_constraints=1")  # how a negative value gets past the schema
        for i, value in enumerate(elapsed, start=2):
            row = sample(i)
            conn.execute("INSERT INTO samples (test_id, hardware, sha256, outcome, elapsed_s, started_at, node, image, "
                         "run_id, attempt, source, capped, outlier) VALUES (?, ?, ?, ?, ?, ?, '', '', ?, 1, '', 0, '')",
                         (row.test_id, row.hardware, row.sha256, row.outcome, value, row.started_at, row.run_id))
        conn.commit()


@pytest.mark.parametrize(("value", "why"), [("abc", "'abc' is not a number"), ("NaN", "'NaN' is not a number"),
                                            (-5.0, "-5 s is negative")])
def test_a_row_that_cannot_be_a_sample_is_skipped_with_a_located_warning_and_the_rest_is_read(tmp_path, caplog,
                                                                                              value, why):
    path = tmp_path / "history.sqlite"
    damaged(path, value)
    store = FileHistoryStore(path)
    assert store.read() == [sample(1)]
    expected = f"{path}: row 2: elapsed_s: {why}; the row is skipped"
    [skipped] = store.skipped
    assert skipped.startswith(expected)
    assert skipped.endswith(f'sqlite3 {path} "DELETE FROM samples WHERE seq=2"), or re-import its night')
    assert expected in caplog.text


def test_an_astronomical_elapsed_is_read_as_an_outlier_that_calibration_never_uses(tmp_path, caplog):
    path = tmp_path / "history.sqlite"
    damaged(path, 1e308)
    [good, far] = FileHistoryStore(path).read()
    assert good == sample(1)
    assert far.outlier == "elapsed 1e+308 s is over the ceiling of 86400 s"
    assert f"{path}: row 2: elapsed_s: 1e+308 s is over the ceiling of 86400 s; kept as an outlier" in caplog.text


def test_a_store_another_process_is_writing_is_reported_busy_never_as_a_file_to_move_aside(tmp_path):
    import sqlite3

    from pipelines.core.calibrate import Succession

    store = FileHistoryStore(tmp_path / "history.sqlite")
    store.append([sample(1)])
    store.busy_timeout_s = 0.05
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another nightly process mid-transaction
        for write in (lambda: store.append([sample(2)]),
                      lambda: store.add_successions([Succession("a" * 64, "b" * 64, "tests/e2e/test_1.py")])):
            with pytest.raises(HistoryError) as err:
                write()
            message = str(err.value)
            assert message.startswith(f"{store.path}: busy: another nightly process is writing {store.path}; "
                                      "retry when it ends")
            assert "aside" not in message and "recover" not in message
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.read() == [sample(1)]


def killed_after_commit(store: FileHistoryStore, samples: list[Sample]) -> None:
    """Another process appends ``samples`` and is killed -9 right after its commit: they are committed,
    but only in the write-ahead log (``-wal``, indexed by ``-shm``), never checkpointed into the file."""
    from pipelines.core.history.store import _COLUMNS, _row

    code = textwrap.dedent(f"""
        import os, sqlite3
        conn = sqlite3.connect({str(store.path)!r}, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO samples ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                         {[_row(s) for s in samples]!r})
        conn.execute("COMMIT")
        os.kill(os.getpid(), 9)
    """)
    subprocess.run([sys.executable, "-c", code], check=False)
    assert store.path.with_name(store.path.name + "-wal").stat().st_size > 0


def test_a_read_only_folder_reads_samples_a_killed_writer_committed_to_the_write_ahead_log(tmp_path, caplog):
    """``nightly plan``/``report`` on a state folder they may only read must see every committed sample."""
    store = FileHistoryStore(tmp_path / "state" / "history.sqlite")
    store.append([sample(1)])
    killed_after_commit(store, [sample(2), sample(3)])
    with read_only_folder(tmp_path / "state"):
        assert store.read() == [sample(1), sample(2), sample(3)]
    assert "may be missing" not in caplog.text


def test_a_read_only_folder_without_the_write_ahead_index_reads_the_file_and_warns_what_may_be_missing(tmp_path,
                                                                                                         caplog):
    """Without its ``-shm`` index SQLite cannot read the ``-wal`` in a folder it may not write: the file
    is read as it stands, and the warning says so and what to do."""
    store = FileHistoryStore(tmp_path / "state" / "history.sqlite")
    store.append([sample(1)])
    killed_after_commit(store, [sample(2)])
    store.path.with_name("history.sqlite-shm").unlink()
    with read_only_folder(tmp_path / "state"):
        assert store.read() == [sample(1)]
    wal = store.path.with_name("history.sqlite-wal")
    assert (f"{store.path}: read as it stands: the folder is read-only and {wal} has no -shm index beside it, "
            "so samples committed to it (by a writer that was killed) may be missing") in caplog.text
    caplog.clear()
    assert store.read() == [sample(1), sample(2)]  # writable again: SQLite reads the log and makes its index
    assert "may be missing" not in caplog.text


def test_a_zero_byte_store_another_process_is_creating_is_waited_for_not_called_damaged(tmp_path):
    """SQLite makes the file, then writes its first page: a command started beside the first night
    sees 0 bytes for a moment, which is a history being made, not one to move aside."""
    import sqlite3
    import threading

    path = tmp_path / "history.sqlite"
    path.write_bytes(b"")  # the other process's sqlite3.connect and first statement: the file, still empty

    def first_page():
        time.sleep(0.3)
        sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").fetchone()  # writes the first page

    other = threading.Thread(target=first_page)
    other.start()
    try:
        FileHistoryStore(path).append([sample(1)])
    finally:
        other.join()
    assert FileHistoryStore(path).read() == [sample(1)]


def test_a_zero_byte_store_made_moments_ago_that_stays_empty_is_still_damage(tmp_path):
    path = tmp_path / "history.sqlite"
    path.write_bytes(b"")
    path.with_name("history.sqlite-wal").write_bytes(b"")
    store = FileHistoryStore(path)
    store.creating_s = store.busy_timeout_s = 0.2
    with pytest.raises(HistoryError) as exc:
        store.append([sample(1)])
    assert f"{path}: history file is empty (0 bytes) but a history is never empty" in str(exc.value)
    assert "move it aside (with history.sqlite-wal) to start a new history" in str(exc.value)
    assert path.read_bytes() == b""


def _first_append(path: str, barrier, i: int) -> None:
    barrier.wait()
    FileHistoryStore(path).append([sample(i)])


def test_two_processes_writing_the_first_samples_of_a_fresh_history_both_store_them(tmp_path):
    """Two commands started at once on a new state folder (a night and an import): each append stores its
    sample; neither is told the file is empty or busy while the other creates it."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    for trial in range(10):
        path = str(tmp_path / str(trial) / "history.sqlite")
        barrier = ctx.Barrier(2)
        writers = [ctx.Process(target=_first_append, args=(path, barrier, i)) for i in (1, 2)]
        for w in writers:
            w.start()
        for w in writers:
            w.join(60)
        assert [w.exitcode for w in writers] == [0, 0], f"trial {trial}: a first append failed (see its stderr)"
        assert sorted(s.test_id for s in FileHistoryStore(path).read()) == [sample(1).test_id, sample(2).test_id]


def test_switching_a_new_file_to_wal_is_retried_while_sqlite_answers_busy_at_once(tmp_path):
    """On a file another process is creating, ``PRAGMA journal_mode=WAL`` can answer busy without
    SQLite's busy wait (about 1 first append in 200 in a race): it is retried, up to busy_timeout_s."""
    import sqlite3

    class CreatedMeanwhile:
        calls = 0

        def execute(self, sql):
            self.calls += 1
            if self.calls < 3:
                raise sqlite3.OperationalError("database is locked")
            assert sql == "PRAGMA journal_mode=WAL"

    conn = CreatedMeanwhile()
    store = FileHistoryStore(tmp_path / "history.sqlite")
    store._use_wal(conn)
    assert conn.calls == 3
    store.busy_timeout_s = 0.1
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        store._use_wal(type("AlwaysBusy", (CreatedMeanwhile,), {"calls": -10**9})())


def test_a_zero_byte_store_with_old_companions_is_damage_at_once_not_after_the_busy_wait(tmp_path):
    """A first write a full disk cut short leaves a 0-byte file and its journal, both old by the next
    command: nobody is creating it, so every command must not wait its busy timeout first."""
    path = tmp_path / "history.sqlite"
    path.write_bytes(b"")
    journal = path.with_name("history.sqlite-journal")
    journal.write_bytes(b"")
    for p in (path, journal):
        os.utime(p, (time.time() - 86400, time.time() - 86400))
    store = FileHistoryStore(path)
    store.busy_timeout_s = 5.0
    t0 = time.monotonic()
    with pytest.raises(HistoryError) as exc:
        store.read()
    assert time.monotonic() - t0 < 2.0, "waited for a creation nobody is doing"
    assert "move it aside (with history.sqlite-journal)" in str(exc.value)
