"""Time and memory of ``nightly history import`` on a big framework M job log.

Generates one job log of about ``--mb`` MB shaped like a real one (GitHub timestamps, the runner's
command line, long test output: training steps, ninja build lines while a kernel JIT-builds,
progress bars redrawn with carriage returns, an End block and a summary line per attempt, failures
and timeouts) for the example framework's files, optionally as the GitHub log archive .zip (the
whole job's log and one step's), then runs ``history import --dry-run`` on it in a fresh process
and prints its wall time and peak RSS. A 200 MB log once took 881 MB of memory read whole; read
line by line it takes little more than the interpreter and the catalog.

    .venv/bin/python bench/history_import.py [--mb 200] [--zip] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPO = ROOT / "examples" / "minirl"
SUITE = "stage-c-4-gpu-h200"
FILES = ("tests/e2e/megatron/test_grpo_math.py", "tests/e2e/megatron/test_sft_math.py",
         "tests/e2e/test_backend_matrix.py")


def write_log(path: Path, mb: float, seed: int = 1) -> tuple[int, int]:
    """A job log of about ``mb`` MB at ``path``; returns (lines, attempts)."""
    rng = random.Random(seed)
    t = datetime(2026, 11, 30, 15, tzinfo=UTC)
    target, size, lines, attempts = int(mb * 1e6), 0, 0, 0
    with open(path, "w", encoding="utf-8", newline="") as fh:
        def put(text: str) -> None:
            nonlocal size, lines
            line = f"{t:%Y-%m-%dT%H:%M:%S}.{t.microsecond:06d}7Z {text}\n"  # GitHub's 7 digits
            fh.write(line)
            size += len(line)
            lines += 1

        put(f"python3 run_suite.py --suite {SUITE} --hw cuda --timeout-per-file 1800")
        while size < target:
            file = FILES[attempts % len(FILES)]
            start = t
            for i in range(1, 4):
                put(f"[{i}/3] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c "
                    f"/root/x/kernel_{i}.cu -o kernel_{i}.o")
            for step in range(rng.randint(2000, 6000)):
                t += timedelta(milliseconds=rng.randint(50, 400))
                put(f"step {step} loss {rng.random():.4f} lr 1e-5 grad_norm {rng.random() * 3:.3f} "
                    f"tokens/s {rng.randint(9000, 12000)}")
                if step % 500 == 0:
                    put("Loading weights: " + "".join(f"\r{p}%|{'#' * (p // 10)}" for p in range(0, 101, 20)))
            elapsed = round((t - start).total_seconds())
            attempts += 1
            if attempts % 17 == 0:
                put(f"TIMEOUT: {file} after {elapsed} seconds")
                put(f"[{attempts % 12 + 1}/12] {file}  TIMEOUT  elapsed={elapsed}s timeout_after={elapsed}s")
                continue
            status = "FAIL" if attempts % 11 == 0 else "PASS"
            put(".")
            put(f"End ({attempts % 12 + 1}/12):")
            put(f"filename='{file}', elapsed={elapsed}, _estimated_time=30")
            put(".")
            put(f"[{attempts % 12 + 1}/12] {file}  {status}  elapsed={elapsed}s" + (" exit=1" if status == "FAIL" else ""))
    return lines, attempts


def run_import(log: Path, home: Path) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MB, the import's first line) of one ``history import --dry-run``."""
    env = {**os.environ, "NIGHTLY_HOME": str(home)}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pipelines", "history", "import", "--repo", str(REPO),
                             "--dry-run", str(log)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"history import failed:\n{out[-2000:]}")
    return wall, usage.ru_maxrss / 1024, out.splitlines()[0] if out else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=200, help="size of the generated log in MB (default 200)")
    ap.add_argument("--zip", action="store_true", help="also import it as a GitHub log archive .zip")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="write the log here and keep it")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / "job.txt"
        t0 = time.perf_counter()
        lines, attempts = write_log(log, args.mb)
        size = log.stat().st_size / 1e6
        print(f"generated {log}: {size:.0f} MB, {lines:,} lines, {attempts} attempts in "
              f"{time.perf_counter() - t0:.1f} s")
        targets = [("log", log)]
        if args.zip:
            archive = folder / "logs.zip"
            with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
                zf.write(log, "0_run-tests.txt")
                zf.write(log, "run-tests/3_Run tests.txt")
            targets.append(("zip (two members)", archive))
        for what, path in targets:
            wall, rss, said = run_import(path, Path(tmp) / "home")
            print(f"history import --dry-run, {what}: {wall:.1f} s, peak RSS {rss:.0f} MB ({said})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
