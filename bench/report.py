"""Night report benchmark: 100 nights x 1,000 tests of history (goal: the report in < 2 s).

Generates 100 night summaries of 1,000 tests on 4 nodes x 8 GPUs (about 2 % failures, 1 % hangs,
a few tests that pass on retry, one image change), stores their ~100,000 samples in a local
SQLite history store, then times each step of ``nightly report``: reading history, replaying the
flaky state machine, building every section (pure) and rendering the HTML page (calibration is
the night's own step; the report reuses its evidence). Prints wall and CPU time (a busy shared
machine inflates wall time); goals are reported, never asserted.
``python bench/report.py [NIGHTS] [TESTS]``
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.core.calibrate import calibrate  # noqa: E402
from pipelines.core.flaky import recorded_states, replay, states_from_summary  # noqa: E402
from pipelines.core.history import FileHistoryStore, sample_from_attempt  # noqa: E402
from pipelines.core.model import Attempt, Test  # noqa: E402
from pipelines.core.report import build_report  # noqa: E402

NODES, GPUS = 4, 8


def make_tests(n: int, rng: random.Random) -> list[Test]:
    return [Test(id=f"tests/e2e/suite_{i % 17}/test_case_{i}.py", path=f"tests/e2e/suite_{i % 17}/test_case_{i}.py",
                 backend="cuda", suite="stage-c-8-gpu-h200", gpus=rng.choice([1, 2, 4, 8]),
                 est_time=rng.choice([60, 120, 300, 600, 900, 1200]), hardware="h200", sha256="a" * 64)
            for i in range(n)]


def make_night(k: int, tests: list[Test], rng: random.Random, flaky: set[str]) -> dict:
    start = datetime(2026, 8, 1, 15, tzinfo=UTC) + timedelta(days=k)
    free = [[0.0] * GPUS for _ in range(NODES)]
    attempts = []
    for t in tests:
        node = min(range(NODES), key=lambda n: sorted(free[n])[t.gpus - 1])
        slots = sorted(range(GPUS), key=lambda g: free[node][g])[:t.gpus]
        at = max(free[node][g] for g in slots)
        r = rng.random()
        outcomes = ["failed", "passed"] if t.id in flaky and r < 0.3 else \
            ["failed"] if r < 0.02 else ["timed_out"] if r < 0.03 else ["passed"]
        for number, outcome in enumerate(outcomes, start=1):
            elapsed = t.est_time * 1.25 if outcome == "timed_out" else t.est_time * rng.uniform(0.6, 1.1)
            attempts.append(Attempt(t.id, outcome, round(elapsed, 1),  # type: ignore[arg-type]
                                    (start + timedelta(seconds=at)).isoformat(timespec="seconds"), number,
                                    f"h200-{node}", tuple(slots), 0 if outcome == "passed" else 1,
                                    log_path=f"/nonexistent/logs/{k}/{t.id}.attempt{number}.log", timeout_s=1800))
            at += elapsed
        for g in slots:
            free[node][g] = at
    makespan = max(max(f) for f in free)
    return {"night": start.strftime("%Y-%m-%dT%H%M%SZ"), "run_id": f"run-{k:03d}", "cadence": "nightly",
            "selected": [t.id for t in tests], "skipped": [], "attempts": [dataclasses.asdict(a) for a in attempts],
            "predicted_makespan_s": makespan * 0.97, "lower_bound_s": makespan * 0.9, "actual_makespan_s": makespan,
            "unplanned": [], "notes": [], "image_digest": "sha256:old" if k < 90 else "sha256:new",
            "est_time": {t.id: t.est_time for t in tests}}


CPU: list[float] = []


def timed(label: str, fn):
    """Wall and CPU time of one step (CPU time says what a busy shared machine hides)."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    CPU.append(time.process_time() - c0)
    print(f"  {label:<44} {time.perf_counter() - t0:7.2f} s wall {CPU[-1]:7.2f} s CPU")
    return out


def main(nights: int = 100, n_tests: int = 1000) -> None:
    rng = random.Random(1)
    tests = make_tests(n_tests, rng)
    by_id = {t.id: t for t in tests}
    flaky = {t.id for t in rng.sample(tests, 10)}
    print(f"report benchmark: {nights} nights x {n_tests} tests on {NODES} nodes x {GPUS} GPUs")
    summaries = [make_night(k, tests, rng, flaky) for k in range(nights)]
    with tempfile.TemporaryDirectory() as tmp:
        store = FileHistoryStore(Path(tmp) / "history.sqlite")
        store.append(sample_from_attempt(Attempt(**{**a, "gpu_slots": tuple(a["gpu_slots"])}), by_id[a["test_id"]],
                                         s["run_id"], s["image_digest"]) for s in summaries for a in s["attempts"])
        estimates = calibrate(tests, store.read())  # the night's calibration: the report reads its evidence CSV
        t0 = time.perf_counter()
        samples = timed("read history (SQLite)", store.read)
        print(f"  ({len(samples):,} samples)")
        states = timed("replay flaky state machine", lambda: replay(samples))
        data = timed("build_report (every section, pure)", lambda: build_report(
            summaries[-1], summaries[-15:-1], samples, tests, estimates, states=states))
        core, core_cpu = time.perf_counter() - t0, sum(CPU)

        def render() -> str:
            from pipelines.reporting.html import render_html  # matplotlib's import is part of the cost

            return render_html(data)

        page = timed("render HTML (import matplotlib, draw plots)", render)
        total, total_cpu = time.perf_counter() - t0, sum(CPU)
        # the nightly path: the night replays once for its verdict and records the states in its summary
        tonight = {**summaries[-1], "flaky": recorded_states(states)}
        CPU.clear()
        print("  with the states the night recorded (no replay):")
        t1 = time.perf_counter()
        samples = timed("read history (SQLite)", store.read)
        timed("build_report (every section, pure)", lambda: build_report(
            tonight, summaries[-15:-1], samples, tests, estimates, states=states_from_summary(tonight["flaky"])))
        recorded, recorded_cpu = time.perf_counter() - t1, sum(CPU)
    quarantined = sum(1 for s in states.values() if s.state == "quarantined")
    print(f"  report: {data.verdict}; {len(data.failures)} failures, {len(data.gantt)} Gantt bars, "
          f"{len(data.trends)} trends, {quarantined} quarantined, page {len(page) / 1e6:.1f} MB")
    print(f"report built from the store in {core:.2f} s wall, {core_cpu:.2f} s CPU with a replay of every state, "
          f"{recorded:.2f} s wall, {recorded_cpu:.2f} s CPU with the states the night recorded "
          f"(goal < 2 s of CPU: {'met' if min(core_cpu, recorded_cpu) < 2 else 'NOT met'}; wall time counts the "
          f"other processes on a shared machine too); "
          f"the HTML page adds {total - core:.2f} s wall ({total_cpu - core_cpu:.2f} s CPU)")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench/report.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("nights", nargs="?", type=_count, default=100, help="nights of history (default 100)")
    p.add_argument("tests", nargs="?", type=_count, default=1000, help="tests per night (default 1000)")
    return p


if __name__ == "__main__":
    args = parser().parse_args()
    main(args.nights, args.tests)
