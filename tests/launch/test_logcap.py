"""The capped log keeps head and tail, and never loses a configuration's report to the cut: the
dispatcher judges ``config NAME: failed`` lines from the log file (docs/coverage.md)."""

from __future__ import annotations

import io
import random

import pytest

from pipelines.core.coverage.outcomes import config_outcomes
from pipelines.launch.logcap import CappedLog


class _Kept(io.BytesIO):
    def close(self) -> None:  # keep the bytes readable after CappedLog closes its file
        self.kept = self.getvalue()
        super().close()


def _capped(output: bytes, cap: int, chunk: int) -> tuple[CappedLog, str]:
    out = _Kept()
    log = CappedLog(out, cap)
    for i in range(0, len(output), chunk):
        log.write(output[i:i + chunk])
    log.close()
    return log, out.kept.decode()


def _output(seed: int) -> bytes:
    """Noise with configuration reports anywhere, some reported twice (a retry inside the test)."""
    rng = random.Random(seed)
    lines = []
    for i in range(3000):
        if rng.random() < 0.01:
            lines.append(f"[minirl] step {i} config c{rng.randrange(12)}: {rng.choice(['passed', 'failed'])}")
        else:
            lines.append(f"step {i} loss {'x' * rng.randrange(200)}")
    return ("\n".join(lines) + ("\n" if seed % 2 else "")).encode()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("cap,chunk", [(4096, 13), (4096, 77), (20_000, 65536), (50_000, 4096)])
def test_the_capped_log_reports_the_same_configurations_as_the_whole_output(seed, cap, chunk):
    output = _output(seed)
    log, text = _capped(output, cap, chunk)
    assert log.dropped > 0
    assert config_outcomes(text) == config_outcomes(output.decode())


def test_a_failure_in_the_cut_middle_is_written_at_the_cut_once_and_kept_over_a_pass():
    output = (b"head\n" + b"noise\n" * 1000 + b"[minirl] config fsdp-tp1: failed\n" + b"noise\n" * 1000
              + b"config fsdp-tp1: passed\nconfig moe-tp2: passed\n" + b"noise\n" * 1000 + b"end\n")
    _, text = _capped(output, 2048, 4096)
    head, cut = text.split("# nightly: output cut here:", 1)
    assert "config" not in head
    assert ("reported 2 configuration(s); one line each, a failure kept over a pass:\n"
            "[minirl] config fsdp-tp1: failed\nconfig moe-tp2: passed\n"
            "# nightly: end of the cut output's configuration lines\n") in cut
    assert text.endswith("noise\nend\n")


def test_a_log_under_the_cap_is_written_as_it_came():
    output = b"config a: failed\n" * 10 + b"last line without newline config b: passed"
    log, text = _capped(output, 1 << 20, 7)
    assert text == output.decode() and not log.cut_configs


def test_a_report_behind_a_logging_prefix_in_the_cut_middle_is_written_at_the_cut():
    output = b"head\n" + b"noise\n" * 1000 + b"INFO:__main__:config fsdp-tp2: failed\n" + b"noise\n" * 1000 + b"end\n"
    _, text = _capped(output, 2048, 4096)
    cut = text.split("# nightly: output cut here:", 1)[1]
    assert "reported 1 configuration(s)" in cut and "INFO:__main__:config fsdp-tp2: failed\n" in cut
    assert config_outcomes(text) == {"fsdp-tp2": "failed"}
