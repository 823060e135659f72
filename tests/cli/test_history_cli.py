"""``nightly history import`` and ``show`` over a small fake catalog."""

from __future__ import annotations

import argparse
import hashlib
import textwrap

import pytest

from pipelines.cli import history as history_cli
from pipelines.core.history import FileHistoryStore
from pipelines.core.model import Catalog
from tests.conftest import make_test

LOG = textwrap.dedent("""\
    2026-11-30T15:18:08Z End (1/3):
    2026-11-30T15:18:08Z filename='tests/e2e/test_a.py', elapsed=957, _estimated_time=3600
    2026-11-30T15:18:09Z [1/3] tests/e2e/test_a.py  PASS  elapsed=957s
    2026-11-30T15:18:50Z [2/3] tests/e2e/test_b.py  FAIL  elapsed=41s exit=1
    2026-11-30T15:35:20Z [2/3] tests/e2e/test_b.py  PASS  elapsed=990s retry_of=attempt=1
    2026-11-30T16:05:21Z [3/3] tests/e2e/test_gone.py  TIMEOUT  elapsed=1800s timeout_after=1800s
""")


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="nightly")
    sub = parser.add_subparsers(dest="command", required=True)
    history_cli.register(sub)
    args = parser.parse_args(list(argv))
    return args.func(args)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    tests = []
    for name, est in (("test_a", 3600), ("test_b", 600)):
        path = root / "tests/e2e" / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"register_cuda_ci(est_time={est}, suite='stage-c-4-gpu-h200', labels=[])\n")
        tests.append(make_test(id=f"tests/e2e/{name}.py", path=f"tests/e2e/{name}.py", est_time=est,
                               sha256=hashlib.sha256(path.read_bytes()).hexdigest()))
    fake = Catalog(repo=str(root), tests=tuple(tests))
    monkeypatch.setattr(history_cli, "load_catalog_for", lambda path, spec, specs: fake)
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    return root


def test_import_stores_every_matched_attempt_and_lists_unmatched_files(repo, tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text(LOG)
    assert cli("history", "import", "--repo", str(repo), str(log)) == 0
    out = capsys.readouterr().out
    assert "imported 3 samples from 1 logs (3 new, 0 already stored in" in out
    assert "  failed 1, passed 2\n" in out
    assert "unmatched files (1):" in out
    assert f"{log}:6: filename: tests/e2e/test_gone.py is not a registered test in {repo}" in out
    stored = FileHistoryStore(tmp_path / "home" / "history.sqlite").read()
    assert [(s.test_id, s.outcome, s.elapsed_s) for s in stored] == [
        ("tests/e2e/test_a.py", "passed", 957.0), ("tests/e2e/test_b.py", "failed", 41.0),
        ("tests/e2e/test_b.py", "passed", 990.0)]


def test_importing_the_same_log_twice_adds_nothing_and_a_dry_run_stores_nothing(repo, tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text(LOG)
    store = tmp_path / "other.sqlite"
    assert cli("history", "import", "--repo", str(repo), "--store", str(store), "--dry-run", str(log)) == 0
    assert "would import 3 samples from 1 logs (dry run)" in capsys.readouterr().out
    assert not store.exists()
    cli("history", "import", "--repo", str(repo), "--store", str(store), str(log))
    cli("history", "import", "--repo", str(repo), "--store", str(store), str(log))
    assert "(0 new, 3 already stored in" in capsys.readouterr().out
    assert len(FileHistoryStore(store).read()) == 3


def test_a_missing_log_file_is_reported_and_nothing_imported_fails(repo, tmp_path, capsys):
    assert cli("history", "import", "--repo", str(repo), str(tmp_path / "nope.log")) == 1
    assert f"{tmp_path / 'nope.log'}:1: log: cannot read (No such file or directory); check the path" in \
        capsys.readouterr().out


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)])
def test_an_import_that_reads_no_attempt_exits_1_with_or_without_dry_run(repo, tmp_path, capsys, dry_run):
    """A script must see that nothing was imported: a file that is no job log, or a log whose every line is
    refused (here for a --suite no file registers), exits 1; a log whose attempts are already stored exits 0."""
    garbage = tmp_path / "g.txt"
    garbage.write_text("garbage\n")
    assert cli("history", "import", "--repo", str(repo), *dry_run, str(garbage)) == 1
    assert "no attempts matched" in capsys.readouterr().out
    log = tmp_path / "job.log"
    log.write_text(LOG)
    assert cli("history", "import", "--repo", str(repo), *dry_run, "--suite", "nosuch-4-gpu-h200", str(log)) == 1
    assert "has no registration for suite 'nosuch-4-gpu-h200'" in capsys.readouterr().out
    assert cli("history", "import", "--repo", str(repo), str(log)) == 0
    assert cli("history", "import", "--repo", str(repo), *dry_run, str(log)) == 0  # nothing new, nothing wrong


PLAIN = textwrap.dedent("""\
    python3 run_suite.py --suite stage-c-4-gpu-h200
    .
    End (1/2):
    filename='tests/e2e/test_a.py', elapsed=957, _estimated_time=3600
    [1/2] tests/e2e/test_a.py  PASS  elapsed=957s
    [2/2] tests/e2e/test_b.py  FAIL  elapsed=41s exit=1
    [2/2] tests/e2e/test_b.py  PASS  elapsed=990s retry_of=attempt=1
""")


def test_a_log_without_timestamps_saved_while_its_job_ran_and_then_whole_is_stored_once(repo, tmp_path, capsys):
    """The import of a log cut off mid-job says to download it again once the job is done; without timestamps
    the whole log then stored its attempts a second time (its run id was the hash of its whole text), in
    separate commands and in one. Another run of the job (other output) is still another run."""
    part, whole, other = tmp_path / "part.txt", tmp_path / "whole.txt", tmp_path / "other.txt"
    whole.write_text(PLAIN)
    part.write_text(PLAIN[:PLAIN.index("[2/2] tests/e2e/test_b.py  PASS")] + "[2/2] tests/e2e/test_b.py  PA")
    other.write_text(PLAIN.replace(".\n", "seed 7\n"))
    store = tmp_path / "h.sqlite"
    assert cli("history", "import", "--repo", str(repo), "--store", str(store), str(part)) == 0
    assert "(2 new, 0 already stored in" in capsys.readouterr().out
    assert cli("history", "import", "--repo", str(repo), "--store", str(store), str(whole)) == 0
    assert "imported 3 samples from 1 logs (1 new, 2 already stored in" in capsys.readouterr().out
    assert cli("history", "import", "--repo", str(repo), "--store", str(store), str(other)) == 0
    assert "(3 new, 0 already stored in" in capsys.readouterr().out
    assert len(FileHistoryStore(store).read()) == 6
    both = tmp_path / "both.sqlite"
    assert cli("history", "import", "--repo", str(repo), "--store", str(both), str(part), str(whole)) == 0
    assert "imported 3 samples from 2 logs (3 new, 0 already stored in" in capsys.readouterr().out
    assert [(s.test_id, s.attempt, s.outcome) for s in FileHistoryStore(both).read()] == [
        ("tests/e2e/test_a.py", 1, "passed"), ("tests/e2e/test_b.py", 1, "failed"), ("tests/e2e/test_b.py", 2, "passed")]


