"""Where each key and list item of a JSON text is, so a hand-edited file's problem names its line.

The json module keeps no positions; the files located this way (a quarantine document, an
estimates file) are small, so walking the text once more is cheap; a night record, which may be
large, is walked only once it is found wrong.
"""

from __future__ import annotations

import bisect
import json


def key_lines(text: str) -> dict[tuple, int]:
    """The 1-based line of every key and list item of a valid JSON text, by its path
    (``("actions", 3, "by")``); the whole document is ``()``."""
    decoder = json.JSONDecoder()
    breaks = [i for i, ch in enumerate(text) if ch == "\n"]
    out: dict[tuple, int] = {}

    def ws(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    def walk(i: int, path: tuple) -> int:
        i = ws(i)
        out.setdefault(path, bisect.bisect_left(breaks, i) + 1)
        if text[i] not in "{[":
            return decoder.raw_decode(text, i)[1]
        close, i, n = "}" if text[i] == "{" else "]", ws(i + 1), 0
        while text[i] != close:
            if close == "}":
                start = i
                key, i = json.decoder.scanstring(text, i + 1)
                out[(*path, key)] = bisect.bisect_left(breaks, start) + 1
                i = walk(ws(i) + 1, (*path, key))  # past the ':'
            else:
                i, n = walk(i, (*path, n)), n + 1
            i = ws(i)
            if text[i] == ",":
                i = ws(i + 1)
        return i + 1

    walk(0, ())
    return out
