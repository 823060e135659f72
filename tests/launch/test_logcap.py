"""The capped log keeps head and tail, and never loses a configuration's report to the cut: the
dispatcher judges ``config NAME: failed`` lines from the log file (docs/coverage.md)."""

from __future__ import annotations

import io
import os
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


def _held_bytes(log: CappedLog) -> int:
    """The output bytes the log object holds in memory (every bytes or bytearray attribute)."""
    return sum(len(v) for v in vars(log).values() if isinstance(v, bytes | bytearray))


def _flood(log: CappedLog, rounds: int, chunk: int, held: list[int]) -> bytes:
    rng = random.Random(rounds)
    output = bytearray()
    for i in range(rounds):
        piece = f"step {i} ".encode() + bytes(rng.randrange(97, 123) for _ in range(chunk - 20)) + b"\n"
        log.write(piece)
        output += piece
        held.append(_held_bytes(log))
    return bytes(output)


def _expected(output: bytes, cap: int) -> bytes:
    tail = cap - cap // 2
    dropped = len(output) - cap // 2 - tail
    return (output[:cap // 2] + f"\n# nightly: output cut here: {dropped} of {len(output)} bytes omitted "
            f"(log cap {cap} bytes: head and tail kept)\n".encode() + output[-tail:])


def test_the_tail_waits_on_disk_beside_the_log_not_in_memory(tmp_path):
    """A night holds one capped log per running test: the tail (half the cap) must not sit in its memory."""
    path = tmp_path / "t.attempt1.log"
    out = open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o666), "wb")  # as the launcher opens it
    cap, held = 200_000, []
    log = CappedLog(out, cap)
    output = _flood(log, 400, 3000, held)  # 1.2 MB, six times the cap: the spill file is compacted
    assert os.listdir(tmp_path) == ["t.attempt1.log"]  # the spill file has no name: a killed night leaves none
    log.close()
    assert max(held) <= 2 * 4096 + 3000  # the scan's last line and a chunk, never the 100 kB tail
    assert path.read_bytes() == _expected(output, cap)
    assert log.dropped == len(output) - cap and os.listdir(tmp_path) == ["t.attempt1.log"]
    assert log.spill_dir == str(tmp_path)  # on the log's disk, never a tmpfs /tmp (memory again)


@pytest.mark.parametrize("fails_after", [0, 1, 150])
def test_a_spill_file_the_disk_refuses_keeps_the_tail_in_memory_and_the_log_whole(tmp_path, monkeypatch, fails_after):
    import pipelines.launch.logcap as logcap

    real, calls = logcap._pwrite_all, []

    def pwrite(fd, data, at):
        calls.append(at)
        if len(calls) > fails_after:
            raise OSError(28, "No space left on device")
        real(fd, data, at)

    monkeypatch.setattr(logcap, "_pwrite_all", pwrite)
    path = tmp_path / "t.log"
    log = CappedLog(open(path, "wb"), 200_000)
    output = _flood(log, 200, 3000, [])
    log.close()
    assert log.spill_error.startswith("OSError")
    assert path.read_bytes() == _expected(output, 200_000)


def _dense_output(seed: int) -> bytes:
    """Mostly report lines (a test that prints one per step), behind the prefixes tests use, some coloured,
    among lines that only mention the word; a few configurations, each reported thousands of times."""
    rng = random.Random(seed)
    forms = ["config {}: {}", "[minirl] config {}: {}", "INFO:__main__:config {}: {}", "[default0]:config {}: {}",
             "\x1b[31mconfig {}: {}\x1b[0m", "step {i} using config batch=256 lr=0.001", "step {i} loss ok"]
    lines = []
    for i in range(4000):
        outcome = "failed" if rng.random() < 0.002 else "passed"
        lines.append(rng.choice(forms).format(f"c{rng.randrange(5)}", outcome, i=i))
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("cap,chunk", [(8192, 13), (8192, 700), (30_000, 65536), (50_000, 4096)])
def test_a_log_dense_with_reports_reports_the_same_configurations_as_the_whole_output(seed, cap, chunk):
    output = _dense_output(seed)
    log, text = _capped(output, cap, chunk)
    assert log.dropped > 0
    assert config_outcomes(text) == config_outcomes(output.decode())


def test_a_flood_of_reports_holds_two_entries_per_configuration_at_most_and_still_fails_on_one_failure():
    """A test printing 1 MB of reports kept one pending entry per line in the tail (580,000 of them for
    the default cap): what the cut needs is each configuration's first report not yet cut."""
    lines = [f"config c{i % 4}: passed\n" for i in range(60_000)]
    lines[30_000] = "[default0]:config c2: failed\n"
    lines[30_001] = "myconfig c3: failed\n"  # another word, never a report
    lines[30_002] = "step 3 auto-config c1: failed\n"
    output = "".join(lines).encode()
    out = _Kept()
    log, held = CappedLog(out, 200_000), []
    for i in range(0, len(output), 65536):
        log.write(output[i:i + 65536])
        held.append(len(log._pending))
    log.close()
    text = out.kept.decode()
    cut = text.split("# nightly: output cut here:", 1)[1].split("# nightly: end of the cut output's", 1)[0]
    assert "reported 4 configuration(s)" in cut and "[default0]:config c2: failed\n" in cut
    assert config_outcomes(text) == {"c0": "passed", "c1": "passed", "c2": "failed", "c3": "passed"}
    assert max(held) <= 2 * 4


@pytest.mark.parametrize("line", ["[rank0]\u00a0config a: failed", "\u30ed\u30b0\u3000config a: failed",
                                  "config a: failed\u00a0", "step 3\x1cconfig a: failed"])
@pytest.mark.parametrize("dense", [False, True])
def test_a_failure_behind_unicode_whitespace_in_the_cut_middle_still_fails_the_test(line, dense):
    """The judge reads `\\s` as Python's str regex does (a no-break space, an ideographic space, ...); the
    capped log's bytes search knew ASCII whitespace only, so such a report in the cut part was dropped
    and the test passed. Dense: among more reports than a chunk is read line by line."""
    filler = "config b: passed\n" * (40 if dense else 1)
    output = ("x" * 100 + "\n") * 200 + filler + line + "\n" + filler + ("y" * 100 + "\n") * 200
    whole = config_outcomes(output)
    assert whole["a"] == "failed"
    log, text = _capped(output.encode(), 8192, 4096)
    assert log.dropped > 0
    assert config_outcomes(text) == whole


def test_a_word_before_config_that_is_no_whitespace_makes_no_report_in_the_cut_either():
    """The superset the bytes search finds is confirmed as the judge reads it: `\u00e9config a: failed` is
    another word to the judge, and must not stand in the cut for a failure."""
    output = ("x" * 100 + "\n") * 200 + "caf\u00e9config a: failed\nconfig a: passed\n" + ("y" * 100 + "\n") * 200
    log, text = _capped(output.encode(), 8192, 4096)
    assert log.dropped > 0
    assert config_outcomes(text) == config_outcomes(output) == {"a": "passed"}