def test_a_log_without_timestamps_imported_by_an_older_nightly_is_not_stored_again(repo, tmp_path, capsys):
    """Before, such a log's run id was the hash of its whole text: importing the same log again after the
    upgrade must still add nothing."""
    import dataclasses

    whole = tmp_path / "whole.txt"
    whole.write_text(PLAIN)
    store = tmp_path / "h.sqlite"
    assert cli("history", "import", "--repo", str(repo), "--store", str(store), str(whole)) == 0
    then = "log-" + hashlib.sha256(PLAIN.encode()).hexdigest()[:12]
    older = tmp_path / "older.sqlite"
    FileHistoryStore(older).add([dataclasses.replace(s, run_id=then) for s in FileHistoryStore(store).read()])
    assert cli("history", "import", "--repo", str(repo), "--store", str(older), str(whole)) == 0
    assert "(0 new, 3 already stored in" in capsys.readouterr().out
    assert len(FileHistoryStore(older).read()) == 3


def test_show_lists_samples_of_one_test(repo, tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text(LOG)
    cli("history", "import", "--repo", str(repo), str(log))
    capsys.readouterr()
    assert cli("history", "show", "--test", "tests/e2e/test_b.py") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "2 of 2 samples"
    assert "tests/e2e/test_b.py" in out[1] and "failed" in out[1] and "41" in out[1]


def test_show_on_a_corrupt_store_says_which_file_and_what_to_do(repo, tmp_path, capsys):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"garbage" * 200)
    assert cli("history", "show", "--store", str(bad)) == 2
    err = capsys.readouterr().err
    assert f"nightly history: error: {bad}: history store is unreadable" in err
    assert "re-import past nights with `nightly history import`" in err


