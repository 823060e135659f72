"""Turn what a launcher reports into what history keeps."""

from __future__ import annotations

from pipelines.core.model import Attempt, Sample, Test


def sample_from_attempt(attempt: Attempt, test: Test, run_id: str, image: str = "") -> Sample:
    """One finished attempt as a history sample, tagged with the file revision it ran.

    A timed-out attempt is ``capped``: its elapsed is the timeout, not the test's duration.
    """
    return Sample(
        test_id=attempt.test_id,
        hardware=test.hardware,
        sha256=test.sha256,
        outcome=attempt.outcome,
        elapsed_s=float(attempt.elapsed_s),
        started_at=attempt.started_at,
        node=attempt.node,
        image=image,
        run_id=run_id,
        attempt=attempt.attempt,
        source=attempt.log_path or f"run {run_id}",
        capped=attempt.outcome == "timed_out",
    )
