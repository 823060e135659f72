"""Run tags: what a run covers and on what it ran, for filters, concurrency limits and the report."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from pipelines.core.runset import RunSelection
from pipelines.defs.keys import (
    RANGE_END,
    RANGE_START,
    TAG_CADENCE,
    TAG_COMMIT,
    TAG_DEPLOYMENT,
    TAG_IMAGE,
    TAG_POOLS,
    TAG_REASON,
)


def framework_commit(repo: Path) -> str:
    """The checkout's commit (``git rev-parse HEAD``), suffixed ``+dirty`` when tracked files differ from it
    (as ``git describe --dirty`` marks it: a sensor's rerun of an edited, uncommitted test file did not run
    that commit), or "" for a folder that is not a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=False)
        if out.returncode != 0:
            return ""
        changed = subprocess.run(["git", "-C", str(repo), "diff", "--quiet", "HEAD", "--"], capture_output=True,
                                 timeout=30, check=False).returncode == 1
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() + ("+dirty" if changed else "")


def request_tags(deployment: str, selection: RunSelection, pools: Sequence[str]) -> dict[str, str]:
    """Tags known before a run starts (so the run queue's tag concurrency limits can use them)."""
    return {TAG_CADENCE: selection.cadence or "picked", TAG_DEPLOYMENT: deployment,
            TAG_POOLS: ",".join(sorted(selection.pools or pools))}


def range_tags(keys: Sequence[str]) -> dict[str, str]:
    """The whole partition range: schedules, sensors and the CLI make ONE run for any selection."""
    return {RANGE_START: keys[0], RANGE_END: keys[-1]} if keys else {}


def start_tags(night, selection: RunSelection, tags: dict[str, str]) -> dict[str, str]:
    """What a run says as soon as its step starts, before anything may refuse it or find nothing to launch:
    cadence, deployment, pools and why it ran (``tags``: the run's own; a schedule's, sensor's or the
    CLI's reason stays)."""
    out = request_tags(night.deployment.name, selection, [p.name for p in night.deployment.pools])
    if TAG_REASON not in tags or "dagster/parent_run_id" in tags:
        out[TAG_REASON] = launch_reason(tags)
    else:  # said again so the night's record (its tags) keeps it, whichever way the night came in
        out[TAG_REASON] = tags[TAG_REASON]
    return out


def run_tags(night, selection: RunSelection, infra: dict[str, dict[str, str]]) -> dict[str, str]:
    """Everything a run's tags say, once the run knows what it runs on (digests, commit)."""
    pools = [p.name for p in night.deployment.pools]
    tags = request_tags(night.deployment.name, selection, pools)
    digests = sorted({(v.get("image_digest") or "")[:71] for v in infra.values() if v.get("image_digest")})
    tags[TAG_IMAGE] = ",".join(digests)[:255]
    tags[TAG_COMMIT] = framework_commit(night.repo_spec.path)
    return tags


def launch_reason(tags: dict[str, str]) -> str:
    """Why a run that no schedule, sensor or the CLI named was launched, from Dagster's own tags:
    a re-execution, a backfill, or a launch from the UI (pick, Launchpad). A backfill's runs carry the
    same tags whether the UI or `dagster job backfill` made them, so its reason names the backfill only."""
    if tags.get("dagster/parent_run_id"):  # a re-execution copies its parent's tags, reason included
        first = tags.get(TAG_REASON, "")
        return (f"re-execution of run {tags['dagster/parent_run_id']}" + (f" ({first})" if first else ""))[:255]
    if tags.get("dagster/backfill"):
        return f"backfill {tags['dagster/backfill']}"
    return "launched from the UI or Dagster's command line"