def test_refused_log_lines_are_listed_with_file_line_and_why_and_the_rest_imports(repo, tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text("[1/3] tests/e2e/test_a.py  PASS  elapsed=957s\n"
                   "[2/3] tests/e2e/test_b.py  PASS  elapsed=" + "9" * 400 + "s\n"
                   "[3/3] tests/e2e/test_b.py  PASS  elapsed=-3s\n")
    assert cli("history", "import", "--repo", str(repo), "--dry-run", str(log)) == 0
    out = capsys.readouterr().out
    assert "would import 1 samples from 1 logs" in out
    assert (f"  {log}:2: elapsed: 999999999999...(400 characters) s is more than a day (86400 s); no test attempt "
            "lasts that long; attempt not imported") in out
    assert f"  {log}:3: elapsed: -3 s is negative; attempt not imported" in out


def test_show_skips_a_damaged_row_with_a_warning_naming_it_and_lists_the_rest(repo, tmp_path, capsys, caplog):
    import contextlib
    import sqlite3

    log = tmp_path / "job.log"
    log.write_text(LOG)
    cli("history", "import", "--repo", str(repo), str(log))
    store = tmp_path / "home" / "history.sqlite"
    with contextlib.closing(sqlite3.connect(store)) as conn:
        conn.execute("UPDATE samples SET elapsed_s = 'abc' WHERE seq = 2")
        conn.commit()
    capsys.readouterr()
    assert cli("history", "show") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "2 of 2 samples (1 row skipped or marked: see the warnings)"
    assert f"{store}: row 2: elapsed_s: 'abc' is not a number; the row is skipped" in caplog.text


@pytest.mark.parametrize("limit", ["-1", "0", "ten"])
def test_show_refuses_a_limit_that_is_not_a_positive_number_of_rows(repo, capsys, limit):
    with pytest.raises(SystemExit) as exc:
        cli("history", "show", "--limit", limit)
    assert exc.value.code == 2
    assert f"argument --limit: {limit!r} is not a positive number of rows; give N >= 1, or 'all'" in capsys.readouterr().err


def test_show_with_limit_all_lists_every_sample(repo, tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text(LOG)
    cli("history", "import", "--repo", str(repo), str(log))
    capsys.readouterr()
    assert cli("history", "show", "--limit", "all") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 of 3 samples"
    assert cli("history", "show", "--limit", "1") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 of 3 samples"


def test_import_with_hardware_takes_only_that_hardware_s_tests(repo, tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text(LOG)
    assert cli("history", "import", "--repo", str(repo), "--hardware", "b200", "--dry-run", str(log)) == 1
    out = capsys.readouterr().out
    assert "would import 0 samples" in out
    assert f"{log}:3: hardware: tests/e2e/test_a.py has no test on hardware 'b200' (it has: h200); check --hardware" in out
    assert cli("history", "import", "--repo", str(repo), "--hardware", "h200", "--dry-run", str(log)) == 0
    assert "would import 3 samples" in capsys.readouterr().out


def test_show_limit_gives_the_newest_runs_even_when_older_logs_were_imported_last(repo, tmp_path, capsys):
    from pipelines.core.model import Sample

    store = FileHistoryStore(tmp_path / "home" / "history.sqlite")
    store.add([Sample("tests/e2e/test_a.py", "h200", "a" * 64, "passed", 30.0, "2026-12-03T15:00:00Z", run_id="tonight")])
    store.add([Sample("tests/e2e/test_a.py", "h200", "a" * 64, "passed", 40.0, "2026-11-30T15:18:01Z", run_id="old-log")])
    assert cli("history", "show", "--limit", "1") == 0
    [row] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("2026-")]
    assert row.startswith("2026-12-03T15:00:00Z"), row


def test_the_same_attempts_from_a_jobs_whole_log_and_its_step_log_are_stored_once_across_imports(repo, tmp_path,
                                                                                                  capsys):
    whole = tmp_path / "0_stage-c.txt"  # the job's whole log: setup lines, then the step's lines
    whole.write_text("2026-11-30T15:00:00Z ##[group]Run actions/checkout@v4\n" + LOG)
    step = tmp_path / "5_Run tests.txt"  # one step's own log: test_b's two attempts
    step.write_text("".join(LOG.splitlines(keepends=True)[3:5]))
    assert cli("history", "import", "--repo", str(repo), str(whole)) == 0
    capsys.readouterr()
    assert cli("history", "import", "--repo", str(repo), str(step)) == 0
    assert "(0 new, 2 already stored in" in capsys.readouterr().out
    assert len(FileHistoryStore(tmp_path / "home" / "history.sqlite").read()) == 3


@pytest.mark.parametrize("compression", ["stored", "deflated"])
def test_a_github_log_archive_is_read_member_by_member_and_each_attempt_stored_once(repo, tmp_path, capsys,
                                                                                   compression):
    """The .zip a run's "Download log archive" gives: the whole job's log and each step's."""
    import zipfile

    archive = tmp_path / "logs_123.zip"
    mode = zipfile.ZIP_DEFLATED if compression == "deflated" else zipfile.ZIP_STORED
    with zipfile.ZipFile(archive, "w", mode) as z:
        z.writestr("0_stage-c.txt", "2026-11-30T15:00:00Z ##[group]Run actions/checkout@v4\n" + LOG)
        z.writestr("stage-c/5_Run tests.txt", "".join(LOG.splitlines(keepends=True)[3:5]))
        z.writestr("stage-c/1_Set up job.txt", "2026-11-30T15:00:00Z Current runner version: '2.321.0'\n")
    assert cli("history", "import", "--repo", str(repo), str(archive)) == 0
    out = capsys.readouterr().out
    assert "imported 3 samples from 3 logs (3 new, 0 already stored in" in out
    assert "no `[i/N]" not in out, "a setup step's log in an archive is no problem"
    stored = FileHistoryStore(tmp_path / "home" / "history.sqlite").read()
    assert sorted((s.test_id, s.attempt, s.outcome) for s in stored) == [
        ("tests/e2e/test_a.py", 1, "passed"), ("tests/e2e/test_b.py", 1, "failed"), ("tests/e2e/test_b.py", 2, "passed")]


#: a job log with every format feature the reader knows: a BOM, GitHub timestamps and none, CRLF and
#: a lone CR (a progress bar), colour codes, the runner's command line, End blocks, a retry, a
#: timeout, cut-off and garbled runner lines, an End block without its filename line (also at the
#: very end, without a newline), a form feed, ninja's [i/N] lines, UTF-8 text and bytes that are not
#: UTF-8
def test_a_zip_archive_without_a_txt_log_is_named_not_silently_read_as_nothing(repo, tmp_path, capsys):
    """A .zip of other files (a log saved as job.log, zipped by hand) gave "0 samples from 0 logs" alone and
    nothing at all beside a good log: the archive's attempts were missing without a word."""
    import zipfile

    archive = tmp_path / "logs.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("job.log", LOG)
        z.writestr("empty/", "")
    log = tmp_path / "job.txt"
    log.write_text(LOG)
    said = (f"  {archive}:1: log: a zip archive without a .txt member (it holds job.log); expected GitHub's log "
            "archive (a run's \"Download log archive\": one .txt per job and step): give that archive, or the job logs "
            "themselves")
    assert cli("history", "import", "--repo", str(repo), "--dry-run", str(archive)) == 1
    assert said in capsys.readouterr().out
    assert cli("history", "import", "--repo", str(repo), "--dry-run", str(archive), str(log)) == 0
    out = capsys.readouterr().out
    assert "would import 3 samples from 1 logs (dry run)" in out and said in out


EVERY_FEATURE = b"".join(line.encode() if isinstance(line, str) else line for line in (
    "\ufeff2026-11-30T15:00:00.1234567Z python3 run_suite.py --suite stage-c-4-gpu-h200 --hw cuda\r\n",
    "2026-11-30T15:00:01.1234567Z [1/3] /usr/local/cuda/bin/nvcc -c /root/x/adam.cu -o a.o\n",
    "2026-11-30T15:00:02.1234567Z Loading: 20%|##\r40%|####\r100%|##########\n",
    "2026-11-30T15:00:03.1234567Z step 1 loss 0.5 \u6b65\u9aa4 \u2713\x0cpage\n",
    LOG,
    "2026-11-30T16:06:00.1234567Z \x1b[32m[1/2] tests/e2e/test_a.py  PASS  elapsed=12s\x1b[0m\r\n",
    "[2/2] tests/e2e/test_b.py  FAIL  elapsed=3s exit=x\n",
    "[2/3] tests/e2e/te\n",
    "TIMEOUT: tests/e2e/test_b.py aft\n",
    "[1/1] tests/e2e/test_a.py  PASS  elapsed=99999999999s\n",
    b"[1/1] tests/e2e/caf\xe9.py  PASS  elapsed=10s\n",
    "End (2/3):\nsomething else\n",
    "End (1/1):\nfilename='tests/e2e/test_b.py', elapsed=77, _estimated_time=600\n",
    "[1/2] tests/e2e/test_a.py PASS elapsed=9s\n",
    "End (1/1):",
))


def test_logs_read_line_by_line_say_exactly_what_the_whole_text_says(repo, tmp_path):
    """A plain log and each archive member, streamed, give what reading them whole gave (the attempts,
    every refused line, the suite, the run id) and so the same samples and problems."""
    import zipfile

    from pipelines.core.history import import_logs, import_parsed
    from pipelines.core.history.joblog import read_ci_log

    plain = tmp_path / "job.txt"
    plain.write_bytes(EVERY_FEATURE)
    archive = tmp_path / "logs.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("0_job.txt", EVERY_FEATURE)
        z.writestr("job/3_Run tests.txt", EVERY_FEATURE.replace(b"\r", b""))
        z.writestr("job/meta.json", "{}")
    # what `history import` read before: the whole text (lines end at \n only, a lone \r stays in its line)
    whole = {str(plain): plain.read_bytes().decode("utf-8", errors="replace")}
    with zipfile.ZipFile(archive) as z:
        whole |= {f"{archive}:{n}": z.read(n).decode("utf-8", errors="replace") for n in ("0_job.txt",
                                                                                            "job/3_Run tests.txt")}
    streamed = history_cli._read_logs(plain) | history_cli._read_logs(archive)
    assert streamed == {source: read_ci_log(text) for source, text in whole.items()}
    parsed = streamed[f"{archive}:0_job.txt"]
    assert parsed.suite == "stage-c-4-gpu-h200" and len(parsed.attempts) == 6 and parsed.digest
    assert {field for _, field, _ in parsed.refused} == {"exit", "log", "elapsed", "filename"}
    last = EVERY_FEATURE.count(b"\n") + 1
    assert [line for line, _, why in parsed.refused if why.startswith("End block without")] == [last - 5, last]
    catalog = history_cli.load_catalog_for(None, None, None)
    archives = {s: str(archive) for s in streamed if s.startswith(f"{archive}:")}
    assert import_parsed(streamed, catalog, archives=archives) == import_logs(whole, catalog, archives=archives)
    # a lone CR ends no line, in a plain file as in an archive member: both cite the same lines
    assert [a.line for a in streamed[str(plain)].attempts] == [a.line for a in parsed.attempts]


def _kept(path, run_id: str, n: int = 7) -> bytes:
    """A night's kept ``history.jsonl`` of ``n`` attempts of run ``run_id``."""
    from pipelines.core.model import Sample
    from pipelines.storage.s3 import encode

    body = encode([Sample(test_id=f"tests/t{i}.py", hardware="h200", sha256="x", outcome="passed", elapsed_s=5.0,
                          started_at="2026-12-01T00:00:00+00:00", run_id=run_id) for i in range(n)])
    path.write_bytes(body)
    return body


def test_a_kept_jsonl_cut_off_mid_line_imports_the_lines_before_it_and_names_the_cut_one(tmp_path, capsys,
                                                                                        monkeypatch):
    """A full disk or kill -9 leaves the last line of ``unsaved/<night>/history.jsonl`` cut off: the whole
    lines are still attempts to keep; the cut one is named, and the exit status says a file was damaged."""
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    whole, cut = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _kept(whole, "a")
    cut.write_bytes(_kept(cut, "b")[:-40])
    assert cli("history", "import", str(whole), str(cut)) == 1
    out = capsys.readouterr().out
    assert "imported 13 samples from 2 logs (13 new, 0 already stored in" in out
    assert f"  {cut}:7: json: not a JSON object (" in out
    stored = FileHistoryStore(tmp_path / "home" / "history.sqlite").read()
    assert sorted(s.run_id for s in stored) == ["a"] * 7 + ["b"] * 6
    # importing it again adds nothing and still says the file is damaged
    assert cli("history", "import", str(cut)) == 1
    assert "(0 new, 6 already stored in" in capsys.readouterr().out


def test_every_bad_line_of_a_kept_jsonl_is_named_and_a_file_that_gives_nothing_is_not_counted(tmp_path, capsys,
                                                                                               monkeypatch):
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    mixed, junk = tmp_path / "m.jsonl", tmp_path / "j.jsonl"
    lines = _kept(mixed, "m", 3).splitlines(keepends=True)
    mixed.write_bytes(lines[0] + b'{"test_id": "t"}\n' + lines[1] + b"\xff\xfe\n" + lines[2])
    junk.write_bytes(b"[1, 2]\n")
    assert cli("history", "import", "--dry-run", str(mixed), str(junk)) == 1
    out = capsys.readouterr().out
    assert "would import 3 samples from 1 logs (dry run)" in out
    assert f"  {mixed}:2: hardware: required field is missing" in out
    assert f"  {mixed}:4: encoding: not UTF-8" in out
    assert f"  {junk}:1: json: expected an object, got list" in out


def test_a_kept_jsonl_line_whose_test_id_no_catalog_gives_is_named_and_not_stored(tmp_path, capsys, monkeypatch):
    """`"test_id": "../../etc/passwd\\n; $(id)"` was stored as it was, and `history show` printed its row
    over two lines; every other field was already checked with file, line and field."""
    import json

    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    kept = tmp_path / "k.jsonl"
    good = _kept(kept, "k", 1)
    bad = {**json.loads(good), "test_id": "../../etc/passwd\n; $(id)"}
    spaced = {**json.loads(good), "test_id": "unknown (deadbeef.json)"}
    kept.write_bytes(good + (json.dumps(bad) + "\n" + json.dumps(spaced) + "\n").encode())
    assert cli("history", "import", str(kept)) == 1
    out = capsys.readouterr().out
    assert "imported 1 samples from 1 logs (1 new" in out
    assert (f"  {kept}:2: test_id: '../../etc/passwd\\n; $(id)' is not a test id (contains '..'); a test id is the "
            "test file's path in its repository, `::variant` after it where the file holds several (`nightly "
            "catalog` lists them): fix or remove the line") in out
    assert (f"  {kept}:3: test_id: 'unknown (deadbeef.json)' is not a test id (contains whitespace ' '; test paths "
            "may only use ASCII letters, digits and ._-+=@/)") in out
    assert [s.test_id for s in FileHistoryStore(tmp_path / "home" / "history.sqlite").read()] == ["tests/t0.py"]
    assert cli("history", "show") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 of 1 samples"


def test_a_kept_jsonl_line_no_number_or_json_reader_can_take_is_named_and_the_other_lines_imported(tmp_path, capsys,
                                                                                                  monkeypatch):
    """A 400-digit elapsed (float() overflows), 100,000 '[' (RecursionError), a 5,000-digit attempt (Python's
    digit limit) and an attempt of 10**30 (SQLite's INTEGER) each stopped the import with a traceback, and
    nothing of the file was imported."""
    import json

    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    kept = tmp_path / "k.jsonl"
    good = _kept(kept, "k", 1)
    text = good.decode().replace('"elapsed_s": 5.0', '"elapsed_s": ELAPSED').replace('"attempt": 1', '"attempt": ATTEMPT')
    assert "ELAPSED" in text and "ATTEMPT" in text
    lines = [text.replace("ELAPSED", "1" + "0" * 400).replace("ATTEMPT", "1"),
             "[" * 100_000 + "\n",
             text.replace("ELAPSED", "5").replace("ATTEMPT", "9" * 5000),
             text.replace("ELAPSED", "5").replace("ATTEMPT", str(10 ** 30))]
    json.loads(lines[-1])  # valid JSON: only its number is wrong
    kept.write_bytes(good + "".join(lines).encode())
    assert cli("history", "import", str(kept)) == 1
    out = capsys.readouterr().out
    assert "imported 1 samples from 1 logs (1 new" in out
    assert f"  {kept}:2: elapsed_s: a number of 401 digits, more than the 18 any elapsed_s has; fix or remove the " \
           "line" in out
    assert f"  {kept}:3: json: nested too deeply to be a sample" in out
    assert f"  {kept}:4: attempt: a number of 5000 digits, more than the 18 any attempt has" in out
    assert f"  {kept}:5: attempt: a number of 31 digits, more than the 18 any attempt has" in out
    assert [s.run_id for s in FileHistoryStore(tmp_path / "home" / "history.sqlite").read()] == ["k"]


def test_a_kept_jsonl_line_no_night_writes_is_named_and_an_over_long_duration_kept_as_an_outlier(tmp_path, capsys,
                                                                                                 monkeypatch, caplog):
    """`"elapsed_s": Infinity` was imported (exit 0) and every later read warned about it; a hardware with
    '/', attempt 0, a start that is no time or years ahead, a source with a newline or an escape sequence were
    stored as they were. A finite duration over the ceiling is kept as an outlier, as a night keeps it."""
    import json
    from datetime import UTC, datetime, timedelta

    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    kept = tmp_path / "k.jsonl"
    good = json.loads(_kept(kept, "k", 1))
    soon = (datetime.now(UTC) + timedelta(minutes=2)).isoformat()  # another host's clock a little ahead: fine
    rows = [good, {**good, "run_id": "soon", "started_at": soon}, {**good, "run_id": "long", "elapsed_s": 1e308},
            {**good, "run_id": "inf", "elapsed_s": float("inf")}, {**good, "run_id": "nan", "elapsed_s": float("nan")},
            {**good, "run_id": "hw", "hardware": "../../etc"}, {**good, "run_id": "a0", "attempt": 0},
            {**good, "run_id": "when", "started_at": "yesterday"},
            {**good, "run_id": "future", "started_at": "2999-01-01T00:00:00+00:00"},
            {**good, "run_id": "src", "source": "job.log:3\n\x1b[31mFAIL"}]
    kept.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cli("history", "import", str(kept)) == 1
    out = capsys.readouterr().out
    assert "imported 3 samples from 1 logs (3 new" in out
    assert f"  {kept}:4: elapsed_s: inf is not a finite number of seconds; fix or remove the line" in out
    assert f"  {kept}:5: elapsed_s: nan must be a number >= 0" in out
    assert f"  {kept}:6: hardware: '../../etc' is not a hardware name (contains '/'), e.g. 'h200'; fix or remove " \
           "the line" in out
    assert f"  {kept}:7: attempt: 0 is not an attempt number (a test's first attempt is 1)" in out
    assert f"  {kept}:8: started_at: 'yesterday' is not an ISO-8601 time" in out
    assert f"  {kept}:9: started_at: '2999-01-01T00:00:00+00:00' is later than now (" in out
    assert f"  {kept}:10: source: 'job.log:3\\n\\x1b[31mFAIL' contains the control character '\\n'" in out
    caplog.clear()
    stored = FileHistoryStore(tmp_path / "home" / "history.sqlite").read()
    assert [(s.run_id, s.outlier) for s in stored] == [("k", ""), ("soon", ""),
                                                      ("long", "elapsed 1e+308 s is over the ceiling of 86400 s")]
    assert not caplog.records  # nothing a read warns about again and again


def test_history_import_exits_as_docs_calibration_md_says(repo, tmp_path, capsys, project_root):
    """The page said 0 whenever an attempt was read, even with other lines refused; a refused line of a kept
    .jsonl exits 1 on purpose (a night's attempts were lost), a refused line of a CI log does not."""
    text = " ".join((project_root / "docs" / "calibration.md").read_text().split())
    said = text[text.index("Exit status of `history import`"):].split(" ## ")[0]
    log = tmp_path / "job.log"
    log.write_text(LOG)  # test_gone.py matches no registration
    assert cli("history", "import", "--repo", str(repo), "--dry-run", str(log)) == 0
    assert "lines of CI job logs that were refused or match no registration are listed and do not change it" in said
    kept = tmp_path / "k.jsonl"
    kept.write_bytes(_kept(kept, "k", 2)[:-20])
    assert cli("history", "import", "--dry-run", str(kept)) == 1
    assert "also when a `.jsonl` LOGFILE cannot be read or any of its lines was refused, even though its other lines " \
           "were added" in said
    assert "even if other lines or files were refused" not in said


def test_show_of_a_store_file_that_does_not_exist_is_refused_and_import_creates_it(repo, tmp_path, capsys):
    """A mistyped --store is an error, not an empty history; `history import` is what makes such a file."""
    store = tmp_path / "mine.sqlite"
    assert cli("history", "show", "--store", str(store)) == 2
    assert (f"nightly history: error: {store}: --store: no such history file; check the path, or leave --store "
            f"out for the deployment's history (`nightly history import --store {store} LOGFILE` creates one)"
            ) in capsys.readouterr().err
    log = tmp_path / "job.log"
    log.write_text(LOG)
    assert cli("history", "import", "--repo", str(repo), "--store", str(store), str(log)) == 0
    assert cli("history", "show", "--store", str(store)) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 of 3 samples"


def test_several_or_large_logs_are_announced_one_by_one_on_stderr(repo, tmp_path, capsys, monkeypatch):
    """A long import shows where it is (a 200 MB log takes 15-27 s); one small log says nothing."""
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    for log in logs:
        log.write_text(LOG)
    assert cli("history", "import", "--repo", str(repo), "--dry-run", str(logs[0])) == 0
    assert capsys.readouterr().err == ""
    assert cli("history", "import", "--repo", str(repo), "--dry-run", *map(str, logs)) == 0
    assert capsys.readouterr().err.splitlines() == [f"nightly history: reading {logs[0]} (1/2) ...",
                                                    f"nightly history: reading {logs[1]} (2/2) ..."]
    monkeypatch.setattr(history_cli, "LARGE_LOG_BYTES", len(LOG))
    assert cli("history", "import", "--repo", str(repo), "--dry-run", str(logs[0])) == 0
    assert capsys.readouterr().err == f"nightly history: reading {logs[0]} (1/1) ...\n"


def test_a_log_cut_off_mid_test_says_how_many_files_have_no_summary_line(repo, tmp_path, capsys):
    """The runner numbers its files [i/N]: a job killed while [3/4] ran leaves 2 of 4 files without a result,
    which the import says at the last summary line instead of reporting a clean 2-sample import."""
    log = tmp_path / "cut.txt"
    log.write_text("python3 run_suite.py --suite stage-c-4-gpu-h200\n"
                   "End (1/4):\nfilename='tests/e2e/test_a.py', elapsed=40\n"
                   "[1/4] tests/e2e/test_a.py  PASS  elapsed=40s\n"
                   "End (2/4):\nfilename='tests/e2e/test_b.py', elapsed=20\n"
                   "[2/4] tests/e2e/test_b.py  PASS  elapsed=20s\n"
                   "step 10 loss 0.31\n"
                   "##[error]The job running on runner gpu-h200-3 has exceeded the maximum execution time of 360 "
                   "minutes.\n##[error]The operation was canceled.\n")
    assert cli("history", "import", "--repo", str(repo), str(log)) == 0
    out = capsys.readouterr().out
    assert "imported 2 samples from 1 logs" in out
    assert (f"  {log}:7: log: log ends after [2/4]: 2 of 4 files have no summary line (the job was cut off or "
            "cancelled, or the runner stopped at a failure), so they get no sample") in out
    # a whole log, whose last summary line is [N/N], says nothing of the kind
    log.write_text(LOG)
    assert cli("history", "import", "--repo", str(repo), "--dry-run", str(log)) == 0
    assert "log ends after" not in capsys.readouterr().out


def test_a_log_whose_command_line_names_another_suite_or_hardware_than_suite_is_refused_whole(tmp_path, capsys,
                                                                                              monkeypatch):
    """--suite is for logs that do not name theirs: an MI300 job's log imported with an H200 --suite is
    refused (nothing stored) with the line that names its suite, not stored as the H200 test's durations."""
    both = Catalog(repo=str(tmp_path), tests=(
        make_test(), make_test(suite="stage-c-4-gpu-mi300", backend="rocm", hardware="mi300")))
    monkeypatch.setattr(history_cli, "load_catalog_for", lambda path, spec, specs: both)
    store = tmp_path / "h.sqlite"
    mi300 = tmp_path / "mi300.txt"
    mi300.write_text("2026-11-30T15:00:00Z ##[group]Run tests\n"
                     "2026-11-30T15:00:01Z python3 run_suite.py --suite stage-c-4-gpu-mi300 --hw amd\n"
                     "2026-11-30T15:01:00Z [1/1] tests/e2e/test_a.py  PASS  elapsed=40s\n")
    assert cli("history", "import", "--repo", str(tmp_path), "--store", str(store), "--suite", "stage-c-4-gpu-h200",
               str(mi300)) == 1
    out = capsys.readouterr().out
    assert (f"  {mi300}:2: suite: the log's command line runs suite 'stage-c-4-gpu-mi300' but --suite says "
            "'stage-c-4-gpu-h200'; nothing of this log is imported: leave --suite out (this log names its own "
            "suite), or import this log in a command of its own without --suite") in out
    assert FileHistoryStore(store).read() == []
    # only --hw on the command line: AMD hardware, but the --suite's tests are all CUDA
    mi300.write_text("python3 run_suite.py --hw amd\n[1/1] tests/e2e/test_a.py  PASS  elapsed=40s\n")
    assert cli("history", "import", "--repo", str(tmp_path), "--store", str(store), "--suite",
               "stage-c-4-gpu-h200", str(mi300)) == 1
    assert (f"  {mi300}:1: suite: the log's command line runs on --hw amd (rocm) but the tests of suite "
            "'stage-c-4-gpu-h200' from --suite run on cuda; nothing of this log is imported") in capsys.readouterr().out
    assert FileHistoryStore(store).read() == []
    # without --suite the log's own command line decides; a log that names no suite still takes --suite
    mi300.write_text("python3 run_suite.py --suite stage-c-4-gpu-mi300 --hw amd\n"
                     "[1/1] tests/e2e/test_a.py  PASS  elapsed=40s\n")
    plain = tmp_path / "plain.txt"
    plain.write_text("[1/1] tests/e2e/test_a.py  PASS  elapsed=50s\n")
    assert cli("history", "import", "--repo", str(tmp_path), "--store", str(store), str(mi300)) == 0
    assert cli("history", "import", "--repo", str(tmp_path), "--store", str(store), "--suite",
               "stage-c-4-gpu-h200", str(plain)) == 0
    assert sorted((s.hardware, s.elapsed_s) for s in FileHistoryStore(store).read()) == [("h200", 50.0),
                                                                                          ("mi300", 40.0)]


def test_an_sglang_amd_job_log_with_its_own_suite_flag_is_imported_not_refused(tmp_path, capsys, monkeypatch):
    """SGLang registers AMD tests with register_amd_ci (backend `amd`): a `--hw amd` log imported with the
    --suite of those tests was refused as running on another backend (`amd` read as rocm only)."""
    amd = Catalog(repo=str(tmp_path), tests=(make_test(suite="stage-b-test-1-gpu-amd", backend="amd",
                                                       hardware="mi300"),))
    monkeypatch.setattr(history_cli, "load_catalog_for", lambda path, spec, specs: amd)
    store = tmp_path / "h.sqlite"
    log = tmp_path / "amd.txt"
    log.write_text("python3 run_suite.py --hw amd\n[1/1] tests/e2e/test_a.py  PASS  elapsed=40s\n")
    assert cli("history", "import", "--repo", str(tmp_path), "--store", str(store), "--suite",
               "stage-b-test-1-gpu-amd", str(log)) == 0, capsys.readouterr().out
    assert [(s.hardware, s.elapsed_s) for s in FileHistoryStore(store).read()] == [("mi300", 40.0)]


def test_a_sample_carries_the_digest_of_its_test_file_at_the_commit_the_log_checked_out(tmp_path, capsys, monkeypatch):
    """The checkout step prints the commit the job ran: a test file changed since then gets that commit's
    digest (stale evidence for calibration), not the checkout's; a commit --repo does not have is said."""
    import subprocess

    root = tmp_path / "fw"

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), "-c", "user.email=a@b", "-c", "user.name=a", *args],
                              check=True, capture_output=True, text=True).stdout.strip()

    for name in ("test_a", "test_b"):
        (root / "tests/e2e").mkdir(parents=True, exist_ok=True)
        (root / "tests/e2e" / f"{name}.py").write_text("register_cuda_ci(600, 'stage-c-4-gpu-h200', labels=[])\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "A")
    ran = git("rev-parse", "HEAD")
    old_b = hashlib.sha256((root / "tests/e2e/test_b.py").read_bytes()).hexdigest()
    (root / "tests/e2e/test_b.py").write_text("register_cuda_ci(600, 'stage-c-4-gpu-h200', labels=[])\n# changed\n")
    git("commit", "-qam", "B")
    now = {name: hashlib.sha256((root / "tests/e2e" / f"{name}.py").read_bytes()).hexdigest()
           for name in ("test_a", "test_b")}
    fake = Catalog(repo=str(root), tests=tuple(make_test(id=f"tests/e2e/{n}.py", path=f"tests/e2e/{n}.py",
                                                         sha256=sha) for n, sha in now.items()))
    monkeypatch.setattr(history_cli, "load_catalog_for", lambda path, spec, specs: fake)
    log = tmp_path / "job.txt"
    log.write_text("2026-11-30T15:00:00Z [command]/usr/bin/git log -1 --format=%H\n"
                   f"2026-11-30T15:00:00Z {ran}\n"
                   "2026-11-30T15:01:00Z [1/2] tests/e2e/test_a.py  PASS  elapsed=40s\n"
                   "2026-11-30T15:02:00Z [2/2] tests/e2e/test_b.py  PASS  elapsed=20s\n")
    store = tmp_path / "h.sqlite"
    assert cli("history", "import", "--repo", str(root), "--store", str(store), str(log)) == 0
    assert "commit" not in capsys.readouterr().out
    assert {s.test_id: s.sha256 for s in FileHistoryStore(store).read()} == {
        "tests/e2e/test_a.py": now["test_a"], "tests/e2e/test_b.py": old_b}
    # a commit that is not in --repo's history: said at its line; the samples carry the checkout's digests
    unknown = "f" * 40
    log.write_text(log.read_text().replace(ran, unknown).replace("15:0", "16:0"))
    assert cli("history", "import", "--repo", str(root), "--store", str(store), str(log)) == 0
    assert (f"  {log}:2: commit: commit {unknown} that the log's checkout printed is not in the history of --repo: "
            "its samples carry the digests of the --repo checkout's files") in capsys.readouterr().out
    later = [s for s in FileHistoryStore(store).read() if s.started_at.startswith("2026-11-30T16")]
    assert {s.test_id: s.sha256 for s in later} == {"tests/e2e/test_a.py": now["test_a"],
                                                    "tests/e2e/test_b.py": now["test_b"]}


def test_a_template_test_s_sample_from_a_log_naming_its_commit_is_current_evidence(tmp_path, capsys, monkeypatch):
    """A template test's digest covers its entry as well as its file: a log naming the commit it ran gets
    the file at that commit with the entry, the digest the catalog gives the test (else never current)."""
    import shutil
    import subprocess
    from pathlib import Path

    root = tmp_path / "templaterl"
    shutil.copytree(Path(__file__).parents[2] / "examples" / "templaterl", root)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), "-c", "user.email=a@b", "-c", "user.name=a", *args],
                              check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "A")
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    dpo = history_cli.load_catalog_for(*history_cli.resolve_repo(str(root))).by_id()["tests/test_dpo_short.py"]
    log = tmp_path / "job.txt"
    log.write_text("2026-11-30T15:00:00Z [command]/usr/bin/git log -1 --format=%H\n"
                   f"2026-11-30T15:00:00Z {git('rev-parse', 'HEAD')}\n"
                   "2026-11-30T15:01:00Z [1/1] tests/test_dpo_short.py  PASS  elapsed=40s\n")
    store = tmp_path / "h.sqlite"
    assert cli("history", "import", "--repo", str(root), "--store", str(store), str(log)) == 0, capsys.readouterr().out
    assert [(s.test_id, s.sha256) for s in FileHistoryStore(store).read()] == [(dpo.id, dpo.sha256)]


