"""The report page in headless Chromium: what a maintainer sees the morning after.

One browser process at a time: the page's DOM first, then its screenshot, both made through
``nightly report`` and pipelines.reporting.browser (what docs/img/night-report.png comes from).
"""

from __future__ import annotations

import html
import re

import matplotlib.image
import pytest

from pipelines.cli import main
from pipelines.reporting.browser import dump_dom
from tests.reporting.nights import GRPO, LORA, SFT, example_night, tid, write_home

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shown(tmp_path_factory):
    home = write_home(example_night(tmp_path_factory.mktemp("home")))
    png = home / "night-report.png"
    assert main(["report", "--home", str(home), "--repo", "minirl", "--screenshot", str(png),
                 "--uncovered", "test_backend_matrix.py: megatron x lora"]) == 0
    page = home / "reports" / "2026-11-06T150000Z.html"
    return dump_dom(page), png


def visible(dom: str) -> str:
    dom = re.sub(r"<(style|title)\b.*?</\1>", " ", dom, flags=re.S | re.I)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", dom)).split())


def test_the_browser_shows_the_verdict_and_every_section(shown):
    text = visible(shown[0])
    assert text.startswith("Night 2026-11-06T150000Z nightly run run-2026-11-06T150000Z")
    assert "FAILED: 2 test(s) failed" in text
    for heading in ("Outcomes", "Failures (3)", "Infrastructure (0 infra outcome(s), 0 bad node(s))",
                    "Flaky and quarantined tests", "What changed since the last night", "Makespan and GPU-hours",
                    "The night as it ran, per node", "Durations against est_time", "Drift and near-timeout tests",
                    "Duration trends over the last nights", "Uncovered matrix cells", "All tests (11)", "Notes"):
        assert heading in text


def test_the_browser_shows_each_failure_with_its_log_tail(shown):
    text = visible(shown[0])
    assert f"{tid(SFT)} — test failure (exit 1) (new since last night)" in text
    assert f"{tid(LORA)} — hang: killed at its 60 s timeout" in text
    assert f"{tid(GRPO)} — flaky: failed on attempt 1, passed on attempt 2" in text
    assert "test_lora_math: hanging on purpose because MINIRL_HANG names it" in text
    assert "test_backend_matrix.py: megatron x lora" in text


def test_the_plots_are_drawn_inline_with_a_tooltip_on_every_gantt_bar(shown):
    dom = shown[0]
    svgs = re.findall(r"<svg\b.*?</svg>", dom, flags=re.S)
    assert len(svgs) >= 3
    gantt = next(s for s in svgs if "seconds since the night" in s)
    titles = re.findall(r"<title>([^<]*)</title>", gantt)
    assert len(titles) == 10
    assert any(t.startswith(f"#1 {tid(GRPO)}: failed, attempt 1") for t in titles)


def test_the_screenshot_shows_the_page_in_colour(shown):
    pixels = matplotlib.image.imread(shown[1])
    assert pixels.shape[0] >= 1000 and pixels.shape[1] >= 1000
    assert pixels.std() > 0.05, "a blank screenshot (Chromium needs --virtual-time-budget)"
    red = (pixels[..., 0] > 0.6) & (pixels[..., 1] < 0.3) & (pixels[..., 2] < 0.3)
    assert red.sum() > 100, "the failed bars and chips are drawn in red"
