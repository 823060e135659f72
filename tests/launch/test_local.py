"""The local launcher: outcomes, timeouts that kill the whole process group, GPU slots, logs."""

from __future__ import annotations

import os
import textwrap
import threading
import time
from pathlib import Path

from pipelines.launch.base import LaunchRequest, tail
from pipelines.launch.local import LocalLauncher, gpu_locks
from tests.conftest import make_test


def _repo(tmp_path: Path, body: str) -> Path:
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_x.py").write_text(textwrap.dedent(body))
    return repo


def _request(repo: Path, tmp_path: Path, timeout_s: int = 30, slots=(0, 1), **kw) -> LaunchRequest:
    test = make_test(id="tests/test_x.py", path="tests/test_x.py", gpus=len(slots))
    return LaunchRequest(test=test, repo_path=repo, timeout_s=timeout_s, log_path=tmp_path / "logs" / "x.log",
                         pool="h200", gpu_slots=tuple(slots), **kw)


def test_execute_runs_without_prepare_and_passes(tmp_path):
    repo = _repo(tmp_path, """
        import os
        def prepare():
            raise SystemExit("prepare must not run: the assets did its work")
        def execute():
            print("gpus", os.environ["CUDA_VISIBLE_DEVICES"], "marker", os.environ["MARK"])
        if __name__ == "__main__":
            prepare(); execute()
    """)
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path, env={"MARK": "m1"}))
    assert attempt.outcome == "passed", tail(attempt.log_path)
    assert "gpus 0,1 marker m1" in Path(attempt.log_path).read_text()
    assert attempt.gpu_slots == (0, 1) and attempt.node == "local-h200-0"


def test_a_failing_execute_is_failed_with_its_error(tmp_path):
    repo = _repo(tmp_path, """
        def execute():
            raise AssertionError("loss did not go down: 1.0 -> 1.2")
    """)
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path))
    assert attempt.outcome == "failed"
    assert attempt.exit_code == 1
    assert "loss did not go down" in attempt.reason


def test_a_hanging_test_is_killed_with_its_children_at_the_timeout(tmp_path):
    repo = _repo(tmp_path, """
        import subprocess, sys, time
        def execute():
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            open("child.pid", "w").write(str(child.pid))
            time.sleep(600)
    """)
    t0 = time.monotonic()
    attempt = LocalLauncher(tmp_path / "state", kill_grace_s=1).launch(_request(repo, tmp_path, timeout_s=5))
    assert attempt.outcome == "timed_out"
    assert time.monotonic() - t0 < 20
    child = int((repo / "child.pid").read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


def test_a_missing_execute_function_fails_with_a_message_that_says_so(tmp_path):
    repo = _repo(tmp_path, "X = 1\n")
    attempt = LocalLauncher(tmp_path / "state").launch(_request(repo, tmp_path))
    assert attempt.outcome == "failed"
    assert "has no function execute()" in attempt.reason


def test_gpu_locks_block_a_second_holder_of_the_same_slot(tmp_path):
    order: list[str] = []
    with gpu_locks(tmp_path, "h200", 0, (3,)):
        def other():
            with gpu_locks(tmp_path, "h200", 0, (3,)):
                order.append("second")
        t = threading.Thread(target=other)
        t.start()
        time.sleep(0.3)
        order.append("first-released")
    t.join(timeout=5)
    assert order == ["first-released", "second"]


def test_test_data_never_reaches_a_shell(tmp_path):
    repo = _repo(tmp_path, "def execute():\n    pass\n")
    hostile = make_test(id="tests/test_x.py", path="tests/test_x.py", args=("; touch pwned", "$(touch pwned2)"))
    req = LaunchRequest(test=hostile, repo_path=repo, timeout_s=30, log_path=tmp_path / "l.log", gpu_slots=(0,))
    attempt = LocalLauncher(tmp_path / "state").launch(req)
    assert attempt.outcome == "passed"
    assert not any(p.name.startswith("pwned") for p in repo.iterdir())
    assert os.path.exists(tmp_path / "l.log")