def test_a_checkout_commit_is_digested_as_checked_out_and_a_garbled_one_is_said(tmp_path, capsys, monkeypatch):
    """With `*.py text eol=crlf` the checkout writes CRLF while git keeps the blob with LF: a log that ran the
    checked-out commit got the blob's digest (every sample stale for calibration). A hash cut to 39
    characters was dropped without a word (the samples then took the checkout's digests)."""
    import subprocess

    root = tmp_path / "fw"
    (root / "tests/e2e").mkdir(parents=True)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), "-c", "user.email=a@b", "-c", "user.name=a", *args],
                              check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (root / ".gitattributes").write_text("*.py text eol=crlf\n")
    (root / "tests/e2e/test_a.py").write_text("register_cuda_ci(600, 'stage-c-4-gpu-h200', labels=[])\n")
    git("add", "-A")
    git("commit", "-qm", "A")
    (root / "tests/e2e/test_a.py").unlink()
    git("checkout", "--", "tests/e2e/test_a.py")  # as a fresh checkout writes it: CRLF
    assert b"\r\n" in (root / "tests/e2e/test_a.py").read_bytes()
    ran = git("rev-parse", "HEAD")
    sha = hashlib.sha256((root / "tests/e2e/test_a.py").read_bytes()).hexdigest()
    fake = Catalog(repo=str(root), tests=(make_test(id="tests/e2e/test_a.py", path="tests/e2e/test_a.py", sha256=sha),))
    monkeypatch.setattr(history_cli, "load_catalog_for", lambda path, spec, specs: fake)
    log = tmp_path / "job.txt"
    log.write_text("2026-11-30T15:00:00Z [command]/usr/bin/git log -1 --format=%H\n"
                   f"2026-11-30T15:00:00Z {ran}\n"
                   "2026-11-30T15:01:00Z [1/1] tests/e2e/test_a.py  PASS  elapsed=40s\n")
    store = tmp_path / "h.sqlite"
    assert cli("history", "import", "--repo", str(root), "--store", str(store), str(log)) == 0
    assert [s.sha256 for s in FileHistoryStore(store).read()] == [sha]
    capsys.readouterr()
    log.write_text(log.read_text().replace(ran, ran[:39]).replace("15:0", "16:0"))
    assert cli("history", "import", "--repo", str(root), "--store", str(store), str(log)) == 0
    assert (f"{log}:2: commit: {ran[:39]!r} after the checkout's `git log -1 --format=%H` line is not a commit "
            "hash") in capsys.readouterr().out


