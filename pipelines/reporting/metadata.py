"""The report as asset metadata: plain values and a short Markdown text the Dagster UI shows.

Plain Python values only (no Dagster import): the asset wraps them in ``MetadataValue``s.
"""

from __future__ import annotations

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


def report_markdown(data: ReportData) -> str:
    """What broke, what is flaky or quarantined (with who, why and evidence), what changed."""
    lines = [f"**{data.verdict}**", ""]
    lines += [f"- `{f.test_id}`: {f.classification}" for f in (*data.failures, *data.infra)]
    lines += [f"- bad node `{n.node}`: {n.evidence}" for n in data.bad_nodes]
    lines += [f"- suspect node `{n.node}` (not named): {n.evidence}" for n in data.suspect_nodes]
    if data.flaky:
        lines += ["", "| test | state | by | why | evidence |", "|---|---|---|---|---|"]
        for s in data.flaky:
            evidence = "; ".join(e.text for e in s.evidence) or "-"
            lines.append(f"| `{s.test_id}` | {s.state} | {s.by or '-'} | {s.why or '-'} | {evidence} |")
    c = data.changes
    if c and (c.new_failures or c.fixed or c.environment or c.still_failing_not_run):
        lines += ["", f"Since {c.previous}: new failures {len(c.new_failures)}, fixed {len(c.fixed)}"
                  + (f", still failing but not run tonight {len(c.still_failing_not_run)}" if c.still_failing_not_run
                     else "")]
        lines += [f"- {f}: `{a}` -> `{b}`" for f, a, b in c.environment]
    return "\n".join(lines) + "\n"
