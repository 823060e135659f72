"""An attempt's output written to its log with a cap: the head and the tail are kept, the cut noted.

A test that prints 200 MB should not fill the state disk nor the UI, but the first lines (setup,
versions) and the last ones (the error) are what a CI maintainer reads. The launcher pipes the
child's output through :class:`CappedLog` on a thread, so a huge log is never written then re-read.
"""

from __future__ import annotations

import threading
from typing import BinaryIO

from pipelines.launch.base import LogSink

DEFAULT_LOG_CAP_BYTES = 20 * 1024 * 1024


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

    def write(self, chunk: bytes) -> None:
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
                self._emit(f"# nightly: output over {self.cap // 2} bytes; the rest is in the log file (capped)")
                self._streaming = False
            self.tail += chunk
            over = len(self.tail) - self.tail_cap
            if over > 0:
                del self.tail[:over]
                self.dropped += over

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
        if self.dropped:
            self.out.write((f"\n# nightly: output cut here: {self.dropped} of {self.total} bytes omitted "
                            f"(log cap {self.cap} bytes: head and tail kept)\n").encode())
        self.out.write(bytes(self.tail))
        self.out.close()
        self._stream(b"", last=True)


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