def test_gh_run_view_job_names_again_are_numbered_in_order_and_a_literal_numbered_name_kept():
    """Two names taking turns line by line are many blocks of each, numbered in order (each name's count is
    kept: the names are no longer searched from 2 up to the block's line number for every block, which
    made 16,000 one-line jobs take 15 s); a job literally named "A (2)" keeps its name."""
    from pipelines.core.history.joblog import read_gh_run_log

    lines = [f"{'AB'[k % 2]}\tRun tests\t2026-11-30T15:00:00.1Z hello\n" for k in range(2_000)]
    found = read_gh_run_log([*lines, "A (2)\tRun tests\t2026-11-30T15:00:00.1Z hi\n"])
    assert len(found) == 2_001 and {"A", "B", "A (2)", "B (2)", "A (1000)", "B (1000)", "A (2) (2)"} <= set(found)


def test_a_progress_bar_s_lone_cr_does_not_shift_the_lines_a_plain_log_cites(repo, tmp_path, capsys):
    """hf download / tqdm redraw their bar with a lone \\r: GitHub numbers lines at \\n only, so the lines a
    .txt log's refusals and samples cite are the ones GitHub shows, as for a member of a log archive."""
    log = tmp_path / "job.txt"
    log.write_bytes(b"2026-11-30T15:00:00Z Fetching 4 files:  25%|##    | 1/4\r 50%|####  | 2/4\r100%|######| 4/4\r\n"
                    b"2026-11-30T15:00:01Z [1/2] tests/e2e/test_a.py  PASS  elapsed=-3s\r\n"
                    b"2026-11-30T15:01:00Z [2/2] tests/e2e/test_b.py  PASS  elapsed=40s\n")
    assert cli("history", "import", "--repo", str(repo), str(log)) == 0
    assert f"  {log}:2: elapsed: -3 s is negative; attempt not imported" in capsys.readouterr().out
    assert cli("history", "show") == 0
    assert capsys.readouterr().out.splitlines()[1].endswith(f" {log}:3")


