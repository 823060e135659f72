"""Run one test attempt as a local subprocess on reserved (virtual) GPU slots.

The child runs in its own process group so a timeout kills the test and everything it spawned
(torchrun workers, servers). GPU slots are also held as ``flock`` locks on per-GPU files, the way
framework S shares GPUs on a host, so two nightly processes on one machine never oversubscribe.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from pipelines.core.model import Attempt
from pipelines.launch.base import LaunchRequest, LogSink

WRAPPER = Path(__file__).with_name("wrapper.py")
KILL_GRACE_S = 5.0


@contextlib.contextmanager
def gpu_locks(lock_dir: Path, pool: str, node: int, slots: tuple[int, ...]) -> Iterator[None]:
    """Hold an exclusive lock per GPU slot; blocks while another process holds one."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    handles = []
    try:
        for slot in sorted(slots):
            fh = open(lock_dir / f"{pool}-node{node}-gpu{slot}.lock", "a+")
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            handles.append(fh)
        yield
    finally:
        for fh in handles:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            fh.close()


def _kill_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the whole process group, then SIGKILL what is left after the grace period."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


class LocalLauncher:
    """Subprocesses on this machine; ``CUDA_VISIBLE_DEVICES`` from the reserved slots."""

    name = "local"

    def __init__(self, state_dir: Path, python: str = sys.executable, kill_grace_s: float = KILL_GRACE_S):
        self.state_dir = Path(state_dir)
        self.python = python
        self.kill_grace_s = kill_grace_s

    def argv(self, request: LaunchRequest, result_path: Path) -> list[str]:
        test = request.test
        return [
            self.python,
            str(WRAPPER),
            "--file",
            test.path,
            "--result",
            str(result_path),
            "--",
            *test.args,
        ]

    def launch(self, request: LaunchRequest, on_log: LogSink | None = None) -> Attempt:
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        result_path = request.log_path.with_suffix(".result.json")
        result_path.unlink(missing_ok=True)
        env = {**os.environ, **request.env, **dict(request.test.env)}
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(s) for s in request.gpu_slots)
        env["NIGHTLY_TEST_ID"] = request.test.id
        env["NIGHTLY_ATTEMPT"] = str(request.attempt)
        env.setdefault("PYTHONUNBUFFERED", "1")
        node = f"local-{request.pool}-{request.node}" if request.pool else f"local-{request.node}"
        started_at = datetime.now(UTC).isoformat(timespec="seconds")
        with gpu_locks(self.state_dir / "gpu-locks", request.pool or "pool", request.node, request.gpu_slots):
            t0 = time.monotonic()
            with open(request.log_path, "wb") as log:
                header = f"# nightly: {request.test.id} attempt {request.attempt} on {node} gpus={env['CUDA_VISIBLE_DEVICES']} timeout={request.timeout_s}s\n"
                log.write(header.encode())
                log.flush()
                proc = subprocess.Popen(
                    self.argv(request, result_path),
                    cwd=request.repo_path,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                timed_out = self._wait(proc, request, on_log)
            elapsed = time.monotonic() - t0
        result = _read_result(result_path)
        if timed_out:
            outcome, reason = "timed_out", f"killed after the {request.timeout_s}s timeout"
        elif proc.returncode == 0:
            outcome, reason = "passed", ""
        else:
            outcome = "failed"
            reason = result.get("error") or f"exit code {proc.returncode}"
            if proc.returncode and proc.returncode < 0:
                reason = f"killed by signal {-proc.returncode}"
        return Attempt(
            test_id=request.test.id,
            outcome=outcome,
            elapsed_s=round(elapsed, 3),
            started_at=started_at,
            attempt=request.attempt,
            node=node,
            gpu_slots=request.gpu_slots,
            exit_code=proc.returncode,
            reason=reason,
            log_path=str(request.log_path),
            timeout_s=request.timeout_s,
            details={k: str(v) for k, v in result.items() if k in ("execute_s", "error")},
        )

    def _wait(self, proc: subprocess.Popen, request: LaunchRequest, on_log: LogSink | None) -> bool:
        """Wait for the child (streaming its log to ``on_log``); True when the timeout killed it."""
        stop = threading.Event()
        follower = None
        if on_log is not None:
            follower = threading.Thread(target=_follow, args=(request.log_path, on_log, stop), daemon=True)
            follower.start()
        try:
            proc.wait(timeout=request.timeout_s)
            return False
        except subprocess.TimeoutExpired:
            _kill_group(proc, self.kill_grace_s)
            return True
        finally:
            # the test may have left children in its group even when it exited by itself
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            stop.set()
            if follower is not None:
                follower.join(timeout=2)


def _follow(path: Path, on_log: LogSink, stop: threading.Event) -> None:
    with open(path, encoding="utf-8", errors="replace") as fh:
        while True:
            line = fh.readline()
            if line:
                on_log(line.rstrip("\n"))
            elif stop.is_set():
                return
            else:
                time.sleep(0.1)


def _read_result(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
