"""Run tags: the commit a run ran says when the checkout differed from it."""

from __future__ import annotations

import subprocess

from pipelines.defs.tags import framework_commit


def _git(repo, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_the_commit_tag_says_dirty_when_a_tracked_test_file_was_edited_and_not_committed(tmp_path):
    """A sensor reruns an edited test file before anyone commits it: that run did not run HEAD's file."""
    repo = tmp_path / "fw"
    (repo / "tests").mkdir(parents=True)
    test = repo / "tests" / "test_a.py"
    test.write_text("print('a')\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "init")
    head = _git(repo, "rev-parse", "HEAD")
    assert framework_commit(repo) == head
    (repo / "tests" / "test_new.py").write_text("print('new')\n")  # untracked: git describe --dirty ignores it too
    assert framework_commit(repo) == head
    test.write_text("print('a, edited')\n")
    assert framework_commit(repo) == f"{head}+dirty"
    assert framework_commit(tmp_path / "not-a-checkout") == ""