def test_gh_run_view_log_output_is_read_job_by_job_with_the_file_s_line_numbers(repo, tmp_path, capsys):
    """`gh run view --log` puts every job of a run in one file, each line behind JOB<TAB>STEP<TAB>: each job
    is read as its own log, and what it cites is the line of that file."""
    jobs = [("lint", "Set up job", "\ufeff2026-11-30T15:00:00.1Z Current runner version: '2.321.0'"),
            ("lint", "Run ruff", "2026-11-30T15:00:01.1Z All checks passed!")]
    jobs += [("stage-c (4, h200)", "Run tests" if n else "Set up job", line) for n, line in enumerate(
        ["\ufeff2026-11-30T15:00:00.1Z Current runner version: '2.321.0'"] + LOG.splitlines())]
    jobs += [("stage-b", "Run tests", "2026-11-30T17:00:00.1Z [1/2] tests/e2e/test_a.py  PASS  elapsed=-3s"),
             ("stage-b", "Run tests", "2026-11-30T17:01:00.1Z [2/2] tests/e2e/test_b.py  PASS  elapsed=60s")]
    log = tmp_path / "run.txt"
    log.write_text("".join(f"{job}\t{step}\t{line}\n" for job, step, line in jobs))
    assert cli("history", "import", "--repo", str(repo), str(log)) == 0
    out = capsys.readouterr().out
    assert "imported 4 samples from 3 logs (4 new," in out
    assert f"  {log}:stage-b:10: elapsed: -3 s is negative; attempt not imported" in out
    assert f"{log}:stage-c (4, h200):9: filename: tests/e2e/test_gone.py is not a registered test" in out
    assert "no `[i/N]" not in out, "a job that runs no tests (lint) is no problem"
    stored = FileHistoryStore(tmp_path / "home" / "history.sqlite").read()
    assert sorted((s.source, s.outcome, s.elapsed_s) for s in stored) == [
        (f"{log}:stage-b:11", "passed", 60.0), (f"{log}:stage-c (4, h200):6", "passed", 957.0),
        (f"{log}:stage-c (4, h200):7", "failed", 41.0), (f"{log}:stage-c (4, h200):8", "passed", 990.0)]


