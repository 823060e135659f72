"""Our records as Dagster metadata: the same fields wherever a test run is recorded."""

from __future__ import annotations

import re

import dagster as dg

from pipelines.core.model import Assignment, Attempt, Plan, Test
from pipelines.launch.base import tail
from pipelines.storage.cache import Built


def code_block(text: str) -> str:
    """Text as a Markdown code block shown verbatim: the fence is one backtick longer than the longest
    run of backticks in the text, so a log line of ``` (a model generation with code fences) cannot
    close it early and turn the rest of the log into Markdown (CommonMark: a closing fence is at least
    as long as the opening one)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def log_metadata(attempt: Attempt) -> dg.MetadataValue:
    """Where the attempt's log lives for whoever reads the UI later: its stored copy (S3 in production,
    where the run pod's folder goes with the pod) as text, as no browser opens ``s3://``; else the
    local path it was written to."""
    uri = attempt.details.get("log_uri")
    return dg.MetadataValue.text(uri) if uri else dg.MetadataValue.path(attempt.log_path)


def attempt_metadata(attempt: Attempt, test: Test, night: str) -> dict[str, dg.MetadataValue]:
    log_tail = tail(attempt.log_path, max_lines=30) if attempt.log_path else ""
    return {
        "outcome": dg.MetadataValue.text(attempt.outcome),
        "elapsed_s": dg.MetadataValue.float(float(attempt.elapsed_s)),
        "est_time_s": dg.MetadataValue.int(test.est_time),
        "est_source": dg.MetadataValue.text(test.est_source),
        "timeout_s": dg.MetadataValue.int(attempt.timeout_s),
        "attempt": dg.MetadataValue.int(attempt.attempt),
        "node": dg.MetadataValue.text(attempt.node),
        "gpu_slots": dg.MetadataValue.text(",".join(map(str, attempt.gpu_slots))),
        "gpus": dg.MetadataValue.int(test.gpus),
        "suite": dg.MetadataValue.text(test.suite),
        "reason": dg.MetadataValue.text(attempt.reason or ""),
        "exit_code": dg.MetadataValue.text("" if attempt.exit_code is None else str(attempt.exit_code)),
        "started_at": dg.MetadataValue.text(attempt.started_at),
        "night": dg.MetadataValue.text(night),
        "log": log_metadata(attempt),
        "log_tail": dg.MetadataValue.md(code_block(log_tail)),
        "test_file_sha256": dg.MetadataValue.text(test.sha256),
        **({"configs": dg.MetadataValue.text(attempt.details["configs"])} if attempt.details.get("configs") else {}),
    }


def skipped_metadata(test: Test) -> dict[str, dg.MetadataValue]:
    return {
        "outcome": dg.MetadataValue.text("skipped"),
        "reason": dg.MetadataValue.text(f"disabled: {test.disabled}"),
        "est_time_s": dg.MetadataValue.int(test.est_time),
        "test_file_sha256": dg.MetadataValue.text(test.sha256),
    }


def built_metadata(built: Built, source: str) -> dict[str, dg.MetadataValue]:
    return {
        "path": dg.MetadataValue.path(str(built.path)),
        "source": dg.MetadataValue.text(source),
        "reused": dg.MetadataValue.bool(built.reused),
        "build_s": dg.MetadataValue.float(built.seconds),
        "files": dg.MetadataValue.int(built.files),
        "bytes": dg.MetadataValue.int(built.bytes),
        **({"identity": dg.MetadataValue.text(built.identity)} if built.identity else {}),
        **({"rebuilt_because": dg.MetadataValue.text(built.rebuilt)} if built.rebuilt else {}),
    }


def planned_metadata(a: Assignment, test: Test, night: str) -> dict[str, dg.MetadataValue]:
    """A test's place in tonight's plan, observed on its partition before it starts."""
    return {
        "outcome": dg.MetadataValue.text("planned"),
        "est_time_s": dg.MetadataValue.int(test.est_time),
        "est_source": dg.MetadataValue.text(test.est_source),
        "timeout_s": dg.MetadataValue.int(a.timeout_s),
        "pool": dg.MetadataValue.text(a.pool),
        "node": dg.MetadataValue.int(a.node),
        "order": dg.MetadataValue.int(a.priority),
        "predicted_start_s": dg.MetadataValue.float(float(a.start_s)),
        "predicted_end_s": dg.MetadataValue.float(float(a.end_s)),
        "night": dg.MetadataValue.text(night),
    }


def plan_markdown(plan: Plan) -> str:
    """The run's plan as a table: order, node, predicted start/end, timeout."""
    head = "| # | test | pool/node | gpus | start s | end s | timeout s |\n|---|---|---|---|---|---|---|\n"
    return head + "\n".join(f"| {a.priority} | {a.test_id} | {a.pool}/{a.node} | {a.gpus} | {a.start_s:.0f} | "
                            f"{a.end_s:.0f} | {a.timeout_s} |" for a in plan.ordered())


