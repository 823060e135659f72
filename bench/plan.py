"""Planner benchmark: our plan + dynamic dispatch against the framework's static shards and LPT.

1. The registered CUDA suite of a real RL framework (``../shared/workloads/rl-framework-cuda.csv``,
   enabled H200 tests): the framework's static shards (2-GPU: 2, 4-GPU: 3, 8-GPU: 2, stage-b: 1)
   against our plan on 3-6 nodes of 8 GPUs, with exact estimates and with actual durations drawn
   lognormally around est_time (median = est_time; several sigmas and seeds).
2. Random and adversarial workloads: planned makespan of ours vs plain longest-first.
3. Planning time for 10,000 tests.
Prints tables; goals are checked and reported, never asserted.
"""

from __future__ import annotations

import csv
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.core.model import Pool, Test  # noqa: E402
from pipelines.core.plan import (  # noqa: E402
    lower_bound,
    make_plan,
    shard_makespan,
    shards_gpus,
    simulate,
    static_shards,
)
from pipelines.core.specs import PoolSpec  # noqa: E402

WORKLOAD = ROOT.parent / "shared" / "workloads" / "rl-framework-cuda.csv"
SHARDS = {"stage-b-2-gpu-h200": 1, "stage-c-2-gpu-h200": 2, "stage-c-4-gpu-h200": 3, "stage-c-8-gpu-h200": 2}
SIGMAS = (0.1, 0.25, 0.5)
SEEDS = range(10)


def load_workload(path: Path = WORKLOAD) -> list[Test]:
    if not path.exists():
        raise SystemExit(f"bench/plan.py: {path} is missing; it holds the framework's registered suite "
                         f"(see ../shared/workloads/README.md); put the CSV there or edit WORKLOAD")
    tests = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if row["enabled"] != "yes" or not row["suite"].endswith("-h200"):
                continue
            tests.append(Test(id=row["test_id"], path=f"tests/{row['test_id']}.py", backend="cuda", suite=row["suite"],
                              gpus=int(row["gpus"]), est_time=int(row["est_time_s"]),
                              labels=tuple(row["labels"].split(";")), hardware="h200"))
    return tests


def noisy(tests: list[Test], sigma: float, seed: int) -> dict[str, float]:
    rng = random.Random(seed * 1000 + int(sigma * 100))
    return {t.id: t.est_time * rng.lognormvariate(0.0, sigma) for t in tests}