def test_interleaved_output_between_an_end_line_and_its_filename_line_is_no_missing_filename(repo, tmp_path, capsys):
    """Two runners (or a runner and its test) writing to one log interleave their lines: an `End (i/N):`
    answered by its `filename=` line a few lines later is whole; one that no filename= line answers is not."""
    log = tmp_path / "job.txt"
    log.write_text("2026-11-30T15:00:40Z End (1/2):\n"
                   "2026-11-30T15:00:40Z End (1/1):\n"
                   "2026-11-30T15:00:40Z filename='tests/e2e/test_b.py', elapsed=40\n"
                   "2026-11-30T15:00:40Z [runner-2] step 3 loss 0.2\n"
                   "2026-11-30T15:00:40Z filename='tests/e2e/test_a.py', elapsed=40\n"
                   "2026-11-30T15:00:41Z [1/1] tests/e2e/test_b.py  PASS  elapsed=40s\n"
                   "2026-11-30T15:00:41Z [1/2] tests/e2e/test_a.py  PASS  elapsed=40s\n"
                   "2026-11-30T15:01:10Z End (2/2):\n"
                   "2026-11-30T15:01:10Z step 9 loss 0.1\n"
                   "2026-11-30T15:01:10Z filename='tests/e2e/test_b.py', elapsed=29\n"
                   "2026-11-30T15:01:11Z [2/2] tests/e2e/test_b.py  PASS  elapsed=29s\n"
                   "2026-11-30T15:01:20Z End (3/3):\n"
                   "2026-11-30T15:01:20Z Traceback (most recent call last):\n")
    assert cli("history", "import", "--repo", str(repo), "--dry-run", str(log)) == 0
    out = capsys.readouterr().out
    assert "would import 3 samples" in out
    assert [line for line in out.splitlines() if "End block without" in line] == [
        f"  {log}:12: log: End block without its `filename='<file>', elapsed=N` line; that attempt's record is "
        "incomplete, check the log was saved whole"]


