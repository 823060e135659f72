"""Memory a night spends on capped logs: the peak RSS growth for N tests flooding their logs at once.

Each size runs in a fresh interpreter (so no size inherits another's freed heap): N capped logs
(the 20 MB default cap, as the local launcher opens them) are written side by side, 64 KB to each
in turn, until every one has taken --mb MB; then they are closed. Prints the peak RSS growth over
the interpreter's RSS before the first write (VmHWM - VmRSS, /proc/self/status), the wall time,
and checks that every log holds the cap's head, the cut line and the tail.
The sizes are ``--sizes`` (default 1,4,8,16); before the tail went to a spill file, 60 MB per log
grew the RSS by about 23, 57, 103 and 193 MB.

    .venv/bin/python bench/logcap.py [--sizes 1,4,8,16] [--mb 60]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.launch.logcap import DEFAULT_LOG_CAP_BYTES, CappedLog  # noqa: E402

CHUNK = 64 * 1024


def _kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def one(n: int, mb: int) -> dict:
    """Flood ``n`` logs of ``mb`` MB each in this process; the peak RSS growth in MB and the seconds."""
    chunk = (b"x" * 127 + b"\n") * (CHUNK // 128)
    rounds = mb * 1024 * 1024 // CHUNK
    with tempfile.TemporaryDirectory(prefix="bench-logcap-") as tmp:
        paths = [Path(tmp) / f"test{i}.attempt1.log" for i in range(n)]
        logs = [CappedLog(open(p, "wb")) for p in paths]  # noqa: SIM115 (closed by CappedLog.close)
        before = _kb("VmRSS")
        t0 = time.perf_counter()
        for _ in range(rounds):
            for log in logs:
                log.write(chunk)
        for log in logs:
            log.close()
        seconds = time.perf_counter() - t0
        peak = _kb("VmHWM")
        for p in paths:
            size = p.stat().st_size
            with p.open("rb") as f:
                f.seek(DEFAULT_LOG_CAP_BYTES // 2)
                cut = f.readline() + f.readline()
                f.seek(-len(chunk), 2)
                end = f.read()
            if b"# nightly: output cut here:" not in cut or end != chunk or size > DEFAULT_LOG_CAP_BYTES + 1024:
                raise SystemExit(f"{p.name}: not head, cut line and tail ({size} bytes)")
    return {"n": n, "rss_mb": max(peak - before, 0) / 1024, "seconds": seconds}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench/logcap.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1,4,8,16", help="how many logs are open at once, comma-separated")
    p.add_argument("--mb", type=int, default=60, help="MB written into each log (default 60)")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one size, prints JSON
    return p


def main(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    if args.one is not None:
        print(json.dumps(one(args.one, args.mb)))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"capped logs (cap {DEFAULT_LOG_CAP_BYTES // 2**20} MB) flooded with {args.mb} MB each, side by side:")
    for n in sizes:
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--mb", str(args.mb)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout)
        print(f"  {n:3d} open logs: peak RSS +{r['rss_mb']:.1f} MB, {r['seconds']:.1f} s "
              f"({n * args.mb / r['seconds']:.0f} MB/s)")


if __name__ == "__main__":
    main(sys.argv[1:])
