"""The report's plots: matplotlib figures as inline SVG, with a tooltip (SVG ``<title>``) per mark.

Names never overlap: bars carry a short key (``#3``) only where it fits inside the bar, and the
full test name is in the bar's tooltip and in the legend table next to the plot. Checked by
measuring the drawn text, not by guessing font widths.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from html import escape

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.font_manager import FontProperties  # noqa: E402
from matplotlib.ticker import MaxNLocator, NullFormatter, ScalarFormatter  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from pipelines.core.report import Bar, ReportData, Row  # noqa: E402
from pipelines.core.trends import Trend  # noqa: E402

#: one colour per outcome a night can have (every attempt outcome, and a row's not_run / unplanned): the
#: Gantt's legend lists them all, so an outcome missing here was drawn in the fallback with no chip to name it
COLORS = {"passed": "#2e7d32", "failed": "#c62828", "timed_out": "#ef6c00", "infra_error": "#6a1b9a",
          "interrupted": "#00838f", "skipped": "#9e9e9e", "not_run": "#bdbdbd", "unplanned": "#757575"}
# text.parse_math off: test and node names come from records, and a `$...$` in one is a name, not
# mathtext (which would fail to parse and stop the whole page)
plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "svg.hashsalt": "nightly-report",
                     "text.parse_math": False})


def short_keys(test_ids: Sequence[str]) -> dict[str, str]:
    """``#1``, ``#2``, ... in first-seen order: what fits on a bar; the legend says which test it is."""
    return {t: f"#{i}" for i, t in enumerate(dict.fromkeys(test_ids), start=1)}


def short_name(test_id: str, limit: int = 40) -> str:
    """A readable name: the file stem without ``test_``, with its variant (``::cuda-...``) shortened."""
    path, _, variant = test_id.partition("::")
    stem = path.rsplit("/", 1)[-1].removesuffix(".py").removeprefix("test_")
    name = f"{stem} [{variant}]" if variant else stem
    return name if len(name) <= limit else name[: limit - 1] + "\u2026"


def _named(test_id: str, keys: Mapping[str, str]) -> str:
    return f"{keys[test_id]} {test_id}" if test_id in keys else test_id


def _svg(fig: Figure, titles: Mapping[str, str]) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]  # drop the XML prolog and doctype: the SVG is inlined in HTML

    def titled(m: re.Match[str]) -> str:
        gid = m.group(1)
        return f'{m.group(0)}<title>{escape(titles[gid])}</title>' if gid in titles else m.group(0)

    return re.sub(r'<g id="(mark-[^"]+)"[^>]*>', titled, text)


def fits(fig: Figure) -> list[tuple[str, str]]:
    """Pairs of drawn text labels (bar keys, tick labels) whose boxes overlap; empty when readable."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    texts = [t for ax in fig.axes
             for t in ax.texts + ax.get_yticklabels(which="both") + ax.get_xticklabels(which="both")
             if t.get_visible() and t.get_text()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]


def gantt_figure(bars: Sequence[Bar], keys: Mapping[str, str]) -> Figure:
    """One row per node, one bar per attempt, coloured by outcome; keys only where they fit."""
    nodes = sorted({b.node for b in bars})
    fig, ax = plt.subplots(figsize=(11, 0.5 + 0.45 * max(len(nodes), 1)), dpi=72)
    row = {n: i for i, n in enumerate(nodes)}
    # attempts overlapping on a node share its row in lanes (different GPUs at once)
    lanes: dict[str, list[float]] = {}
    lane_of = []
    for b in sorted(bars, key=lambda b: (b.node, b.start_s)):
        ends = lanes.setdefault(b.node, [])
        lane = next((i for i, end in enumerate(ends) if end <= b.start_s + 1e-6), len(ends))
        ends[lane:lane + 1] = [b.start_s + b.elapsed_s]
        lane_of.append((b, lane))
    height = {n: 0.8 / max(len(lanes.get(n, [0])), 1) for n in nodes}
    ys = [row[b.node] - 0.4 + lane * height[b.node] for b, lane in lane_of]
    widths = [max(b.elapsed_s, 0.5) for b, _ in lane_of]
    # one collection for all bars: a thousand separate patches take seconds to add and draw
    boxes = [(b.start_s, y, w, height[b.node] * 0.92) for (b, _), y, w in zip(lane_of, ys, widths, strict=True)]
    bars_art = PolyCollection([[(x, y), (x + w, y), (x + w, y + h), (x, y + h)] for x, y, w, h in boxes],
                              facecolors=[COLORS.get(b.outcome, "#607d8b") for b, _ in lane_of],
                              edgecolors="white", linewidths=0.5)
    bars_art.set_gid("mark-bars")
    ax.add_collection(bars_art)
    ax.set_yticks(range(len(nodes)), [n if len(n) <= 24 else n[:23] + "\u2026" for n in nodes])
    ax.set_ylim(len(nodes) - 0.5, -0.5)  # first node on top
    ax.set_xlim(0, max(x + w for x, _, w, _ in boxes) * 1.02)
    ax.set_xlabel("seconds since the night's first test started")
    # a key goes on a bar only when it fits: measured in pixels, so a thousand bars stay cheap to draw
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    box = ax.get_window_extent(renderer)
    px_s, px_row = box.width / ax.get_xlim()[1], box.height / len(nodes)
    font = FontProperties(size=7)
    size = {}
    labels = []
    for (b, _), (x, y, w, h) in zip(lane_of, boxes, strict=True):
        key = keys.get(b.test_id, "?")
        if len(key) not in size:
            tw, th, _ = renderer.get_text_width_height_descent(key, font, ismath=False)
            size[len(key)] = (tw, th)
        tw, th = size[len(key)]
        if tw + 4 <= w * px_s and th + 2 <= h * px_row:
            text = ax.text(x + w / 2, y + h / 2, key, ha="center", va="center", fontproperties=font, color="white")
            labels.append((text, Bbox.from_extents(x, y, x + w, y + h)))
    _hide_labels_that_do_not_fit(renderer, ax, labels)
    return fig


def bar_boxes(fig: Figure) -> list[Bbox]:
    """Every Gantt bar's box on screen (display coordinates), in drawing order."""
    ax = fig.axes[0]
    return [p.get_extents(ax.transData) for p in ax.collections[0].get_paths()]


