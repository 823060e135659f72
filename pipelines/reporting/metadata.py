"""The report as asset metadata: plain values and a short Markdown text the Dagster UI shows.

Plain Python values only (no Dagster import): the asset wraps them in ``MetadataValue``s.
"""

from __future__ import annotations

import re

from pipelines.core.report import ReportData


def report_metadata(data: ReportData) -> dict[str, str | int | float]:
    """Counts and figures to chart across materializations, plus the verdict."""
    out: dict[str, str | int | float] = {"verdict": data.verdict}
    out.update({f"outcome {k}": v for k, v in data.counts})
    out["failures"] = len(data.failures)
    out["infra outcomes"] = len(data.infra)
    out["bad nodes"] = len(data.bad_nodes)
    out["quarantined"] = sum(1 for s in data.flaky if s.state == "quarantined")
    out["flaky"] = sum(1 for s in data.flaky if s.state == "flaky")
    out["excused failures"] = len(data.excused)
    for k, v in data.makespan:
        if v is not None:
            out[f"{k} makespan s"] = round(float(v), 1)
    if data.usage:
        out["GPU-hours used"] = round(data.usage.used_gpu_h, 3)
        out["GPU-hours not used by this night"] = round(data.usage.unused_gpu_h, 3)
        if data.usage.gpu_wait_s is not None:
            out["seconds waited for GPUs other runs held"] = data.usage.gpu_wait_s
    return out


def text(value: object) -> str:
    """``value`` as literal Markdown text: who, why, evidence, reasons and test ids come from people and test
    output, and Dagster renders this Markdown, so a ``|`` must not split a table cell, nor ``<b>`` or
    ``<script>`` reach the renderer as HTML, nor ``*``/``_``/``[`` start emphasis or a link. A newline would end
    a table row or list item: it becomes a space."""
    s = " ".join(str(value).splitlines())
    s = re.sub(r"([\\`*_\[\]#!~|])", r"\\\1", s)  # CommonMark: a backslash makes any punctuation literal
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return s


def code(value: object, cell: bool = False) -> str:
    """``value`` as a code span (shown as typed, HTML included); as escaped text where it holds a backtick or a
    newline, which a code span cannot. In a table cell a ``|`` still ends the cell unless escaped (GFM)."""
    s = str(value)
    if "`" in s or "\n" in s or "\r" in s:
        return text(s)
    return f"`{s.replace('|', chr(92) + '|') if cell else s}`"


def report_markdown(data: ReportData) -> str:
    """What broke, what is flaky or quarantined (with who, why and evidence), what changed. Every value from a
    test, a node or a person is escaped (``text``, ``code``): only the report's own words are Markdown."""
    lines = [f"**{text(data.verdict)}**", ""]
    lines += [f"- {code(f.test_id)}: {text(f.classification)}" for f in (*data.failures, *data.infra)]
    lines += [f"- bad node {code(n.node)}: {text(n.evidence)}" for n in data.bad_nodes]
    lines += [f"- suspect node {code(n.node)} (not named): {text(n.evidence)}" for n in data.suspect_nodes]
    if data.flaky:
        lines += ["", "| test | state | by | why | evidence |", "|---|---|---|---|---|"]
        for s in data.flaky:
            evidence = "; ".join(e.text for e in s.evidence) or "-"
            lines.append("| " + " | ".join((code(s.test_id, True), *(text(v) for v in (
                s.state, s.by or "-", s.why or "-", evidence)))) + " |")
    c = data.changes
    if c and (c.new_failures or c.fixed or c.environment or c.still_failing_not_run):
        lines += ["", f"Since {text(c.previous)}: new failures {len(c.new_failures)}, fixed {len(c.fixed)}"
                  + (f", still failing but not run tonight {len(c.still_failing_not_run)}" if c.still_failing_not_run
                     else "")]
        lines += [f"- {text(f)}: {code(a)} -> {code(b)}" for f, a, b in c.environment]
    return "\n".join(lines) + "\n"
