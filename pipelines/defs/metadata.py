"""Our records as Dagster metadata: the same fields wherever a test run is recorded."""

from __future__ import annotations

import dagster as dg

from pipelines.core.model import Attempt, Test
from pipelines.launch.base import tail
from pipelines.storage.cache import Built


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
        "log": dg.MetadataValue.path(attempt.log_path),
        "log_tail": dg.MetadataValue.md(f"```\n{log_tail}\n```"),
        "test_file_sha256": dg.MetadataValue.text(test.sha256),
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
    }
