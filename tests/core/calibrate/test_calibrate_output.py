"""Calibration's files are written whole, with the permissions any other tool would give them."""

from __future__ import annotations

import os
import stat

import pytest

from pipelines.core.calibrate import write_atomic, write_evidence_csv


@pytest.fixture
def umask():
    """Set the process umask for one test and restore it after."""
    old = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_a_new_file_gets_read_write_for_everyone_less_the_umask(tmp_path, umask, mask, expected):
    umask(mask)
    write_atomic(tmp_path / "est_time.patch", "diff\n")
    write_evidence_csv(tmp_path / "evidence.csv", [])
    assert (mode(tmp_path / "est_time.patch"), mode(tmp_path / "evidence.csv")) == (expected, expected)


def test_a_replaced_file_keeps_its_own_mode(tmp_path):
    script = tmp_path / "test_a.py"
    script.write_text("old\n")
    os.chmod(script, 0o751)
    write_atomic(script, "new\n")
    assert (script.read_text(), mode(script)) == ("new\n", 0o751)


def test_a_failed_write_leaves_no_temporary_file_and_the_old_text(tmp_path, monkeypatch):
    target = tmp_path / "evidence.csv"
    target.write_text("old\n")

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        write_atomic(target, "new\n")
    assert [p.name for p in tmp_path.iterdir()] == ["evidence.csv"]
    assert target.read_text() == "old\n"


def test_the_nightly_calibration_files_in_the_local_state_store_get_the_same_mode(tmp_path, umask):
    from pipelines.storage.state import LocalStateStore

    umask(0o022)
    written = LocalStateStore(tmp_path).put("estimates/minirl.json", "{}")
    assert mode(written) == 0o644


def test_a_symlinked_output_is_written_through_and_a_looping_link_is_refused_with_the_fix(tmp_path):
    from pipelines.core.calibrate import output_problem

    target = tmp_path / "real.csv"
    (tmp_path / "link.csv").symlink_to(target)
    assert output_problem(tmp_path / "link.csv", "--evidence") == ""
    write_atomic(tmp_path / "link.csv", "x\n")
    assert (tmp_path / "link.csv").is_symlink() and target.read_text() == "x\n"
    (tmp_path / "loop.csv").symlink_to(tmp_path / "loop.csv")
    assert output_problem(tmp_path / "loop.csv", "--evidence").startswith(
        f"{tmp_path / 'loop.csv'}: --evidence: a symlink that cannot be followed (")
