"""What every execute() does first and last: see its GPUs, honour injected faults, judge results.

Fault injection exists for the orchestrator's own tests:
  MINIRL_FAIL=<stem,stem>  the named tests fail at once with exit 1 and a clear message;
  MINIRL_HANG=<stem,stem>  the named tests sleep forever (no signal handlers: SIGTERM stops them).
  MINIRL_BARRIER=<dir>:<stem,stem>  the named tests each wait (up to MINIRL_BARRIER_S, default
      300 s, then fail) until all of them are running at the same time: proof, independent of
      machine speed, that an orchestrator ran them side by side.
A stem is the test file name without `.py`, e.g. `test_sft_math`.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def _named(var: str, stem: str) -> bool:
    return stem in {s.strip() for s in os.environ.get(var, "").split(",") if s.strip()}


def _barrier(stem: str) -> None:
    folder, _, names = os.environ.get("MINIRL_BARRIER", "").partition(":")
    wanted = {s.strip() for s in names.split(",") if s.strip()}
    if not folder or stem not in wanted:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / stem).write_text(str(os.getpid()))
    limit = float(os.environ.get("MINIRL_BARRIER_S", "300"))
    deadline = time.monotonic() + limit
    while {p.name for p in Path(folder).iterdir()} < wanted:
        if time.monotonic() > deadline:
            print(f"[minirl] {stem}: FAILED: {sorted(wanted)} were not all running within {limit:.0f} s",
                  file=sys.stderr, flush=True)
            raise SystemExit(1)
        time.sleep(0.2)
    print(f"[minirl] {stem}: all of {sorted(wanted)} are running at once", flush=True)


def visible_gpus(expected: int) -> int:
    """Count of GPUs in CUDA_VISIBLE_DEVICES (the test's expectation when unset)."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        print(
            f"[minirl] CUDA_VISIBLE_DEVICES unset; simulating the {expected} GPUs this test expects",
            flush=True,
        )
        return expected
    got = len([d for d in raw.split(",") if d.strip()])
    print(f"[minirl] CUDA_VISIBLE_DEVICES={raw!r}: got {got} GPUs (test expects {expected})", flush=True)
    if got < expected:
        print(f"[minirl] warning: fewer GPUs than expected; training with {max(got, 1)} ranks", flush=True)
    return max(got, 1)


def begin(test_file: str, num_gpus: int) -> int:
    """Apply MINIRL_FAIL / MINIRL_HANG / MINIRL_BARRIER to this test, then return the data-parallel world size."""
    stem = Path(test_file).stem
    if _named("MINIRL_FAIL", stem):
        print(
            f"[minirl] {stem}: failing on purpose because MINIRL_FAIL names it", file=sys.stderr, flush=True
        )
        raise SystemExit(1)
    if _named("MINIRL_HANG", stem):
        print(
            f"[minirl] {stem}: hanging on purpose because MINIRL_HANG names it (pid {os.getpid()})",
            flush=True,
        )
        while True:
            time.sleep(0.2)
    _barrier(stem)
    return visible_gpus(num_gpus)


def print_curve(name: str, points: list[tuple[int, float]]) -> None:
    print(f"[minirl] {name}: " + ", ".join(f"step {s}={v:.4f}" for s, v in points), flush=True)


def require_drop(what: str, before: float, after: float, margin: float) -> None:
    """Exit 1 with a message unless `after` is at least `margin` below `before`."""
    print(f"[minirl] {what}: {before:.4f} -> {after:.4f} (required drop >= {margin})", flush=True)
    if not before - after >= margin:
        print(
            f"[minirl] FAILED: {what} did not go down by {margin}: {before:.4f} -> {after:.4f}",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(1)


def require_rise(what: str, before: float, after: float, margin: float) -> None:
    """Exit 1 with a message unless `after` is at least `margin` above `before`."""
    print(f"[minirl] {what}: {before:.4f} -> {after:.4f} (required rise >= {margin})", flush=True)
    if not after - before >= margin:
        print(
            f"[minirl] FAILED: {what} did not go up by {margin}: {before:.4f} -> {after:.4f}",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(1)