#: outcomes that say the machine, not the test, failed: their check fails as a warning
INFRA_OUTCOMES = frozenset({"infra_error", "interrupted"})


#: what a quarantined test's failure says before the night's verdict is known (as the attempt ends)
PENDING_EXCUSE = ("; quarantined as flaky (`nightly quarantine list`): it does not fail the night unless its node "
                  "turns out bad (the night's verdict decides when the night ends)")


def check_verdict(outcome: str, reason: str, quarantined: bool,
                  decided: bool = True) -> tuple[bool, dg.AssetCheckSeverity, str, str]:
    """(passed, severity, description, kind) of a test_passed result: failed/timed out fail, infra
    warns, and so does the failure of a test quarantined as flaky (it does not fail the night either).
    One rule for the result a run reports inline and for the check run on its own. ``decided``: the
    night's verdict excused it (False as an attempt ends: a bad node found later fails it after all)."""
    passed = outcome == "passed"
    infra = outcome in INFRA_OUTCOMES
    excused = quarantined and not passed and not infra
    why = reason or ("" if passed else outcome)
    description = (f"{outcome}" + (f": {why}" if why and why != outcome else "")
                   + (("; quarantined as flaky (`nightly quarantine list`): it does not fail the night" if decided
                       else PENDING_EXCUSE) if excused else ""))
    severity = dg.AssetCheckSeverity.WARN if infra or excused else dg.AssetCheckSeverity.ERROR
    return passed, severity, description, "infra" if infra else ("quarantined" if excused else "test")


def check_result(attempt: Attempt, test: Test, quarantined: bool = False, decided: bool = False,
                 note: str = "") -> dg.AssetCheckEvaluation:
    """The test_passed check of the attempt's partition (:func:`check_verdict`); as the attempt ends
    (``decided`` False) a quarantined failure is excused only pending the night's verdict."""
    from pipelines.defs.keys import TEST_PASSED

    passed, severity, description, kind = check_verdict(attempt.outcome, attempt.reason, quarantined, decided)
    description += note
    return dg.AssetCheckEvaluation(
        asset_key=TEST_PASSED.asset_key, check_name=TEST_PASSED.name, passed=passed, partition=test.id,
        severity=severity, description=description,
        metadata={"outcome": attempt.outcome, "kind": kind,
                  "elapsed_s": float(attempt.elapsed_s), "timeout_s": attempt.timeout_s, "node": attempt.node},
    )


def unexcused_checks(pending: dict, verdict: dict):
    """The test_passed results to report again once the night's verdict is known: each quarantined
    test whose failure its attempt's result excused pending the verdict, and the verdict did not (its
    node was bad: ``pipelines.core.flaky.night_verdict``). ``pending``: test id -> (attempt, test)."""
    excused = set(verdict.get("excused_quarantined") or ())
    for tid, (attempt, test) in pending.items():
        if tid not in excused:
            yield check_result(attempt, test, note=f"; quarantined as flaky, but not excused by the night's verdict "
                                                   f"(its node {attempt.node or '?'} was bad): it fails the night")
