"""What years of history cost: the flakiness replay and calibration as the history grows.

Both run every night (the replay twice, and once per report) over the whole history of a repo:
a cost that grows faster than the history makes an old deployment slow for no reason.

1. ``night_records`` (the flakiness and quarantine replay) over N nights of 100 tests on 4 nodes,
   3 % failures (so most nights ask the bad-node rules, with the earlier runs as evidence);
2. ``calibrate`` (bucket125: every run of the current file) of one test with N passing samples,
   1 in 50 an outlier the relative screen must leave out.

``python bench/history.py [--nights 125,250,500,1000] [--samples 365,1000,4000]``. Prints seconds;
linear growth doubles the time when N doubles.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.core.calibrate import calibrate  # noqa: E402
from pipelines.core.flaky import night_records  # noqa: E402
from pipelines.core.model import Sample  # noqa: E402
from tests.conftest import make_test  # noqa: E402

START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def nights(n: int, tests: int = 100, nodes: int = 4, fail: float = 0.03, seed: int = 1) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for k in range(n):
        at = (START + dt.timedelta(days=k)).isoformat(timespec="seconds")
        out += [Sample(f"tests/e2e/test_{t}.py", "h200", "x", "failed" if rng.random() < fail else "passed", 900.0,
                       at, node=f"node-{rng.randrange(nodes)}", run_id=f"run-{k}") for t in range(tests)]
    return out


def runs_of_one_test(n: int, seed: int = 2) -> list[Sample]:
    rng = random.Random(seed)
    return [Sample("tests/e2e/test_a.py", "h200", "0" * 64, "passed",
                   rng.uniform(900, 1000) if i % 50 else 99_999.0,
                   (START + dt.timedelta(hours=i)).isoformat(), run_id=f"run-{i}") for i in range(n)]


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers separated by commas, e.g. 125,250") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every number must be 1 or more")
    return values


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nights", type=_ints, default=[125, 250, 500, 1000], help="nights of 100 tests to replay")
    p.add_argument("--samples", type=_ints, default=[365, 1000, 4000], help="samples of one test to calibrate")
    args = p.parse_args(argv)
    print("# flakiness replay (night_records), 100 tests on 4 nodes, 3 % failures")
    for n in args.nights:
        samples = nights(n)
        t0 = time.perf_counter()
        night_records(samples)
        print(f"{n:>6} nights: {time.perf_counter() - t0:6.2f} s", flush=True)
    print("# calibrate bucket125, one test")
    test = make_test(id="tests/e2e/test_a.py", est_time=1200, sha256="0" * 64, hardware="h200")
    for n in args.samples:
        samples = runs_of_one_test(n)
        t0 = time.perf_counter()
        [est] = calibrate([test], samples, "bucket125", now=START + dt.timedelta(hours=n + 1))
        print(f"{n:>6} samples: {time.perf_counter() - t0:6.3f} s (proposed {est.proposed} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
