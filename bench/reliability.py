"""What the reliability guards cost: cache verification, the /proc scan, capped logs, launch overhead.

1. manifest verification of a cached entry (sha256 of every file) in MB/s: the price of proving
   a cache entry before reuse (``verify="size"`` skips the hashing);
2. one /proc scan for an attempt's marked processes (run at every attempt's end);
3. a test printing 50 MB through the capped log (20 MB cap), wall time;
4. a trivial test through LocalLauncher (record, locks, marker scan) against a bare subprocess.
Prints the figures.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.launch.base import LaunchRequest  # noqa: E402
from pipelines.launch.local import LocalLauncher  # noqa: E402
from pipelines.launch.procs import marked_pids  # noqa: E402
from pipelines.storage.manifest import damage, make_manifest  # noqa: E402
from tests.conftest import make_test  # noqa: E402


def _best(fn, n: int = 3) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog="bench/reliability.py", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def main(argv: list[str]) -> None:
    parser().parse_args(argv)  # no flags: --help says what it runs instead of running it
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        entry = tmp_path / "entry"
        entry.mkdir()
        for i in range(8):
            (entry / f"shard{i}.bin").write_bytes(bytes(range(256)) * (4 * 4096))  # 8 x 4 MiB
        size_mb = 32
        t_make = _best(lambda: make_manifest(entry))
        import json
        (entry / ".nightly-complete.json").write_text(json.dumps({"manifest": make_manifest(entry)}))
        t_full = _best(lambda: damage(entry, "full"))
        t_size = _best(lambda: damage(entry, "size"))
        print(f"cache manifest: build {size_mb / t_make:.0f} MB/s, full verify {size_mb / t_full:.0f} MB/s, "
              f"size-only verify {t_size * 1000:.2f} ms for 8 files")
        t_scan = _best(lambda: marked_pids("0" * 32), 5)
        procs = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())
        print(f"/proc scan for an attempt's processes: {t_scan * 1000:.1f} ms ({procs} processes)")

        repo = tmp_path / "repo"
        (repo / "tests").mkdir(parents=True)
        (repo / "tests" / "test_loud.py").write_text(textwrap.dedent("""\
            import sys
            def execute():
                line = "x" * 99 + "\\n"
                for _ in range(500_000):
                    sys.stdout.write(line)
        """))
        (repo / "tests" / "test_quiet.py").write_text("def execute():\n    pass\n")
        launcher = LocalLauncher(tmp_path / "state")

        def run(name: str) -> None:
            test = make_test(id=name, path=f"tests/{name}.py", gpus=1)
            launcher.launch(LaunchRequest(test=test, repo_path=repo, timeout_s=300,
                                          log_path=tmp_path / "logs" / f"{name}.log", gpu_slots=(0,)))

        t_loud = _best(lambda: run("test_loud"), 1)
        log_mb = (tmp_path / "logs" / "test_loud.log").stat().st_size / 1e6
        print(f"50 MB of output through the capped log: {t_loud:.2f} s, log kept {log_mb:.1f} MB")
        t_launch = _best(lambda: run("test_quiet"), 5)
        t_bare = _best(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), 5)
        print(f"trivial test through LocalLauncher: {t_launch:.3f} s; bare python subprocess {t_bare:.3f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
