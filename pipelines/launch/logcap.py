"""An attempt's output written to its log with a cap: the head and the tail are kept, the cut noted.

A test that prints 200 MB should not fill the state disk nor the UI, but the first lines (setup,
versions) and the last ones (the error) are what a CI maintainer reads. The launcher pipes the
child's output through :class:`CappedLog` on a thread, so a huge log is never written then re-read.

The lines that report a configuration (``config NAME: failed``, docs/coverage.md) decide the
outcome (the dispatcher reads them from the log file), so they are looked for as the output
streams: those the cut drops are written at the cut, one per configuration, a failure kept over a pass.
The look costs about the same whatever the output says: one compiled regex runs over each chunk (a
chunk dense with reports is first cut to its distinct lines), and only what the cut can still need
is held, per configuration (its first report not yet cut, passed or failed), never one entry per line.

The tail waits for the end in a spill file, not in memory: a night holds one capped log per running
test, and 16 tests flooding at once kept 16 tails of 10 MB (and their copies as they grew) in the
night's own process. The spill file is anonymous (unlinked as it is made, so a killed night leaves
none behind) and lives beside the log (the same disk the log is written to, never a tmpfs ``/tmp``).
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
import threading
from collections import OrderedDict
from typing import BinaryIO

from pipelines.core.coverage.outcomes import REPORT_LINE
from pipelines.launch.base import LogSink

DEFAULT_LOG_CAP_BYTES = 20 * 1024 * 1024
#: the end of an unfinished line longer than this is all that waits for the next chunk (a report is at a
#: line's end), and all of a line written at the cut
_SCAN_LINE_BYTES = 4096
#: the lines that may be ``outcomes._LINE`` reports, over bytes, with the literal first so that the search
#: skips to each ``config`` in C: a superset (any byte but printable ASCII other than ``:`` and ``]`` before
#: it, anything after the outcome), since a bytes ``\s`` knows no Unicode whitespace (a no-break space
#: before ``config`` or after ``failed`` is whitespace to the judge); :func:`_report` confirms each on the
#: decoded line, as the judge reads it
_REPORT = re.compile(rb"config(?<![\x21-\x39\x3b-\x5c\x5e-\x7e]config) (\S+): (passed|failed)[^\n]*$", re.MULTILINE)
#: ASCII bytes that are whitespace to a str regex's ``\s`` and not to a bytes one (file/group/record separators)
_ODD_SPACE = re.compile(rb"[\x1c-\x1f]")
#: ``outcomes._LINE`` over bytes exactly, for text without such bytes and without non-ASCII ones (where a
#: bytes ``\s`` is the judge's): one search in C, each line it finds a report as the judge reads it
_EXACT = re.compile(rb"config(?<![^\s:\]]config) (\S+): (passed|failed)\s*$", re.MULTILINE)
#: a byte after which :data:`_EXACT` may read a line otherwise than the judge: non-ASCII, or an odd space
_ODD = re.compile(rb"[\x80-\xff\x1c-\x1f]")
#: ``outcomes._ANSI`` over bytes: a coloured logger wraps the report in terminal codes
_ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]")
#: more outcomes (``: passed``, ``: failed``) in a chunk than this and the chunk is first cut to its distinct
#: lines: a test that prints the same few reports in a loop costs one regex match per distinct line
_DENSE = 16
#: how much of the spill file is copied at a time (compaction, close): the most a log holds in memory
_COPY_BYTES = 256 * 1024


def _folder_of(out: BinaryIO) -> str | None:
    """The folder of ``out`` when it is a regular file (the log); None for a pipe, /dev/null or memory."""
    try:
        fd = out.fileno()
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        name = getattr(out, "name", None)
        if not isinstance(name, str):  # opened from a descriptor, as the local launcher does
            name = os.readlink(f"/proc/self/fd/{fd}")
    except (OSError, ValueError, AttributeError):
        return None
    folder = os.path.dirname(os.path.abspath(name))
    return folder if os.path.isdir(folder) else None


def _pwrite_all(fd: int, data: bytes, at: int) -> None:
    """``data`` written whole at ``at``; a short write (a full disk) is an OSError."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, at)
        if n <= 0:
            raise OSError(f"wrote {n} of {len(view)} bytes")
        view, at = view[n:], at + n


