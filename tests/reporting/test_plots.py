"""The report's plots are readable: no text on top of other text, a tooltip on every mark."""

from __future__ import annotations

import random
import re

import matplotlib.pyplot as plt
import pytest

from pipelines.core.report import Bar, Row
from pipelines.core.trends import Trend, TrendPoint
from pipelines.reporting.plots import (
    bar_boxes,
    durations_figure,
    durations_svg,
    fits,
    gantt_figure,
    gantt_svg_for,
    short_keys,
    short_name,
    sparkline,
    trends_svg,
)


def crowded_night(n: int = 62, nodes: int = 4) -> list[Bar]:
    """Framework M's 62-test H200 suite on 4 nodes: long names, many bars a few seconds wide."""
    rng = random.Random(7)
    bars, clock = [], [0.0] * nodes
    for i in range(n):
        node = i % nodes
        elapsed = rng.choice([8.0, 15.0, 40.0, 300.0, 900.0, 1300.0])
        name = f"tests/e2e/megatron/test_qwen3_30b_a3b_{i}_long_descriptive_name.py"
        bars.append(Bar(name, f"h200-node-{node}", clock[node], elapsed, rng.choice(["passed", "failed"]), 1, 8))
        clock[node] += elapsed
    return bars


def test_gantt_labels_of_a_crowded_suite_never_overlap_and_only_sit_on_bars_wide_enough():
    bars = crowded_night()
    fig = gantt_figure(bars, short_keys([b.test_id for b in bars]))
    ax = fig.axes[0]
    shown = [t for t in ax.texts if t.get_visible()]
    assert fits(fig) == []
    assert 0 < len(shown) < len(bars), "wide bars keep their key, narrow ones rely on the tooltip"
    renderer = fig.canvas.get_renderer()
    boxes = bar_boxes(fig)
    assert len(boxes) == len(bars)
    for text in shown:
        tb = text.get_window_extent(renderer)
        assert any(pb.x0 <= tb.x0 and tb.x1 <= pb.x1 and pb.y0 <= tb.y0 + 1 and tb.y1 <= pb.y1 + 1 for pb in boxes), \
            f"{text.get_text()} is not inside a bar"
    plt.close(fig)


def test_the_check_itself_catches_overlapping_text():
    fig, ax = plt.subplots()
    ax.text(0.5, 0.5, "test_grpo_math")
    ax.text(0.51, 0.5, "test_sft_math")
    assert fits(fig) == [("test_grpo_math", "test_sft_math")]
    plt.close(fig)


def test_every_gantt_bar_has_a_tooltip_with_the_full_test_name():
    bars = crowded_night(12, 2)
    svg = gantt_svg_for(bars, short_keys([b.test_id for b in bars]))
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    assert len(titles) == len(bars)
    assert sorted(t.split(": ")[0].split(" ", 1)[1] for t in titles) == sorted(b.test_id for b in bars)
    assert svg.startswith("<svg")


def rows(n: int = 40) -> list[Row]:
    return [Row(f"tests/e2e/test_{i}.py", "passed" if i % 5 else "failed", 10.0 + i * 37 % 900, 10 + i * 23 % 1200,
                None, 1800, "n0", 1) for i in range(n)]


def test_the_durations_plot_has_no_overlapping_tick_labels_and_a_tooltip_per_point():
    fig = durations_figure(rows())
    assert fits(fig) == []
    plt.close(fig)
    svg = durations_svg(rows(), {})
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    assert len(titles) == 40
    assert "tests/e2e/test_7.py: 269 s against est_time 171 s (passed)" in titles


def test_trend_lines_are_named_in_a_legend_with_short_names():
    trends = [Trend(f"tests/e2e/megatron/test_model_{i}.py::cuda-stage-c-8-gpu-h200",
                    tuple(TrendPoint(f"r{k}", "", 100.0 + (k == 4) * 20 * i, "passed") for k in range(5))) for i in range(1, 4)]
    svg = trends_svg(trends, short_keys([t.test_id for t in trends]))
    assert "#3 model_3 [cuda-stage-c-8-gpu-h200]" in svg
    assert "tests/e2e/megatron/test_model_3.py::cuda-stage-c-8-gpu-h200: 100 s passed" in svg


@pytest.mark.parametrize(("test_id", "short"), [
    ("tests/e2e/megatron/test_grpo_math.py", "grpo_math"),
    ("tests/e2e/ckpt/test_ckpt_resume.py::cuda-stage-c-4-gpu-h200", "ckpt_resume [cuda-stage-c-4-gpu-h200]"),
    ("tests/test_" + "x" * 60 + ".py", "x" * 39 + "\u2026"),
])
def test_short_names_drop_the_folder_and_the_test_prefix(test_id, short):
    assert short_name(test_id) == short


def test_a_sparkline_marks_the_nights_that_did_not_pass():
    svg = sparkline(Trend("t", (TrendPoint("r1", "", 10, "passed"), TrendPoint("r2", "", 60, "timed_out"))))
    assert svg.count("<circle") == 1 and "<title>r2: 60 s timed_out</title>" in svg


def test_a_sparkline_places_points_at_their_nights_and_breaks_where_the_test_did_not_run():
    trend = Trend("t", (TrendPoint("r2", "", 10, "passed", 1), TrendPoint("r3", "", 10, "passed", 2),
                        TrendPoint("r5", "", 10, "failed", 4)), nights=5)
    svg = sparkline(trend, width=120)
    assert 'd="M30.0,' in svg and " L60.0," in svg and " M120.0," in svg
