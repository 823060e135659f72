"""A state folder that cannot be written stops `nightly run` and `nightly ui` at once: exit 2 with
what to do (not a traceback and exit 1, which means a test failed)."""

from __future__ import annotations

import os

import pytest

from pipelines.cli import main

SAYS = "must be writable (set NIGHTLY_HOME or --home to a writable folder)"


@pytest.fixture
def unwritable(tmp_path):
    """A home under a plain file: unwritable for root too (ENOTDIR), like NIGHTLY_HOME=/dev/null/home."""
    (tmp_path / "afile").write_text("")
    return tmp_path / "afile" / "home"


@pytest.mark.parametrize("argv", [["run"], ["run", "--list-only"], ["ui", "--print-command"]])
def test_an_unwritable_nightly_home_is_exit_2_before_any_work(unwritable, monkeypatch, capsys, argv):
    monkeypatch.setenv("NIGHTLY_HOME", str(unwritable))
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "", "nothing planned or printed first"
    assert err == (f"nightly {argv[0]}: error:\n{unwritable}: cannot be written (Not a directory); "
                   f"the state folder {unwritable} {SAYS}\n")


def test_an_unwritable_home_flag_is_exit_2(unwritable, capsys):
    assert main(["run", "--home", str(unwritable)]) == 2
    assert capsys.readouterr().err.rstrip().endswith(SAYS)


def test_a_writable_home_is_created_and_left_clean(tmp_path, capsys, monkeypatch):
    home = tmp_path / "new" / "home"
    for name in ("DAGSTER_HOME", "NIGHTLY_HOME"):  # the command points both at the home: restored after
        monkeypatch.setenv(name, "")
    assert main(["ui", "--home", str(home), "--print-command"]) == 0
    assert sorted(p.name for p in home.iterdir()) == ["dagster"], "the probe file is removed"


#: what `nightly run --labels short --suite stage-b-2-gpu-h200` runs: one GPU test of the example
GPU_NIGHT = ["run", "--labels", "short", "--suite", "stage-b-2-gpu-h200"]


@pytest.mark.parametrize(("where", "said"), [
    ("afile", "the host's GPU lock folder is not a folder; "),
    ("afile/locks", "the host's GPU lock folder cannot be created: {tmp}/afile is not a folder; "),
])
def test_a_gpu_lock_folder_that_is_no_folder_stops_a_local_night_before_the_plan(tmp_path, monkeypatch, capsys,
                                                                                   where, said):
    """NIGHTLY_GPU_LOCK_DIR=/etc/passwd ran the whole night, every test an infra_error, and advised
    `chmod 1777 /etc/passwd`: now exit 2 before the plan, saying what is wrong with it."""
    (tmp_path / "afile").write_text("root:x:0:0\n")
    monkeypatch.setenv("NIGHTLY_GPU_LOCK_DIR", str(tmp_path / where))
    home = tmp_path / "home"
    assert main([*GPU_NIGHT, "--home", str(home)]) == 2
    out, err = capsys.readouterr()
    assert "plan:" not in out
    assert err.startswith(f"nightly run: error:\n{tmp_path / where}: {said.format(tmp=tmp_path)}")
    assert "Point NIGHTLY_GPU_LOCK_DIR at a folder" in err and "chmod" not in err
    assert not (home / "runs").exists() and not (home / "dagster").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes any folder")
def test_a_gpu_lock_folder_this_user_cannot_write_is_said_so_with_the_chmod(tmp_path, monkeypatch, capsys):
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o555)
    monkeypatch.setenv("NIGHTLY_GPU_LOCK_DIR", str(locks))
    assert main([*GPU_NIGHT, "--home", str(tmp_path / "home"), "--list-only"]) == 2
    err = capsys.readouterr().err
    assert f"{locks}: the host's GPU lock folder is not writable (Permission denied)" in err
    assert f"chmod 1777 {locks}" in err


def test_a_missing_gpu_lock_folder_is_created_for_every_user_and_left_clean(tmp_path, monkeypatch, capsys):
    locks = tmp_path / "new" / "locks"
    monkeypatch.setenv("NIGHTLY_GPU_LOCK_DIR", str(locks))
    assert main([*GPU_NIGHT, "--home", str(tmp_path / "home"), "--list-only"]) == 0
    assert locks.stat().st_mode & 0o7777 == 0o1777 and list(locks.iterdir()) == []


def test_only_a_local_night_that_takes_gpus_needs_the_lock_folder(tmp_path, monkeypatch):
    from pipelines.launch.local import gpu_lock_problem
    from tests.conftest import make_test

    monkeypatch.setenv("NIGHTLY_GPU_LOCK_DIR", str(tmp_path / "afile"))
    (tmp_path / "afile").write_text("")
    assert gpu_lock_problem("local", [make_test(gpus=0)]) == ""  # a 0-GPU test takes no lock
    assert gpu_lock_problem("kubernetes", [make_test(gpus=8)]) == ""  # the pods lock nothing here
    assert "is not a folder" in gpu_lock_problem("local", [make_test(gpus=0), make_test(gpus=2)])


def test_a_lock_folder_this_user_cannot_write_but_an_admin_filled_with_lock_files_is_fine(tmp_path, monkeypatch):
    """flock needs only to open a lock file: an admin's 0755 folder (or a read-only mount) holding them
    works for launches, so the check before the night takes it; without the launchers' file it cannot."""
    import tempfile

    from pipelines.launch import gpu_slots
    from pipelines.launch.local import lock_dir_problem

    def not_writable(*args, **kwargs):  # what mkstemp meets as a user who cannot write the folder (root can)
        raise PermissionError(13, "Permission denied")

    locks = tmp_path / "locks"
    locks.mkdir()
    monkeypatch.setattr(tempfile, "mkstemp", not_writable)
    assert "is not writable (Permission denied)" in lock_dir_problem(locks)
    (locks / gpu_slots.LAUNCHERS_FILE).write_text("")
    assert lock_dir_problem(locks) == ""
