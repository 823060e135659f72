"""The Dagster metadata of a test run: what the UI shows of an attempt."""

from __future__ import annotations

import html

import dagster as dg
from markdown_it import MarkdownIt

from pipelines.core.model import Attempt
from pipelines.core.model import Test as RegisteredTest
from pipelines.defs.metadata import attempt_metadata

LOG = "\n".join([
    "step 1: loss 0.42",
    "generation: ```python",
    "```",
    "# HEADING",
    "**bold** and [a link](http://example.com)",
    "<div>raw html</div>",
    "````",
    "    ```` indented run",
    "last line",
])


def test_log_tail_is_shown_verbatim_whatever_fences_the_log_prints(tmp_path):
    """RL tests print model generations with code fences: a line of ``` must not end the block."""
    log = tmp_path / "attempt1.log"
    log.write_text(LOG + "\n")
    test = RegisteredTest(id="tests/e2e/t.py", path="tests/e2e/t.py", backend="megatron", suite="s", gpus=1, est_time=10)
    attempt = Attempt(test_id=test.id, outcome="failed", elapsed_s=1.0, started_at="2024-01-01T00:00:00Z",
                      log_path=str(log), timeout_s=60)

    markdown = attempt_metadata(attempt, test, "n1")["log_tail"].value
    rendered = MarkdownIt("commonmark").render(markdown)
    assert rendered == f"<pre><code>{html.escape(LOG, quote=False)}\n</code></pre>\n", rendered


def test_the_log_is_the_stored_copy_when_there_is_one_else_the_local_path(tmp_path):
    """Locally the log stays where the test wrote it; in production the run pod's folder does not."""
    log = tmp_path / "attempt1.log"
    log.write_text("loss went up\n")
    test = RegisteredTest(id="tests/e2e/t.py", path="tests/e2e/t.py", backend="megatron", suite="s", gpus=1, est_time=10)
    attempt = Attempt(test_id=test.id, outcome="failed", elapsed_s=1.0, started_at="2024-01-01T00:00:00Z",
                      log_path=str(log), timeout_s=60)
    local = attempt_metadata(attempt, test, "n1")["log"]
    assert isinstance(local, dg.PathMetadataValue) and local.path == str(log)
    attempt.details["log_uri"] = "s3://bucket/state/logs/n1/attempt1.log"
    stored = attempt_metadata(attempt, test, "n1")["log"]
    assert isinstance(stored, dg.TextMetadataValue) and stored.text == "s3://bucket/state/logs/n1/attempt1.log"