def _hide_labels_that_do_not_fit(renderer, ax, labels) -> None:
    """The check after the estimate: a key whose drawn box leaves its bar is hidden."""
    for text, data_box in labels:
        tb, pb = text.get_window_extent(renderer), ax.transData.transform_bbox(data_box)
        x0, x1 = sorted((pb.x0, pb.x1))
        if tb.x0 < x0 or tb.x1 > x1 or tb.height > abs(pb.height) + 1:
            text.set_visible(False)


def gantt_svg_for(bars: Sequence[Bar], keys: Mapping[str, str]) -> str:
    """The Gantt as SVG; each bar's tooltip names its test in full."""
    if not bars:
        return ""
    fig = gantt_figure(bars, keys)
    titles = [f"{_named(b.test_id, keys)}: {b.outcome}, attempt {b.attempt}, {b.elapsed_s:.0f} s from "
              f"{b.start_s:.0f} s on {b.node}, {b.gpus} GPU(s)" for b in sorted(bars, key=lambda b: (b.node, b.start_s))]
    return _title_marks(_svg(fig, {}), "mark-bars", titles)


def gantt_svg(data: ReportData, keys: Mapping[str, str]) -> str:
    return gantt_svg_for(data.gantt, keys)


def _points(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if r.elapsed_s is not None and r.est_time > 0]


def durations_figure(rows: Sequence[Row]) -> Figure:
    """elapsed against est_time per test; the diagonal is 'as estimated', the dashed line the timeout factor."""
    pts = _points(rows)
    fig, ax = plt.subplots(figsize=(6.5, 4.2), dpi=72)
    for outcome in sorted({r.outcome for r in pts}):
        mine = [r for r in pts if r.outcome == outcome]
        coll = ax.scatter([r.est_time for r in mine], [max(r.elapsed_s or 0, 0.1) for r in mine], s=22,
                          color=COLORS.get(outcome, "#607d8b"), label=outcome, alpha=0.85)
        coll.set_gid(f"mark-pts-{outcome}")
    hi = max(max(r.est_time for r in pts), max(r.elapsed_s or 0 for r in pts)) * 1.3
    lo = max(min(min(r.est_time for r in pts), min(max(r.elapsed_s or 0, 0.1) for r in pts)) / 1.3, 0.1)
    ax.plot([lo, hi], [lo, hi], color="#555", linewidth=0.8, label="as estimated")
    ax.plot([lo, hi], [1.25 * lo, 1.25 * hi], color="#555", linewidth=0.8, linestyle="--", label="1.25 x est_time")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # minor labels on a log axis print on top of each other
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("est_time (s)")
    ax.set_ylabel("elapsed tonight (s)")
    ax.legend(loc="upper left", fontsize=7, frameon=False)
    return fig


