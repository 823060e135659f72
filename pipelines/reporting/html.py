"""The night report as one self-contained HTML file: no scripts, no external files, plots inline.

Every section is always present; an empty one says what was checked ("no bad nodes"), so a reader
knows it was looked at rather than forgotten.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from urllib.parse import urlsplit

import jinja2

from pipelines.core.report import ReportData, makespan_label
from pipelines.reporting.plots import (
    COLORS,
    durations_svg,
    gantt_svg,
    short_keys,
    short_name,
    sparkline,
    trends_svg,
)
from pipelines.reporting.template import PAGE

_TEMPLATE = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                               lstrip_blocks=True).from_string(PAGE)


#: the schemes a log link may have (s3:// logs are shown as the command that prints them, ``_fetch``)
LINK_SCHEMES = ("file", "http", "https")


def _link(path: str) -> str:
    """A link to a log: file and http(s) URLs as they are, local paths as file:// URLs; "" for anything
    else, which the page shows as plain text: a record is data, and a ``javascript:`` URL in it must
    never become a live link."""
    if not path:
        return ""
    try:
        scheme = urlsplit(path).scheme.lower()
    except ValueError:  # not a URL at all (an unbalanced [ in the host)
        return ""
    if not scheme:
        return Path(path).absolute().as_uri()
    return path if scheme in LINK_SCHEMES else ""


def _fetch(path: str, endpoint: str | None = None) -> str:
    """For a log in S3 (no browser opens ``s3://``), the command that prints it, to copy; "" for any
    other location. A presigned URL would expire while the report is still read, so none is made.
    ``endpoint``: the deployment's S3 endpoint (MinIO, Ceph), which the pasted command must go to too."""
    if not path.startswith("s3://"):
        return ""
    flag = f"--endpoint-url {shlex.quote(endpoint)} " if endpoint else ""
    return f"aws s3 cp {flag}{shlex.quote(path)} -"


def _fmt(v, unit: str = "") -> str:
    if v is None:
        return "-"
    return (f"{v:,.1f}" if isinstance(v, float) else str(v)) + unit


def render_html(data: ReportData, trend_rows: int = 40, endpoint: str | None = None) -> str:
    """The report page; the plots are SVG with a tooltip per bar and point. ``endpoint``: the S3
    endpoint the commands that print logs in S3 name (None: AWS)."""
    order = [b.test_id for b in sorted(data.gantt, key=lambda b: b.start_s)] + [r.test_id for r in data.rows]
    keys = short_keys(order)
    ratios = sorted((r for r in data.rows if r.elapsed_s is not None and r.est_time > 0 and r.outcome == "passed"),
                    key=lambda r: -(r.elapsed_s or 0) / r.est_time)
    moved = sorted(data.trends, key=lambda t: -abs((t.change or 1) - 1))[:trend_rows]
    return _TEMPLATE.render(
        d=data, keys=keys, colors=COLORS, fmt=_fmt, link=_link, fetch=lambda path: _fetch(path, endpoint), short=short_name, makespan_label=makespan_label,
        gantt=gantt_svg(data, keys), durations=durations_svg(data.rows, keys),
        trends_plot=trends_svg(data.trends, keys), sparkline=sparkline, moved=moved,
        # a new failure of a test already flaky going into the night is said to be one, not left to read as a regression
        going_in={f.test_id: f.state_going_in for f in data.failures if f.state_going_in},
        ratios=ratios[:15], legend=sorted(((keys[t], t) for t in {b.test_id for b in data.gantt}), key=lambda kt: int(kt[0][1:])),
    )
