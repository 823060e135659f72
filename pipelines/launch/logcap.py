"""An attempt's output written to its log with a cap: the head and the tail are kept, the cut noted.

A test that prints 200 MB should not fill the state disk nor the UI, but the first lines (setup,
versions) and the last ones (the error) are what a CI maintainer reads. The launcher pipes the
child's output through :class:`CappedLog` on a thread, so a huge log is never written then re-read.

The lines that report a configuration (``config NAME: failed``, docs/coverage.md) decide the
outcome (the dispatcher reads them from the log file), so they are looked for as the output
streams: those the cut drops are written at the cut, one per configuration, a failure kept over a pass.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import BinaryIO

from pipelines.launch.base import LogSink

DEFAULT_LOG_CAP_BYTES = 20 * 1024 * 1024
#: the end of a line longer than this is all that is looked at (a report is at a line's end)
_SCAN_LINE_BYTES = 4096


def over_head_note(cap_bytes: int) -> str:
    """The line streamed instead of the output past the head."""
    return f"# nightly: output over {cap_bytes // 2} bytes; the rest is in the log file (capped)"


class CappedLog:
    """Writes the first half of the cap through, keeps the last half in memory until close."""

    def __init__(self, out: BinaryIO, cap_bytes: int = DEFAULT_LOG_CAP_BYTES, on_log: LogSink | None = None):
        self.out = out
        self.cap = cap_bytes
        self.head_left = cap_bytes // 2
        self.tail_cap = cap_bytes - cap_bytes // 2
        self.tail = bytearray()
        self.dropped = 0
        self.total = 0
        self.on_log = on_log
        self._partial = b""
        self._streaming = True
        self._line = b""  # the unfinished last line (its end), for the configuration scan
        self._pending: deque[tuple[int, str, str, bytes]] = deque()  # reports past the head: (start, name, outcome, line)
        self.cut_configs: dict[str, tuple[str, bytes]] = {}  # reports the cut dropped: name -> (outcome, line)

    def write(self, chunk: bytes) -> None:
        self._scan(chunk, self.total)
        self.total += len(chunk)
        if self.head_left > 0:
            head, chunk = chunk[: self.head_left], chunk[self.head_left:]
            self.head_left -= len(head)
            self.out.write(head)
            self.out.flush()
            self._stream(head)
        if chunk:
            if self._streaming:
                self._stream(b"", last=True)
                self._emit(over_head_note(self.cap))
                self._streaming = False
            self.tail += chunk
            over = len(self.tail) - self.tail_cap
            if over > 0:
                del self.tail[:over]
                self.dropped += over
                self._settle()

    def _scan(self, chunk: bytes, at: int) -> None:
        """Note the finished lines of ``chunk`` (which starts at offset ``at``) that report a configuration
        and end past the head: the cut may drop them."""
        data = self._line + chunk
        base = at - len(self._line)
        end = data.rfind(b"\n") + 1
        if b"config " in data[:end]:
            from pipelines.core.coverage.outcomes import config_outcomes  # the package takes 0.5 s to import

            start = 0
            while (found := data.find(b"config ", start, end)) >= 0:
                line_start = data.rfind(b"\n", 0, found) + 1
                line_end = data.find(b"\n", found) + 1
                if base + line_end > self.cap // 2:  # a line the head holds whole is never cut
                    line = data[max(line_start, line_end - 1 - _SCAN_LINE_BYTES):line_end - 1]
                    for name, outcome in config_outcomes(line.decode("utf-8", errors="replace")).items():
                        self._pending.append((base + line_start, name, outcome, line))
                start = line_end
        self._line = data[end:][-_SCAN_LINE_BYTES:]

    def _settle(self) -> None:
        """Keep the reports the cut has reached (their line starts before the kept tail)."""
        tail_at = self.total - len(self.tail)
        while self._pending and self._pending[0][0] < tail_at:
            _, name, outcome, line = self._pending.popleft()
            if self.cut_configs.get(name, ("",))[0] != "failed":
                self.cut_configs[name] = (outcome, line)

    def _emit(self, line: str) -> None:
        if self.on_log is not None:
            self.on_log(line)

    def _stream(self, data: bytes, last: bool = False) -> None:
        if self.on_log is None or not self._streaming:
            return
        lines = (self._partial + data).split(b"\n")
        self._partial = b"" if last else lines.pop()
        for line in lines if not last or lines[-1] else lines[:-1]:
            self.on_log(line.decode("utf-8", errors="replace"))

    def close(self) -> None:
        """Write the kept tail, with a line saying how much was cut between head and tail; close the file."""
        self._scan(b"\n", self.total)  # a last line without its newline
        self._settle()
        if self.dropped:
            self.out.write((f"\n# nightly: output cut here: {self.dropped} of {self.total} bytes omitted "
                            f"(log cap {self.cap} bytes: head and tail kept)\n").encode())
            if self.cut_configs:
                self.out.write((f"# nightly: the cut output reported {len(self.cut_configs)} configuration(s); "
                                "one line each, a failure kept over a pass:\n").encode())
                self.out.write(b"".join(line + b"\n" for _, line in self.cut_configs.values()))
                self.out.write(b"# nightly: end of the cut output's configuration lines\n")
        self.out.write(bytes(self.tail))
        self.out.close()
        self._stream(b"", last=True)


class CappedText:
    """A :class:`CappedLog` written as text (the Kubernetes launchers write a pod's log line by line, with
    their own notes between): the same cap, head, tail and cut line as a local test's log. ``streaming``
    turns false once the head is full: the writer then stops passing lines on (``over_head_note``)."""

    def __init__(self, out: BinaryIO, cap_bytes: int = DEFAULT_LOG_CAP_BYTES):
        self.capped = CappedLog(out, cap_bytes)

    def write(self, text: str) -> int:
        self.capped.write(text.encode("utf-8", errors="replace"))
        return len(text)

    def flush(self) -> None:
        """The head is flushed as it is written; the tail waits for :meth:`close`."""

    def close(self) -> None:
        self.capped.close()

    @property
    def cap(self) -> int:
        return self.capped.cap

    @property
    def streaming(self) -> bool:
        return self.capped.head_left > 0

    @property
    def dropped(self) -> int:
        return self.capped.dropped


def pump(source: BinaryIO, log: CappedLog) -> threading.Thread:
    """Copy ``source`` into ``log`` on a thread until EOF (every writer of the pipe has exited)."""

    def run() -> None:
        try:
            while chunk := source.read1(65536) if hasattr(source, "read1") else source.read(65536):
                log.write(chunk)
        finally:
            log.close()
            source.close()

    thread = threading.Thread(target=run, name="log-pump", daemon=True)
    thread.start()
    return thread
