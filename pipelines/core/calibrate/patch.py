"""Rewrite the literal ``est_time`` of registry test files, keeping every other byte.

Only a file with exactly one registration for the estimate's hardware (in the SGLang family, for its
hardware and suite: a per-commit and a nightly call are two tests) is edited, and only when
its est_time is a plain number literal (positional first argument or ``est_time=``; a float is
written back as whole seconds): the edit
replaces that token's exact source span found with ``ast``, so comments, quotes and spacing stay.
Each test's call is found in its file (several calls on one line are told apart by backend, suite and
``hardware=[...]``); a call that cannot be is left alone, never the file's other edits. Everything else
is left alone and listed, the way framework M's maintainers do it by hand.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipelines.core.calibrate.lineage import Succession, rewrite_successions
from pipelines.core.calibrate.output import WHOLE_FILES, write_atomic
from pipelines.core.model import Estimate, Test
from pipelines.core.pyparse import parse_python


@dataclass(frozen=True)
class PatchPlan:
    """New contents per repo-relative path, and (path, why) for every proposal left alone."""

    edits: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (old text, new text)
    skipped: tuple[tuple[str, str], ...] = ()
    #: edits ``--write`` makes through a symlink to a file outside the repo, and why a patch cannot
    unpatchable: tuple[tuple[str, str], ...] = ()

    @property
    def patched(self) -> dict[str, tuple[str, str]]:
        """The edits a patch can carry (git stores a symlink as the link, not the file it names)."""
        out = {p for p, _ in self.unpatchable}
        return {p: edit for p, edit in self.edits.items() if p not in out}

    def diff(self) -> str:
        """A unified diff with ``a/`` and ``b/`` prefixes that ``git apply`` takes from the repo root, and only
        on the files as calibrate read them (:func:`_unified`)."""
        head = [f"# left alone: {p}: {why}\n" for p, why in (*self.skipped, *self.unpatchable)]
        out: list[str] = []
        for path, (old, new) in sorted(self.patched.items()):
            out.extend(_unified(old, new, path))
        if out:
            head.append(f"# {WHOLE_FILES}\n")
        return "".join(head + out) if out else "".join(head)

    def successions(self) -> list[Succession]:
        """Old -> new digest of every rewritten file: record them before writing (lineage.py)."""
        return rewrite_successions(self.edits)


def _lines(text: str) -> list[str]:
    """Split on newlines only, as git counts lines (str.splitlines also splits on form feeds)."""
    return re.findall(r".*?\n|.+\Z", text, re.S)


def _source_lines(text: str) -> list[str]:
    """Split where ast ends a line (``\\r\\n``, a lone ``\\r``, ``\\n``), each line keeping its ending, so
    ``lineno`` indexes them in a file with old Mac or mixed line endings too."""
    return re.findall(r".*?(?:\r\n|\r|\n)|.+\Z", text, re.S)


def _unified(old: str, new: str, path: str) -> list[str]:
    """The diff of one file as one hunk from its first line to its last (the whole file is context, and an
    unchanged last line is restated, ``-`` then ``+``): ``git apply`` matches such a hunk at the file's
    beginning and at its end, so it refuses the patch on a file that differs in any byte, where 3 lines of
    context would patch an edited file whose evidence no longer counts (ci-facts: only byte-identical files)."""
    old_lines, new_lines = _lines(old), _lines(new)
    lines = list(difflib.unified_diff(old_lines, new_lines, f"a/{path}", f"b/{path}",
                                      n=max(len(old_lines), len(new_lines))))
    if lines and lines[-1].startswith(" "):  # trailing context would let git apply take a file with lines added
        last = lines.pop()[1:]
        lines += ["-" + last, "+" + last]
    # difflib leaves a last line without newline unmarked; git apply needs the marker.
    return [ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines]


def _registrations(tree: ast.Module) -> list[ast.Call]:
    return [n.value for n in tree.body
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
            and n.value.func.id.startswith("register_") and n.value.func.id.endswith("_ci")]


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _literal(node: ast.expr | None):
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None


def _call_suite(call: ast.Call) -> str | None:
    """The suite a call names, as the catalog resolves it (``suite=`` or the second argument, else
    ``f"{stage}-test-{runner_config}"``); None when its literals do not say."""
    suite = _literal(_kw(call, "suite") or (call.args[1] if len(call.args) > 1 else None))
    if isinstance(suite, str):
        return suite
    stage, runner = _literal(_kw(call, "stage")), _literal(_kw(call, "runner_config"))
    return f"{stage}-test-{runner}" if isinstance(stage, str) and isinstance(runner, str) else None


def _for_hardware(call: ast.Call, test: Test) -> bool:
    """Whether ``call`` registers ``test``'s backend on its hardware. A test registered for no hardware
    in particular (SGLang's ``suite="nightly-1-gpu"``) is found by its suite, or by its line when the
    call names none: any other call of the backend registers another test, not a second est_time."""
    if call.func.id != f"register_{test.backend}_ci":  # type: ignore[attr-defined]
        return False
    if not test.hardware:
        named = _call_suite(call)
        return named == test.suite if named is not None else call.lineno <= test.line <= (call.end_lineno or call.lineno)
    suite = _kw(call, "suite") or (call.args[1] if len(call.args) > 1 else None)
    hw = _literal(_kw(call, "hardware"))
    suite_value = _literal(suite)
    return (isinstance(hw, list | tuple) and test.hardware in hw) or (
        isinstance(suite_value, str) and suite_value.endswith("-" + test.hardware))


def _est_node(call: ast.Call) -> ast.expr | None:
    return _kw(call, "est_time") or (call.args[0] if call.args else None)


def _replace(text: str, node: ast.expr, value: int) -> str:
    """Swap one single-line token; ast columns are UTF-8 byte offsets."""
    lines = _source_lines(text)
    raw = lines[node.lineno - 1].encode("utf-8")
    lines[node.lineno - 1] = (raw[:node.col_offset] + str(value).encode() + raw[node.end_col_offset:]).decode("utf-8")
    return "".join(lines)


def plan_patch(repo: Path | str, tests: Sequence[Test], estimates: Sequence[Estimate]) -> PatchPlan:
    """Decide every edit: calibrated proposals that differ from the registered literal."""
    repo = Path(repo)
    by_id = {t.id: t for t in tests}
    per_literal: dict[tuple[str, ...], int] = defaultdict(int)
    for t in tests:
        per_literal[_literal_key(t)] += 1
    files = _Files()
    # only the files a proposal would change are read; every registry test of them is found in its file
    changing = {by_id[e.test_id].path for e in estimates
                if e.test_id in by_id and e.samples_used and e.proposed != e.current}
    calls = {t.id: files.locate(repo, t) for t in tests if t.fmt == "registry" and t.path in changing}
    registers = Counter(c for c, _ in calls.values() if c is not None)  # tests per call: several for hardware=[...]
    skipped: list[tuple[str, str]] = []
    for e, held in _per_call(tests, estimates, {i: c for i, (c, _) in calls.items() if c is not None}):
        t = by_id.get(e.test_id)
        if t is not None and held:
            skipped.append((t.path, held))
        if t is None or not e.samples_used or e.proposed == e.current:
            continue
        call, located = calls.get(t.id, (None, ""))
        shared = call is not None and registers[call] > 1
        # a call listing several hardware is found in its file: other calls for one of its hardware do not make it ambiguous
        why = _edit(repo, t, e, 1 if shared else per_literal[_literal_key(t)], files, (call, located),
                    shared)
        if why:
            skipped.append((t.path, why))
    edits = {p: files.with_bom(p, files.originals[p], new) for p, new in files.texts.items()
             if new != files.originals[p]}
    unpatchable = tuple((p, why) for p, why in files.outside.items() if p in edits)
    return PatchPlan(edits, tuple(dict.fromkeys(skipped)), unpatchable)


#: a registration call: the file (its key in _Files) and the call's place among the file's
#: registrations (stable while literals are rewritten, unlike a column on an edited line)
Call = tuple[str, int]


@dataclass
class _Files:
    """The files a plan reads, keyed by where git stores their text (a symlink's target inside the repo)."""

    texts: dict[str, str] = field(default_factory=dict)
    originals: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # test path -> key
    outside: dict[str, str] = field(default_factory=dict)  # key -> why a patch cannot carry it
    bom: set[str] = field(default_factory=set)  # keys of files that start with a UTF-8 BOM
    digests: dict[str, str] = field(default_factory=dict)  # key -> sha256 of the bytes read
    problems: dict[str, str] = field(default_factory=dict)  # key -> why the file cannot be read
    encodings: dict[str, str] = field(default_factory=dict)  # key -> the encoding of a file that is not UTF-8

    def with_bom(self, key: str, old: str, new: str) -> tuple[str, str]:
        """The (old, new) text of an edit as the file's bytes hold it: a BOM file keeps its BOM, so the diff's
        first line, ``--write`` and the digests recorded for the rewrite all match the bytes."""
        return ("\ufeff" + old, "\ufeff" + new) if key in self.bom else (old, new)

    def key(self, repo: Path, rel: str) -> str:
        """``rel`` itself, or for a path through a symlink the repo-relative path of the file it names
        (``git apply`` refuses to patch a link); a target outside the repo keeps ``rel`` and is noted."""
        if rel not in self.keys:
            self.keys[rel] = rel
            try:
                real, root = (repo / rel).resolve(), repo.resolve()
            except (OSError, RuntimeError):
                return rel  # read next, and reported there
            if real != root / rel:
                if real.is_relative_to(root):
                    self.keys[rel] = real.relative_to(root).as_posix()
                else:
                    self.outside[rel] = (f"a symlink to {real}, outside the repository; git stores the link, not "
                                         "that file, so no patch can change it: `--write` writes through the link, "
                                         "or edit the file by hand")
        return self.keys[rel]

    def read(self, repo: Path, t: Test, proposed: int | None = None) -> tuple[str, str]:
        """(key, why the file cannot be edited: "" when it can, naming ``proposed`` as the value to set by
        hand where one can); reads it once."""
        key = self.key(repo, t.path)
        if key not in self.texts and key not in self.problems and key not in self.encodings:
            try:
                from pipelines.core.catalog.scan import python_source  # here: the catalog imports calibrate

                data = (repo / t.path).read_bytes()
                text, encoding = python_source(data)
            except (OSError, UnicodeDecodeError, SyntaxError) as exc:
                self.problems[key] = f"cannot read the file ({exc})"
            else:
                if encoding == "utf-8-sig":  # UTF-8 after its BOM: edit the text, and put the BOM back when writing
                    self.bom.add(key)
                if encoding in ("utf-8", "utf-8-sig"):
                    self.digests[key] = hashlib.sha256(data).hexdigest()
                    self.texts[key] = self.originals[key] = text
                else:  # every byte is kept, so the rewrite would have to be in that encoding
                    self.encodings[key] = encoding
        if key in self.problems:
            return key, self.problems[key]
        if key in self.encodings:
            value = "" if proposed is None else f" to {proposed}"
            return key, (f"the file is {self.encodings[key]} (a coding line); the patch edits UTF-8 files only: set "
                         f"est_time{value} by hand")
        if t.sha256 and self.digests[key] != t.sha256:
            return key, "the file changed since the catalog read it; recalibrate against this revision"
        return key, ""

    def calls(self, key: str, path: str) -> tuple[list[ast.Call], str]:
        """The file's registration calls as its text is now (literals already rewritten), or why none."""
        try:
            return _registrations(parse_python(self.texts[key], path)), ""
        except SyntaxError as exc:
            return [], f"line {exc.lineno}: not valid Python ({exc.msg})"

    def locate(self, repo: Path, t: Test) -> tuple[Call | None, str]:
        """The call that registers ``t``, or None and why it cannot be edited (a located reason)."""
        key, why = self.read(repo, t)
        if why:
            return None, why
        calls, why = self.calls(key, t.path)
        if why:
            return None, why
        call, why = _find_call(calls, t)
        return (None, why) if call is None else ((key, calls.index(call)), "")


def one_per_call(tests: Sequence[Test], estimates: Sequence[Estimate], calls: dict[str, Call] | None = None
                 ) -> list[Estimate]:
    """One estimate per registration call: a call listing several hardware (``hardware=[...]``)
    registers a test per entry but holds ONE est_time literal, which sets every one's timeout.

    So it gets the largest proposal of its tests, and keeps its value when one of them has no
    evidence to lower it; without this, the hardware calibrated last would win and the slower
    hardware's timeout could be cut below what it needs. ``calls``: test id -> the call found in its
    file (plan_patch); without it, tests of one backend and suite on one line are one call.
    """
    return [e for e, _ in _per_call(tests, estimates, calls)]


def _per_call(tests: Sequence[Test], estimates: Sequence[Estimate], calls: dict[str, Call] | None = None
              ) -> list[tuple[Estimate, str]]:
    """:func:`one_per_call`, each with why a hardware's proposed change is not written ("" when it is):
    calibrate shows that change per test, so the patch must say where it went."""
    by_id = {t.id: t for t in tests}

    def call_of(t: Test) -> object:
        if calls is None:
            return (t.path, t.line, t.backend, t.suite)
        return calls.get(t.id, t.id)  # a test not found in its file is no other test's call

    groups: dict[object, list[Test]] = defaultdict(list)
    for t in tests:
        if t.fmt == "registry":
            groups[call_of(t)].append(t)
    mine = {e.test_id: e for e in estimates}
    out: list[tuple[Estimate, str]] = []
    done: set[object] = set()
    for e in estimates:
        t = by_id.get(e.test_id)
        key = call_of(t) if t is not None and t.fmt == "registry" else None
        if key is None or len(groups[key]) < 2:
            out.append((e, ""))
            continue
        if key in done:
            continue
        done.add(key)
        members = [mine.get(m.id) for m in groups[key]]
        votes = [m.proposed if m is not None and m.samples_used else e.current for m in members]
        used = sum(m.samples_used for m in members if m is not None)
        hardware = sorted(m.hardware for m in groups[key])
        reason = (f"largest of {len(members)} hardware sharing one est_time literal ({', '.join(hardware)}): "
                  + e.reason)
        merged = replace(e, proposed=max(votes), samples_used=used, reason=reason)
        out.append((merged, _held(groups[key], members, merged)))
    return out


def _held(group: list[Test], members: list[Estimate | None], merged: Estimate) -> str:
    """Why a call's literal stays although one of its hardware proposes a change: the literal is shared
    with hardware that has no evidence, which keeps the value for them ("" when nothing is held back)."""
    if merged.proposed != merged.current:
        return ""
    changed = sorted((t.hardware, m.proposed) for t, m in zip(group, members, strict=True)
                     if m is not None and m.samples_used and m.proposed != merged.current)
    bare = sorted(t.hardware for t, m in zip(group, members, strict=True) if m is None or not m.samples_used)
    if not changed or not bare:
        return ""
    wanted = ", ".join(f"{hw} {value} s" for hw, value in changed)
    return (f"line {group[0].line}: est_time {merged.current} is shared with {', '.join(bare)} (one literal for "
            f"hardware {', '.join(sorted(t.hardware for t in group))}), which {'has' if len(bare) == 1 else 'have'} "
            f"no evidence for a change, so the proposal ({wanted}) is not written; import or run "
            f"{', '.join(bare)} first, or register each hardware with its own call")


def _literal_key(t: Test) -> tuple[str, ...]:
    """What one est_time literal of a file may be for. Framework M: one per backend and hardware (its
    maintainers edit a file's one literal for the hardware, and a suite names its hardware). The SGLang
    family (``nightly_rule`` exclusive) also by suite: its per-commit and nightly calls of a backend often
    share a hardware (``stage-a-test-cpu`` and ``nightly-cpu``, ``amd``) and are two tests, one call each."""
    return (t.path, t.backend, t.hardware, t.suite if t.nightly_rule == "exclusive" else "")


def _registers(call: ast.Call, t: Test) -> bool:
    """Whether ``call`` registers ``t``'s est_time as far as :func:`_literal_key` tells calls apart: its
    backend and hardware, and in the SGLang family its suite too (a call whose suite is no literal could be any)."""
    return _for_hardware(call, t) and (t.nightly_rule != "exclusive" or _call_suite(call) in (t.suite, None))


def _edit(repo: Path, t: Test, e: Estimate, same_hw: int, files: _Files, located: tuple[Call | None, str],
          shared: bool = False) -> str:
    """Rewrite ``t``'s est_time literal in ``files`` to ``e.proposed``; why not ("" when done).
    ``located``: the call :meth:`_Files.locate` found for ``t``, or why none."""
    if t.fmt != "registry":
        return (f"{t.fmt} tests have no est_time in the file; {e.proposed} s goes to the calibrated estimates the "
                "next night plans with")
    key, why = files.read(repo, t, e.proposed)
    if why:
        return why
    calls, why = files.calls(key, t.path)
    if why:
        return why
    mine = [] if shared else [c for c in calls if _registers(c, t)]
    if max(same_hw, len(mine)) > 1:
        suite = f" in suite {t.suite}" if t.nightly_rule == "exclusive" else ""
        return (f"{max(same_hw, len(mine))} registrations for {t.backend}/{t.hardware or 'any hardware'}{suite}; edit "
                "by hand")
    at, why = located
    if at is None:
        return why or f"line {t.line}: no registration call found; edit by hand"
    call = calls[at[1]]
    node = _est_node(call)
    if not (isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.lineno == node.end_lineno):
        return f"line {call.lineno}: est_time is not a number literal; edit by hand"
    # a float (SGLang's est_time=120.5) is what the catalog rounded up; the proposal is written as an int
    if math.ceil(node.value) != e.current:
        return f"line {node.lineno}: est_time is {node.value} in the file, not {e.current}; recalibrate"
    if e.proposed < 1:  # an est_time in force of 0 a calibration stored before no policy proposed it
        return (f"line {node.lineno}: est_time: {e.proposed} s is not a positive est_time (framework M's catalog "
                f"refuses the file); keep {node.value:g} or set it by hand")
    try:
        files.texts[key] = _replace(files.texts[key], node, e.proposed)
    except IndexError:  # a line ending ast and the splitting disagree on: never a traceback
        return f"line {node.lineno}: line endings the patch cannot follow; set est_time to {e.proposed} by hand"
    return ""


def _lists_hardware(call: ast.Call, hardware: str) -> bool:
    """Whether a call's literal ``hardware=[...]`` names ``hardware`` (``h200`` in ``4-gpu-h200`` or
    ``h200-fp8``); a call without a list runs on what its suite names, which was matched already."""
    listed = _literal(_kw(call, "hardware"))
    if not isinstance(listed, list | tuple):
        return True
    return any(isinstance(x, str) and f"-{hardware}-" in f"-{x}-" for x in listed)


def _find_call(calls: list[ast.Call], t: Test) -> tuple[ast.Call | None, str]:
    """The call registering ``t``: the one on its line (else the file's one call for its hardware), or of
    several there (``register_rocm_ci(...); register_cuda_ci(...)``) the one of its backend naming its
    suite and, in a ``hardware=[...]`` list, its hardware; None and a located reason when none or several
    are, so that only this call is left alone and the file's other edits are made."""
    on_line = [c for c in calls if c.lineno <= t.line <= (c.end_lineno or c.lineno)]
    if not on_line:  # line endings the catalog counted otherwise: the file's one call for the hardware
        on_line = [c for c in calls if _registers(c, t)][:2]
        if len(on_line) != 1:
            return None, f"line {t.line}: no registration call found; edit by hand"
    if len(on_line) == 1:
        return on_line[0], ""
    name = f"register_{t.backend}_ci"
    mine = [c for c in on_line if c.func.id == name]  # type: ignore[attr-defined]
    if len(mine) > 1:  # a call whose suite is no literal could be any suite's
        mine = [c for c in mine if _call_suite(c) in (t.suite, None)]
    if len(mine) > 1:
        mine = [c for c in mine if _lists_hardware(c, t.hardware)]
    if len(mine) == 1:
        return mine[0], ""
    what = f"suite {t.suite}" + (f" and {t.hardware}" if t.hardware else "")
    found = f"{len(mine)} {name} calls for {what}" if mine else f"no {name} call for {what}"
    return None, (f"line {t.line}: {len(on_line)} registration calls on one line and {found} among them, so "
                  f"{t.id}'s est_time is left alone (the file's other edits are made): put each call on its own "
                  "line, or edit it by hand")


def make_patch(repo: Path | str, tests: Sequence[Test], estimates: Sequence[Estimate]) -> str:
    """The unified diff of every literal est_time change; files left alone are listed as ``#`` lines."""
    return plan_patch(repo, tests, estimates).diff()


def write_plan(repo: Path | str, plan: PatchPlan) -> None:
    """Write a plan's edits into the checkout (temp file + rename per file)."""
    for path, (_, new) in plan.edits.items():
        write_atomic(Path(repo) / path, new)


def apply_patch(repo: Path | str, tests: Sequence[Test], estimates: Sequence[Estimate]) -> PatchPlan:
    """Plan and write the edits into the checkout; returns what was done. Callers that keep history
    record ``plan.successions()`` first (see ``nightly calibrate``)."""
    plan = plan_patch(repo, tests, estimates)
    write_plan(repo, plan)
    return plan
