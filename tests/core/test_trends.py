"""Duration trends: each test's runs in night order, whatever order history stores them in."""

from __future__ import annotations

from pipelines.core.model import Sample
from pipelines.core.trends import duration_trends


def s(test: str, outcome: str, elapsed: float, at: str, run: str) -> Sample:
    return Sample(test, "h200", "sha", outcome, elapsed, at, node="n1" if at else "", run_id=run)


def test_a_sample_without_a_start_time_does_not_move_its_night_before_the_others():
    """An attempt stored without a start (a test an input build blocked, in older records) first in its
    night once made the night sort as the oldest: a test 3x slower tonight read as 3x faster."""
    samples = [s("a.py", "passed", 100.0, "2025-01-01T15:00:00+00:00", "r1"),
               s("b.py", "infra_error", 0.0, "", "r2"),
               s("a.py", "passed", 300.0, "2025-01-02T15:00:00+00:00", "r2")]
    trend = duration_trends(samples, ["a.py"])["a.py"]
    assert [(p.run_id, p.elapsed_s) for p in trend.points] == [("r1", 100.0), ("r2", 300.0)]
    assert trend.change == 3.0


def test_the_newest_night_stays_in_the_window_of_the_last_nights():
    samples = [s("a.py", "passed", 100.0, f"2025-01-{d:02d}T15:00:00+00:00", f"r{d:02d}") for d in range(1, 15)]
    samples += [s("b.py", "infra_error", 0.0, "", "r15"), s("a.py", "passed", 1750.0, "2025-01-15T15:00:00+00:00", "r15")]
    trend = duration_trends(samples, ["a.py"])["a.py"]
    assert trend.points[-1].run_id == "r15" and len(trend.points) == 14


def test_each_point_keeps_its_nights_place_in_the_window_shared_by_every_test():
    samples = [s("a.py", "passed", 10.0, f"2025-01-0{d}T15:00:00+00:00", f"r{d}") for d in (1, 2, 3, 4)]
    samples += [s("b.py", "passed", 10.0, f"2025-01-0{d}T15:00:01+00:00", f"r{d}") for d in (2, 4)]
    trends = duration_trends(samples, ["a.py", "b.py"])
    assert [p.night for p in trends["a.py"].points] == [0, 1, 2, 3]
    assert [(p.run_id, p.night) for p in trends["b.py"].points] == [("r2", 1), ("r4", 3)]
    assert trends["a.py"].nights == trends["b.py"].nights == 4
