"""Replay synthetic nights and compare calibration policies against never recalibrating.

  .venv/bin/python bench/calibration.py [--nights 60] [--tests 40] [--floor 300] [--seed 1]

Each night every test runs once with its true duration: a per-test base (lognormal, 2-40 min),
a slow per-test drift (-10 %..+30 % over the replay), 5 % lognormal noise, a new image 30 %
slower for every test from night 30, and four test files edited on night 45 (new sha256, 40 %
faster: older samples become stale). 8 % of attempts fail flakily part-way and 2 % are infra
errors. A run is killed when its true duration exceeds its effective timeout
``max(floor, 1.25 * est_time)``; the floor defaults to 300 s, well under most durations, so the
estimate decides the timeout (with framework M's 1800 s floor most of these tests would be
shielded). After every night each policy recalibrates from all samples so far and the next
night uses its proposals. Initial est_time values are stale: 0.6x to 2.5x the true duration.

Columns: est err = mean |est - true median| / true median over nights 1..N-1; after step =
the same over nights 30..34; killed = runs killed by a timeout that they would have passed;
edits = est_time changes proposed (PR churn); dyn/LB = makespan of the planner's plan (made
from the estimates) under dynamic dispatch with the night's true durations, over the
true-duration lower bound; shards = the same night under framework M's static LPT shards
(2 per suite, assigned by est_time) in hours. Both use full true durations, so kills do not
make a bad policy look fast. "+raise" turns on ``raise_on_timeout``: a test
whose newest run was killed gets 1.25x the killed run's elapsed (bucketed), since a test that
always times out never yields the passing sample the policies need.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.core.calibrate import calibrate  # noqa: E402
from pipelines.core.model import Sample, Test, effective_timeout  # noqa: E402

POLICIES = {
    "never": None,
    "bucket125": ("bucket125", {}),
    "bucket125 21d": ("bucket125", {"window_days": 21, "max_samples": 15}),
    "p90": ("p90", {}),
    "median": ("median", {}),
    "bucket125 +raise": ("bucket125", {"raise_on_timeout": True}),
    "p90 +raise": ("p90", {"raise_on_timeout": True}),
}
T0 = datetime(2026, 10, 1, 15, tzinfo=UTC)


def make_world(n_tests: int, rng: random.Random):
    tests, base, slope = [], {}, {}
    for i in range(n_tests):
        gpus = rng.choice((2, 4, 4, 8))
        suite = f"stage-{'abc'[gpus // 4]}-{gpus}-gpu-h200"
        tid = f"tests/e2e/test_{i:02d}.py"
        base[tid] = min(2400.0, max(120.0, rng.lognormvariate(math.log(600), 0.6)))
        slope[tid] = rng.uniform(-0.10, 0.30)
        est = int(base[tid] * rng.uniform(0.6, 2.5))
        tests.append(Test(id=tid, path=tid, backend="cuda", suite=suite, gpus=gpus, est_time=est, hardware="h200",
                          sha256=f"{i:02d}" + "0" * 62))
    edited = {t.id for t in rng.sample(tests, 4)}
    return tests, base, slope, edited


def true_median(tid: str, night: int, nights: int, base, slope, edited) -> float:
    d = base[tid] * (1 + slope[tid] * night / nights)
    if night >= 30:
        d *= 1.3
    if night >= 45 and tid in edited:
        d *= 0.6
    return d


def replay(args) -> dict[str, dict[str, float]]:
    rng = random.Random(args.seed)
    tests0, base, slope, edited = make_world(args.tests, rng)
    try:
        from pipelines.core.plan import lower_bound, make_plan, shard_makespan, simulate, static_shards
        from pipelines.core.specs import PoolSpec
        pools = [PoolSpec("h200", nodes=4, gpus_per_node=8, hardware=("h200",))]
    except ImportError:
        make_plan = None
    # The same world for every policy: draws per (night, test) fixed in advance.
    draws = {(n, t.id): (rng.lognormvariate(0, 0.05), rng.random(), rng.random())
             for n in range(args.nights) for t in tests0}
    out = {}
    for name, pol in POLICIES.items():
        tests = list(tests0)
        samples: list[Sample] = []
        errs, step_errs, killed, edits, ratios, shard_h = [], [], 0, 0, [], []
        for night in range(args.nights):
            if night == 45:
                tests = [replace(t, sha256="e" * 64) if t.id in edited else t for t in tests]
            now = T0 + timedelta(days=night)
            actual = {}
            for t in tests:
                mu = true_median(t.id, night, args.nights, base, slope, edited)
                noise, flaky, frac = draws[(night, t.id)]
                dur = mu * noise
                timeout = effective_timeout(t.est_time, args.floor, 1.25)
                if night:
                    err = abs(t.est_time - mu) / mu
                    errs.append(err)
                    if 30 <= night < 35:
                        step_errs.append(err)
                if flaky < 0.02:
                    outcome, elapsed = "infra_error", 5.0
                elif flaky < 0.10:
                    outcome, elapsed = "failed", dur * (0.05 + 0.95 * frac)
                else:
                    outcome, elapsed = "passed", dur
                if elapsed > timeout:
                    killed += outcome == "passed"
                    outcome, elapsed = "timed_out", float(timeout)
                actual[t.id] = dur  # planning quality: what the night takes if nothing is cut short
                samples.append(Sample(t.id, "h200", t.sha256, outcome, round(elapsed), now.isoformat(),
                                      run_id=f"night-{night}", source=f"night-{night}", capped=outcome == "timed_out"))
            if make_plan:
                plan = make_plan(tests, pools, timeout_floor_s=args.floor, improve=False)
                lb = lower_bound([(actual[t.id], t.gpus) for t in tests], pools[0].pool())
                ratios.append(simulate(plan, pools, actual) / lb)
                shard_h.append(shard_makespan(static_shards(tests, {s: 2 for s in {t.suite for t in tests}}),
                                              actual) / 3600)
            if pol:
                est = {e.test_id: e.proposed for e in calibrate(tests, samples, pol[0], pol[1], now=now)}
                edits += sum(est[t.id] != t.est_time for t in tests)
                tests = [replace(t, est_time=est[t.id]) for t in tests]
        out[name] = {"err": 100 * statistics.mean(errs), "step": 100 * statistics.mean(step_errs), "killed": killed,
                     "edits": edits, "dyn": statistics.mean(ratios) if ratios else float("nan"),
                     "shards": statistics.mean(shard_h) if shard_h else float("nan")}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nights", type=int, default=60)
    p.add_argument("--tests", type=int, default=40)
    p.add_argument("--floor", type=int, default=300, help="timeout floor in seconds (framework M uses 1800)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    t0 = time.monotonic()
    res = replay(args)
    print(f"{args.nights} nights x {args.tests} tests, timeout max({args.floor} s, 1.25 x est_time), seed {args.seed}")
    print(f"{'policy':<16} {'est err %':>9} {'after step %':>12} {'killed':>6} {'edits':>6} {'dyn/LB':>7} {'shards h':>8}")
    for name, r in res.items():
        print(f"{name:<16} {r['err']:>9.1f} {r['step']:>12.1f} {r['killed']:>6} {r['edits']:>6} "
              f"{r['dyn']:>7.3f} {r['shards']:>8.2f}")
    print(f"({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