def _report(text: bytes, match: re.Match[bytes]) -> tuple[bytes, bytes] | None:
    """(configuration, outcome) of the report ``match`` found, as the judge (``outcomes._LINE`` on the
    decoded line) reads its line; None when the judge reads no report there."""
    start = text.rfind(b"\n", 0, match.start()) + 1
    line = text[start:match.end()]
    if line.isascii() and match.group(0).endswith((b"passed", b"failed")) and not _ODD_SPACE.search(line) and (
            match.start() == start or text[match.start() - 1] in b" \t\r\x0b\x0c:]"):
        return match.group(1, 2)  # the common line: what the bytes say is what the judge reads
    judged = REPORT_LINE.search(line.decode("utf-8", errors="replace"))
    if judged is None:
        return None
    return judged.group(1).encode("utf-8", errors="replace"), judged.group(2).encode()


def _reports(text: bytes):
    """(configuration, outcome, where its line's ``config`` starts) of each report in ``text``."""
    for match in _REPORT.finditer(text):
        key = _report(text, match)
        if key is not None:
            yield key, match.start()


def _first_report(text: bytes, key: tuple[bytes, bytes], at: int) -> int:
    """Where in ``text``, from ``at`` on, the first report of ``key`` (configuration, outcome) starts; -1 if none."""
    needle = b"config %s: %s" % key
    while (found := text.find(needle, at)) >= 0:
        match = _REPORT.match(text, found)
        if match is not None and _report(text, match) == key:
            return found
        at = found + 1
    return -1


def over_head_note(cap_bytes: int) -> str:
    """The line streamed instead of the output past the head."""
    return f"# nightly: output over {cap_bytes // 2} bytes; the rest is in the log file (capped)"