def framework(tests: list[Test]) -> None:
    shards = static_shards(tests, SHARDS)
    est = {t.id: float(t.est_time) for t in tests}
    static_est = shard_makespan(shards, est)
    print(f"# Framework suite: {len(tests)} enabled H200 tests, {sum(t.est_time * t.gpus for t in tests)} GPU-s")
    print(f"static shards: {shards_gpus(shards)} GPUs held, makespan {static_est:.0f} s (estimates)\n")
    print("exact estimates (plan = dispatch):")
    print("| nodes | GPUs | lower bound | plain LPT | ratio | ours | ratio | vs static | plan time |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    plans = {}
    for n in (3, 4, 5, 6):
        pools = [PoolSpec("h200", n, 8)]
        lpt = make_plan(tests, pools, improve=False)
        t0 = time.perf_counter()
        ours = make_plan(tests, pools)
        dt = time.perf_counter() - t0
        plans[n] = (pools, lpt, ours)
        print(f"| {n} | {8 * n} | {ours.lower_bound_s:.0f} | {lpt.makespan_s:.0f} | {lpt.ratio:.3f} | "
              f"{ours.makespan_s:.0f} | {ours.ratio:.3f} | {ours.makespan_s / static_est - 1:+.1%} | {dt:.2f} s |")
    print(f"\nnoisy actual durations (lognormal around est_time, sigmas {SIGMAS}, {len(SEEDS)} seeds each):")
    print("| nodes | sigma | static shards mean | plain LPT mean | ours mean | ours / actual LB (mean, max) | ours < static | "
          "ours <= strict order | ours <= plain LPT |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, (_pools, lpt, ours) in plans.items():
        shape = [Pool("h200", n, 8)]
        for sigma in SIGMAS:
            st_ms, our_ms, lpt_ms, ratios, wins, strict_ok, lpt_ok = [], [], [], [], 0, 0, 0
            for seed in SEEDS:
                actual = noisy(tests, sigma, seed)
                s = shard_makespan(shards, actual)
                o = simulate(ours, shape, actual)
                strict = simulate(ours, shape, actual, backfill=False)
                plain = simulate(lpt, shape, actual)
                lb = lower_bound(((actual[t.id], t.gpus) for t in tests), shape[0])
                st_ms.append(s)
                our_ms.append(o)
                lpt_ms.append(plain)
                ratios.append(o / lb)
                wins += o < s
                strict_ok += o <= strict + 1e-6
                lpt_ok += o <= plain + 1e-6
            k = len(SEEDS)
            print(f"| {n} | {sigma} | {statistics.mean(st_ms):.0f} | {statistics.mean(lpt_ms):.0f} | "
                  f"{statistics.mean(our_ms):.0f} | "
                  f"{statistics.mean(ratios):.3f}, {max(ratios):.3f} | {wins}/{k} | {strict_ok}/{k} | {lpt_ok}/{k} |")


def random_tests(rng: random.Random, n: int, sizes=(1, 2, 4, 6, 8)) -> list[Test]:
    return [Test(id=f"r{i:05d}", path=f"tests/r{i:05d}.py", backend="cuda", suite="s", hardware="h200",
                 gpus=rng.choice(sizes), est_time=max(10, int(rng.lognormvariate(6.5, 0.9)) // 10 * 10))
            for i in range(n)]


def graham(m: int) -> list[Test]:
    """Longest-first's classic worst case on m whole-node runners: 2m+1 jobs, LPT = (4m-1)/3m x OPT."""
    times = [2 * m - k // 2 for k in range(2 * m)] + [m]
    return [Test(id=f"g{i:02d}", path=f"tests/g{i:02d}.py", backend="cuda", suite="s", hardware="h200",
                 gpus=8, est_time=100 * d) for i, d in enumerate(times)]


def fragments(m: int) -> list[Test]:
    """Mixed sizes that fragment nodes under longest-first: 5-, 3- and 6-GPU tests of near-equal length."""
    out = []
    for i in range(3 * m):
        out.append(Test(id=f"f5-{i}", path=f"tests/f5-{i}.py", backend="cuda", suite="s", hardware="h200",
                        gpus=5, est_time=1000 + 10 * i))
        out.append(Test(id=f"f3-{i}", path=f"tests/f3-{i}.py", backend="cuda", suite="s", hardware="h200",
                        gpus=3, est_time=990 - 10 * i))
    out += [Test(id=f"f6-{i}", path=f"tests/f6-{i}.py", backend="cuda", suite="s", hardware="h200",
                 gpus=6, est_time=1500) for i in range(m)]
    return out


def synthetic() -> None:
    print("\n# Synthetic workloads: planned makespan / lower bound (exact estimates)")
    print("| workload | cases | plain LPT mean, max | ours mean, max | ours <= LPT | ours < LPT |")
    print("|---|---:|---:|---:|---:|---:|")
    rng = random.Random(7)
    cases = []
    for _ in range(100):
        cases.append(("random 20-120 tests, 2-6 nodes", random_tests(rng, rng.randint(20, 120)), rng.randint(2, 6)))
    cases += [("adversarial: Graham 2m+1 jobs", graham(m), m) for m in (2, 3, 4, 5, 6)]
    cases += [("adversarial: 5+3 and 6-GPU mix", fragments(m), m) for m in (2, 3, 4, 5, 6)]
    groups: dict[str, list[tuple[float, float]]] = {}
    for name, tests, nodes in cases:
        pools = [PoolSpec("h200", nodes, 8)]
        lpt = make_plan(tests, pools, improve=False)
        ours = make_plan(tests, pools, time_budget_s=0.3)
        groups.setdefault(name, []).append((lpt.ratio, ours.ratio))
    for name, rs in groups.items():
        lp, ou = [r[0] for r in rs], [r[1] for r in rs]
        print(f"| {name} | {len(rs)} | {statistics.mean(lp):.3f}, {max(lp):.3f} | {statistics.mean(ou):.3f}, "
              f"{max(ou):.3f} | {sum(o <= p + 1e-9 for p, o in rs)}/{len(rs)} | {sum(o < p - 1e-9 for p, o in rs)}/{len(rs)} |")


def speed() -> None:
    tests = random_tests(random.Random(3), 10_000)
    pools = [PoolSpec("h200", 64, 8)]
    t0 = time.perf_counter()
    lpt = make_plan(tests, pools, improve=False)
    t1 = time.perf_counter()
    ours = make_plan(tests, pools)
    t2 = time.perf_counter()
    print("\n# Planning 10,000 tests on 64 nodes x 8 GPUs")
    print(f"list schedule only: {t1 - t0:.2f} s (ratio {lpt.ratio:.4f}); with improvement step: {t2 - t1:.2f} s "
          f"(ratio {ours.ratio:.4f}); goal < 1 s")


def main() -> None:
    framework(load_workload())
    synthetic()
    speed()


if __name__ == "__main__":
    main()