def durations_svg(rows: Sequence[Row], keys: Mapping[str, str]) -> str:
    pts = _points(rows)
    if not pts:
        return ""
    svg = _svg(durations_figure(rows), {})
    for outcome in sorted({r.outcome for r in pts}):
        mine = [r for r in pts if r.outcome == outcome]
        svg = _title_marks(svg, f"mark-pts-{outcome}", [
            f"{_named(r.test_id, keys)}: {r.elapsed_s:.0f} s against est_time {r.est_time} s ({r.outcome})"
            for r in mine])
    return svg


def _title_marks(svg: str, gid: str, titles: Sequence[str]) -> str:
    """Give the i-th mark of a collection (a scatter's ``<use>``, a bar's ``<path>``) its own tooltip."""
    start = svg.find(f'<g id="{gid}"')
    if start < 0:
        return svg
    end = svg.find("</g>", start)
    it = iter(titles)

    def titled(m: re.Match[str]) -> str:
        if re.match(r'(.*\s)?id="', m.group(2), re.S):  # a shared definition, not a mark
            return m.group(0)
        return f"<{m.group(1)} {m.group(2)}><title>{escape(next(it, ''))}</title></{m.group(1)}>"

    body = re.sub(r"<(use|path) ([^>]*?)/>", titled, svg[start:end])
    return svg[:start] + body + svg[end:]


def most_moved(trends: Sequence[Trend], limit: int = 8) -> list[Trend]:
    """The tests whose last duration moved most against their median, either way."""
    return sorted((t for t in trends if t.change), key=lambda t: -abs(math.log(t.change or 1)))[:limit]


def trends_figure(moved: Sequence[Trend], keys: Mapping[str, str]) -> Figure:
    """One line per test over the last nights, named in the legend (never on the plot)."""
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=72)
    for i, t in enumerate(moved):
        xs, ys = _by_night(t)
        [line] = ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2,
                         label=f"{keys.get(t.test_id, '')} {short_name(t.test_id, 44)}")
        line.set_gid(f"mark-trend-{i}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    window = max((t.nights for t in moved), default=0)
    if window:
        ax.set_xlim(-0.5, window - 0.5)
    ax.set_xlabel("night of the window (oldest to newest; a gap: not run that night)")
    ax.set_ylabel("elapsed (s)")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7, frameon=False)
    return fig


def _night_x(t: Trend) -> list[float]:
    """Each point's x: its night's position in the window, shared by every test (its own run count where the
    points do not know their night)."""
    return [float(i if p.night is None else p.night) for i, p in enumerate(t.points)]


def _by_night(t: Trend) -> tuple[list[float], list[float]]:
    """The points at their nights, with a NaN between two nights that are not adjacent, so the line breaks
    where the test did not run instead of drawing through the missing night."""
    xs: list[float] = []
    ys: list[float] = []
    for x, p in zip(_night_x(t), t.points, strict=True):
        if xs and x - xs[-1] > 1:
            xs.append(math.nan)
            ys.append(math.nan)
        xs.append(x)
        ys.append(p.elapsed_s)
    return xs, ys


def trends_svg(trends: Sequence[Trend], keys: Mapping[str, str], limit: int = 8) -> str:
    moved = most_moved(trends, limit)
    if not moved:
        return ""
    return _svg(trends_figure(moved, keys), {f"mark-trend-{i}": f"{t.test_id}: " + ", ".join(f"{p.elapsed_s:.0f} s {p.outcome}" for p in t.points)
                      for i, t in enumerate(moved)})


def sparkline(trend: Trend, width: int = 120, height: int = 22) -> str:
    """A tiny hand-drawn SVG line of one test's durations (a thousand of these must stay cheap)."""
    pts = trend.points
    if not pts:
        return ""
    top = max(p.elapsed_s for p in pts) or 1.0
    nx = _night_x(trend)
    step = width / max(trend.nights - 1 if trend.nights else len(pts) - 1, 1)  # the window's nights, as the plot
    xy = [(x * step, height - 2 - (height - 4) * p.elapsed_s / top) for x, p in zip(nx, pts, strict=True)]
    dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{COLORS.get(p.outcome, "#607d8b")}">'
                   f"<title>{escape(p.run_id)}: {p.elapsed_s:.0f} s {p.outcome}</title></circle>"
                   for (x, y), p in zip(xy, pts, strict=True) if p.outcome != "passed")
    # a night the test did not run breaks the line (M: a new stroke), as on the plot
    line = " ".join(f"{'M' if i == 0 or nx[i] - nx[i - 1] > 1 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(xy))
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="-2 0 {width + 4} {height}">'
            f'<path d="{line}" fill="none" stroke="#1565c0" stroke-width="1.2"/>{dots}</svg>')