class CappedLog:
    """Writes the first half of the cap through, keeps the last half in a spill file until close.

    The spill file holds the output past the head from some offset on; once it passes twice the
    tail's size its last tail is moved to its start, so it never holds more than two tails and the
    log never holds more than one copy buffer in memory."""

    def __init__(self, out: BinaryIO, cap_bytes: int = DEFAULT_LOG_CAP_BYTES, on_log: LogSink | None = None):
        self.out = out
        self.cap = cap_bytes
        self.head_left = cap_bytes // 2
        self.tail_cap = cap_bytes - cap_bytes // 2
        self.spill_dir = _folder_of(out)
        self._spill: BinaryIO | None = None  # made when the head is full: most logs never need it
        self._spilled = 0  # bytes in the spill file: the output's last ones
        self._memory = bytearray()  # the tail, only when no spill file could be made or written
        self.spill_error = ""
        self.tail_len = 0  # bytes of the kept tail (the last ones past the head)
        self.dropped = 0
        self.total = 0
        self.on_log = on_log
        self._partial = b""
        self._streaming = True
        self._line = b""  # the unfinished last line (its end), for the configuration scan
        self._line_at = 0  # its offset in the output (one less when its start was dropped: see _scan)
        # reports past the head the cut has not reached: (name, outcome) -> (line start, line), the first
        # of each, in the order of their starts; at most two per configuration, whatever the output's length
        self._pending: OrderedDict[tuple[bytes, bytes], tuple[int, bytes]] = OrderedDict()
        self.cut_configs: dict[bytes, tuple[bytes, bytes]] = {}  # reports the cut dropped: name -> (outcome, line)

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
            self._keep(chunk)
            over = self.tail_len + len(chunk) - self.tail_cap
            self.tail_len += len(chunk) - max(over, 0)
            if over > 0:
                self.dropped += over
                self._settle()

    def _keep(self, chunk: bytes) -> None:
        """Append ``chunk`` to the spill file (compacted past twice the tail), or to memory when that fails."""
        if not self.spill_error:
            try:
                if self._spill is None:
                    self._spill = tempfile.TemporaryFile(dir=self.spill_dir, prefix=".nightly-log-tail-", buffering=0)
                _pwrite_all(self._spill.fileno(), chunk, self._spilled)
                self._spilled += len(chunk)
                if self._spilled > 2 * self.tail_cap:
                    self._compact()
                return
            except OSError as exc:  # a full disk: the tail waits in memory, as it always did before
                self.spill_error = f"{type(exc).__name__}: {exc}"
                self._memory += self._read_tail()
                self._close_spill()
        self._memory += chunk
        del self._memory[:max(len(self._memory) - self.tail_cap, 0)]

    def _compact(self) -> None:
        """Move the spill file's last tail to its start (the source lies wholly after the destination)."""
        fd = self._spill.fileno()  # type: ignore[union-attr]
        start = self._spilled - self.tail_cap
        for done in range(0, self.tail_cap, _COPY_BYTES):
            data = os.pread(fd, min(_COPY_BYTES, self.tail_cap - done), start + done)
            _pwrite_all(fd, data, done)
        os.ftruncate(fd, self.tail_cap)
        self._spilled = self.tail_cap

    def _tail_pieces(self):
        """The kept tail, a copy buffer at a time."""
        if self._spill is None:
            yield bytes(self._memory[max(len(self._memory) - self.tail_len, 0):])
            return
        fd = self._spill.fileno()
        for at in range(self._spilled - self.tail_len, self._spilled, _COPY_BYTES):
            yield os.pread(fd, min(_COPY_BYTES, self._spilled - at), at)

    def _read_tail(self) -> bytes:
        """The kept tail whole (only when the spill file failed: the tail moves to memory)."""
        try:
            return b"".join(self._tail_pieces()) if self._spill is not None else b""
        except OSError:
            return b""

    def _close_spill(self) -> None:
        if self._spill is not None:
            self._spill.close()  # anonymous: closing it frees its space
            self._spill = None
            self._spilled = 0

    def _scan(self, chunk: bytes, at: int) -> None:
        """Note the finished lines of ``chunk`` (which starts at offset ``at``) that report a configuration
        and end past the head: the cut may drop them."""
        data = self._line + chunk
        base = self._line_at
        end = data.rfind(b"\n") + 1
        head = self.cap // 2 - base  # a line the head holds whole is never cut
        start = 0 if head <= 0 else data.rfind(b"\n", 0, min(head, end)) + 1
        if start < end and data.find(b"config ", start, end) >= 0:
            region = data[start:end]
            if b"\x1b" in region:  # removing the codes only moves a line's start back: still before the cut
                region = _ANSI.sub(b"", region)
            # no line that only says the word (``using config batch=256``) reaches the regex
            if count := region.count(b": passed") + region.count(b": failed"):
                if count > _DENSE:  # each line once (its first): what is left starts no later than it did
                    region = b"\n".join(dict.fromkeys(region.split(b"\n")))
                self._note(region, base + start, dense=count > _DENSE)
        rest = data[end:]
        if len(rest) > _SCAN_LINE_BYTES:  # its start dropped: a leading byte that no report follows
            rest = b"\0" + rest[-_SCAN_LINE_BYTES:]
        self._line, self._line_at = rest, at + len(chunk) - len(rest)

    def _note(self, text: bytes, at: int, dense: bool) -> None:
        """Keep the first report of each (configuration, outcome) in ``text`` (finished lines from offset
        ``at``) that no earlier one already covers. In a ``dense`` text the regex runs over all of it in C
        and Python looks for one line per distinct report, not per report line."""
        pending, cut = self._pending, self.cut_configs
        if _ODD.search(text) is None:  # the common text: the exact search, all in C
            found = (((key, -1) for key in dict.fromkeys(_EXACT.findall(text))) if dense
                     else ((match.group(1, 2), match.start()) for match in _EXACT.finditer(text)))
        elif dense:
            found = ((key, -1) for key in dict.fromkeys(key for key, _ in _reports(text)))
        else:
            found = _reports(text)
        cursor = 0  # the first reports of the distinct keys come in this order
        for key, where in found:
            name = key[0]
            if key in pending or (name, b"failed") in pending or cut.get(name, (b"",))[0] == b"failed":
                continue  # a pass after a failure, or a second one before the cut reaches the first
            if where < 0:
                where = _first_report(text, key, cursor)
                if where < 0:  # never: the regex matched this very text at or after the cursor
                    pending[key] = (at + cursor, b"config %s: %s" % key)
                    continue
                cursor = where
            line_start = text.rfind(b"\n", 0, where) + 1
            line_end = text.find(b"\n", where)
            line_end = len(text) if line_end < 0 else line_end
            pending[key] = (at + line_start, text[max(line_start, line_end - _SCAN_LINE_BYTES):line_end])

    def _settle(self) -> None:
        """Keep the reports the cut has reached (their line starts before the kept tail)."""
        tail_at = self.total - self.tail_len
        pending = self._pending
        while pending and next(iter(pending.values()))[0] < tail_at:
            (name, outcome), (_, line) = pending.popitem(last=False)
            if self.cut_configs.get(name, (b"",))[0] != b"failed":
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
        try:
            for piece in self._tail_pieces():
                self.out.write(piece)
        finally:
            self._close_spill()
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