def test_an_sglang_log_goes_to_the_per_commit_or_nightly_test_its_runner_command_ran(tmp_path, capsys, monkeypatch):
    """SGLang keys a registration on (backend, suite, nightly): a file registering nightly-1-gpu per-commit and
    nightly is two tests of one hardware. The log's `run_suite.py ... --nightly` says which ran (else the est_time
    it prints); --hardware, which cannot tell them apart, is never what the problem advises."""
    root = tmp_path / "sg"
    files = {"python/sgl/test/ci/ci_register.py": "".join(
                 f"def register_{b}_ci(est_time, suite=None, nightly=False, disabled=None, *, stage=None, "
                 "runner_config=None):\n    return None\n" for b in ("cpu", "cuda")),
             "test/registered/test_pair.py": ('register_cuda_ci(60, "nightly-1-gpu")\n'
                                              'register_cuda_ci(300, "nightly-1-gpu", nightly=True)\n')}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    monkeypatch.setenv("NIGHTLY_HOME", str(tmp_path / "home"))
    end = ("2026-01-01T00:04:10Z End (1/1):\n"
           "2026-01-01T00:04:10Z filename='test/registered/test_pair.py', elapsed={s}, _estimated_time={est}\n")
    summary = "2026-01-01T00:04:11Z [1/1] test/registered/test_pair.py  PASS  elapsed={s}s\n"
    logs = {"nightly.log": ("2026-01-01T00:00:00Z + python3 run_suite.py --hw cuda --suite nightly-1-gpu --nightly\n"
                            + end.format(s=250, est=300) + summary.format(s=250)),
            "commit.log": ("2026-01-01T00:00:00Z + python3 run_suite.py --hw cuda --suite nightly-1-gpu\n"
                           + summary.format(s=50)),
            "step.log": end.format(s=240, est=300) + summary.format(s=240),  # no command line: its est_time says
            "bare.log": summary.format(s=99)}  # nothing says which
    for name, text in logs.items():
        (tmp_path / name).write_text(text)
    store = tmp_path / "h.sqlite"
    assert cli("history", "import", "--repo", str(root), "--store", str(store),
               *(str(tmp_path / name) for name in ("nightly.log", "commit.log", "step.log"))) == 0
    assert sorted((s.test_id, s.elapsed_s) for s in FileHistoryStore(store).read()) == [
        ("test/registered/test_pair.py::cuda-nightly-1-gpu", 50.0),
        ("test/registered/test_pair.py::cuda-nightly-1-gpu+nightly", 240.0),
        ("test/registered/test_pair.py::cuda-nightly-1-gpu+nightly", 250.0)]
    capsys.readouterr()
    assert cli("history", "import", "--repo", str(root), "--store", str(store), str(tmp_path / "bare.log")) == 1
    out = capsys.readouterr().out
    assert "--hardware" not in out
    assert (f"{tmp_path / 'bare.log'}:1: suite: test/registered/test_pair.py registers suite 'nightly-1-gpu' both "
            "per-commit and nightly=True (test/registered/test_pair.py::cuda-nightly-1-gpu, "
            "test/registered/test_pair.py::cuda-nightly-1-gpu+nightly) and the log does not say which ran: it holds "
            "no one runner command line (`run_suite.py --suite S`, with `--nightly` for the nightly run) and it prints "
            "no _estimated_time; import the whole job log, whose command line says it") in out


def test_show_marks_the_samples_calibration_leaves_out_and_says_why(repo, tmp_path, capsys):
    """A kill injected by a `nightly run --env MINIRL_HANG=...` night showed as `timed_out 20*` exactly like a real
    one, and a day-long outlier like any pass: `show` counted them where calibrate and the planner do not."""
    from pipelines.core.model import Sample

    store = FileHistoryStore(tmp_path / "home" / "history.sqlite")
    store.add([Sample("tests/e2e/test_a.py", "h200", "a" * 64, "passed", 30.0, "2026-12-01T15:00:00Z", run_id="n1"),
               Sample("tests/e2e/test_a.py", "h200", "a" * 64, "timed_out", 20.0, "2026-12-02T15:00:00Z", run_id="n2",
                      capped=True, env="MINIRL_HANG#3f2a9c1b0d4e"),
               Sample("tests/e2e/test_a.py", "h200", "a" * 64, "passed", 90000.0, "2026-12-03T15:00:00Z", run_id="n3",
                      outlier="elapsed 90000 s is over the ceiling")])
    assert cli("history", "show", "--test", "tests/e2e/test_a.py") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[-2:] == ["unused", "source"]
    rows = {line.split()[0]: line.split() for line in out if line.startswith("2026-")}
    assert rows["2026-12-01T15:00:00Z"][6:8] == ["a" * 8, "-"]
    assert rows["2026-12-02T15:00:00Z"][3:8] == ["timed_out", "20*", "1", "a" * 8, "env"]
    assert rows["2026-12-03T15:00:00Z"][6:8] == ["a" * 8, "outlier"]
    assert out[-1] == ("3 of 3 samples (* capped by a timeout; unused: env = a night run with extra environment (--env, "
                       "env_from), outlier = an implausible duration; calibration and the planner leave both out, the "
                       "near-timeout list the env ones)")
    assert cli("history", "show", "--test", "tests/e2e/test_a.py", "--limit", "1") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 of 3 samples (unused: env = a night run with extra environment " \
        "(--env, env_from), outlier = an implausible duration; calibration and the planner leave both out, the " \
        "near-timeout list the env ones)"
