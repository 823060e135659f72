"""Runs inside the test's process: run a test file as its runner would, without its prepare().

Why not ``python3 tests/test_x.py``? Its ``__main__`` calls ``prepare()`` first, which downloads
and converts again; the orchestrator's assets have already done that work at the paths the test
expects. So the wrapper reads the file (``ast``) and picks one of two ways:

- a file with an ``if __name__ == "__main__":`` block (run for ``execute``, the default; any guard that
  compares ``__name__`` with ``"__main__"``, also nested in a module-level ``if``: :func:`_main_blocks`): run the
  file as ``__main__``, as its runner would, with each ``prepare(...)`` statement of that block
  replaced by ``pass`` (same line numbers, so tracebacks point at the file's real lines). The
  usual anatomy (``prepare()`` then ``execute()``) so runs exactly ``execute()``; a block that
  does more (checks a result, calls ``unittest.main()``) keeps its checks;
- a file without one that defines ``execute()`` (or any other ``--func``): import it as
  multiprocessing's spawn children do (``__mp_main__``, its ``__main__`` block not run) and call
  the function (an ``async def`` one is run to its end with ``asyncio.run()``).

Either way the file is ``__main__`` while it runs, so a child started with multiprocessing's
"spawn" (``torch.multiprocessing.spawn``) re-imports it and finds the functions it was given, and
``sys.path`` is the one ``python3 FILE`` would give it (:func:`script_path`).

The log's first line from the wrapper says which way it took. A file that runs no test fails
saying so: one with neither an ``execute()`` nor a ``__main__`` block (``python3 FILE`` would run
nothing), one whose ``__main__`` block only calls ``prepare()`` (which the wrapper skips), one
that defines test entry points (``execute()``, ``test_*`` functions, ``TestCase`` classes) none of
which ran, whatever set-up its module level did (a module level that checks itself, an ``assert``, a
``raise``, ``sys.exit("loss rose")``, a bare call of its own ``main()``, is a script-style test judged by its exit), or whose ``__main__`` block names one and exits 0
(or ends) before any ran (a skip is not a pass; :class:`_MustRun`: only the entry points the block runs
count, not a ``test_*``-named helper it calls in an ``if`` condition to decide to skip), and one
whose unittest program (``unittest.main()``) or pytest run (``pytest.main()``), not one started
inside ``execute()``, ran no test or only skipped or expected failures (pytest's xfail,
``@unittest.expectedFailure``) among the tests it found. A failure that
program or run reported fails the test even when the file drops its status and exits 0
(``unittest.main(exit=False)``, ``pytest.main()`` without ``sys.exit(...)``), and so does one a bare
``unittest.TextTestRunner().run(suite)`` of the file reported (:class:`_UnittestRuns`), unless a later run
passed the same test: a flaky rerun, or, which the wrapper cannot tell apart, the next configuration of a loop
that runs the same suite per backend.

Standard library only (plus optional dagster-pipes): this file must also run inside a framework's
own image. It writes a small JSON result (measured time of the test's run, error text) and,
when launched by Dagster Pipes, reports the same fields through Pipes.

The result is the positive evidence of a pass: it is written only after the test returned
(``"finished": true``, the attempt's token and the wrapper's pid), so a test that calls
``os._exit(0)`` halfway (inside ``execute()`` or a ``test*`` function) is not taken for a pass by its exit code;
an ``os._exit()`` after the test returned (``execute(); os._exit(0)`` in the ``__main__`` block, past a hanging
NCCL or Ray teardown) first writes the result as a normal end with that status would; and only by the wrapper's own
process, never by a child the test forked whose ``sys.exit()`` unwinds into the wrapper's code. With ``--deadline-s`` the wrapper also kills its own
process group past that deadline: a test the night lost track of (night killed with ``kill -9``)
still cannot run for ever.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import signal
import struct
import sys
import threading
import time
import traceback
import types

#: the wrapper's exit status when it could not write the test's result (sysexits' EX_IOERR): the test's
#: outcome is unknown. The status alone proves nothing: a test may exit 74 itself without the wrapper ever
#: reaching its end (``os._exit(74)``, a C ``exit(74)``, an exec'd program), so the wrapper also says
#: :data:`RESULT_NOT_WRITTEN_LINE` on stderr, which lands in the attempt's log (:func:`why_result_not_written`).
RESULT_NOT_WRITTEN = 74
#: how the wrapper's line starts when it could not write the result; the result's path follows
RESULT_NOT_WRITTEN_LINE = "# nightly wrapper: could not write the test's result to "


def why_result_not_written(output: str, result_path: str = "") -> str:
    """The reason the wrapper gave (``Permission denied``) when ``output`` (the end of an attempt's log,
    or a pod's termination message) holds its line that it could not write the result (to
    ``result_path``; any path when not given), else "": the evidence that an exit status 74 is the
    wrapper's, not the test's own."""
    path = re.escape(result_path) if result_path else r"[^\n]*?"
    found = re.findall(rf"{re.escape(RESULT_NOT_WRITTEN_LINE)}{path} \(([^\n]*?)\); exiting {RESULT_NOT_WRITTEN}\b", output)
    return (found[-1] or "no reason given") if found else ""


def _depth(tree: ast.AST) -> int:
    """How many levels deep the tree is (counted without recursion: a chain of 1,500 ``+`` is 1,500 levels)."""
    deepest, todo = 0, [(tree, 1)]
    while todo:
        node, level = todo.pop()
        deepest = max(deepest, level)
        todo.extend((child, level + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _compile(path: str, source: bytes | ast.Module) -> types.CodeType:
    """The file's code (from its bytes, or its rewritten tree), compiled without the wrapper's ``from __future__``
    imports, which the test never asked for. On Python 3.11 compiling a tree counts each of its levels against the
    recursion limit (``python3 FILE`` compiling the same source does not): the limit is raised by the tree's depth
    for this call only, a depth the parser already built in C from the file, so the test still starts with its own."""
    full = os.path.abspath(path)
    if isinstance(source, bytes):
        return compile(source, full, "exec", dont_inherit=True)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + _depth(source))
    try:
        return compile(source, full, "exec", dont_inherit=True)
    finally:
        sys.setrecursionlimit(limit)


def _run_module(name: str, code: types.CodeType, path: str) -> types.ModuleType:
    """Run the file's code (:func:`_compile`) as module ``name``, registered as ``__main__`` while :func:`main`
    runs it (it puts its own back after)."""
    full = os.path.abspath(path)
    module = types.ModuleType(name)
    module.__dict__.update(__file__=full, __cached__=None, __loader__=None, __package__=None, __spec__=None)
    module.__dict__[_ENTERED_MARK] = _ENTERED.add  # what the file's marked entry points call (:func:`_mark_entries`)
    module.__dict__[_BLOCK_MARK] = _block_started  # what its __main__ block calls first (:func:`_main_program`)
    sys.modules["__main__"] = sys.modules[name] = module
    exec(code, module.__dict__)
    return module


def _load_module(path: str, code: types.CodeType) -> types.ModuleType:
    """Import the file as multiprocessing's spawn children do: named ``__mp_main__`` (its ``__main__``
    block does not run) and registered as ``__main__`` too. A spawned child (``multiprocessing``
    "spawn", ``torch.multiprocessing.spawn``) finds the file from ``__main__.__file__``, re-runs it as
    ``__mp_main__`` and so finds the functions and classes pickled for it; under a name of its own
    the child could not import them."""
    return _run_module("__mp_main__", code, path)


def _is_main_guard(stmt: ast.stmt) -> bool:
    """An ``if`` whose test compares ``__name__`` with ``"__main__"`` in any form python3 runs it for:
    ``__name__ == "__main__"`` (either side), ``__name__ in ("__main__",)`` (a tuple, list or set), also
    inside ``and``/``or``/``not`` (``if __name__ == "__main__" and os.environ.get("SKIP") != "1":``)."""
    if not isinstance(stmt, ast.If):
        return False

    def main_side(node: ast.expr) -> bool:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(main_side(e) for e in node.elts)
        return isinstance(node, ast.Constant) and node.value == "__main__"

    for node in ast.walk(stmt.test):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
                    and any(main_side(s) for s in sides)):
                return True
    return False


def _nested(stmt: ast.stmt) -> list[ast.stmt]:
    """The statements a compound statement runs (its body, ``else``, ``finally``, handlers and ``match``
    cases); none for a simple one."""
    return [*getattr(stmt, "body", []), *getattr(stmt, "orelse", []), *getattr(stmt, "finalbody", []),
            *(x for h in getattr(stmt, "handlers", []) for x in h.body),
            *(x for case in getattr(stmt, "cases", []) for x in case.body)]


def _main_blocks(tree: ast.Module) -> list[ast.If]:
    """The file's ``__main__`` blocks (:func:`_is_main_guard`): at module level, or nested in a module-level
    ``if``/``try``/``with`` (``if sys.version_info >= (3, 8):`` around one), where ``python3 FILE`` runs them too;
    not inside a function or class."""
    found: list[ast.If] = []

    def visit(stmts: list[ast.stmt]) -> None:
        for s in stmts:
            if _is_main_guard(s):
                found.append(s)  # type: ignore[arg-type]
            elif isinstance(s, (ast.If, ast.Try, ast.With, ast.AsyncWith)) or type(s).__name__ == "TryStar":
                visit(_nested(s))
    visit(tree.body)
    return found


def _called(stmt: ast.stmt) -> str | None:
    """The name a statement calls when it is just ``name(...)``, else None."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name):
        return stmt.value.func.id
    return None


def _skip_prepare(body: list[ast.stmt]) -> int:
    """Replace each ``prepare(...)`` statement of ``body``, also nested (``if``, ``try``, a ``def``), by ``pass`` at
    the same line (the night's assets did that work); how many. The tree is walked without recursion (``ast.walk``),
    as every walk of the wrapper is: a file's expression may nest deeper than the recursion limit
    (:func:`_compile`)."""
    lists = [body, *(v for s in body for node in ast.walk(s) for _, v in ast.iter_fields(node) if isinstance(v, list))]
    skipped = 0
    for stmts in lists:
        for i, s in enumerate(stmts):
            if _called(s) == "prepare":
                stmts[i] = ast.copy_location(ast.Pass(), s)
                skipped += 1
    return skipped


def _located(node: ast.AST, like: ast.AST) -> ast.AST:
    """``node`` (one the wrapper adds) and the nodes under it at the location of ``like``; set here rather than by
    ``ast.fix_missing_locations``, which recurses once per level of the whole file's tree."""
    for n in ast.walk(node):
        ast.copy_location(n, like)
    return node


def _main_program(tree: ast.Module) -> tuple[ast.Module, int]:
    """The file with every ``prepare(...)`` statement of its ``__main__`` block(s) replaced by ``pass``, and each
    block first saying it began (``__nightly_block_started__()`` at its first statement's line, so tracebacks keep
    the file's lines): :func:`_block_started`."""
    skipped = 0
    for stmt in _main_blocks(tree):
        skipped += _skip_prepare(stmt.body)  # type: ignore[attr-defined]
        mark = ast.Expr(ast.Call(ast.Name(_BLOCK_MARK, ast.Load()), [], []))
        stmt.body = [_located(mark, stmt.body[0]), *stmt.body]  # type: ignore[attr-defined]
    return tree, skipped


def _does_nothing(block: ast.If) -> bool:
    """Whether a (rewritten) ``__main__`` block holds only ``pass`` and bare constants (a docstring, ``...``),
    besides the wrapper's mark that it began."""
    return all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
               or _called(s) == _BLOCK_MARK for s in block.body)


def _runs_at_top_level(tree: ast.Module) -> bool:
    """Whether a script-style test runs at module level, whatever the ``__main__`` block holds: a check
    (``assert``), a loop or ``with`` block, or a statement that calls a function or class the file defines
    itself (``run_test()``, ``asyncio.run(main())``, ``result = Runner().run()``), also under a module-level
    ``if``/``try``. Set-up is not a test: imports, assignments, registrations, and calls of imported
    functions alone (``logging.basicConfig()``, ``sys.path.insert()``; a test run only through an imported
    helper, ``run(cfg)``, is not seen: call it from the ``__main__`` block). A file that also defines test entry
    points still runs a test only when one of them runs (:class:`_MustRun`), unless its module level checks
    (:func:`_checks_at_top_level`)."""
    own = {s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}

    def calls_own(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in own for n in ast.walk(node))

    def runs(s: ast.stmt) -> bool:
        if _is_main_guard(s):
            return False
        if isinstance(s, (ast.Assert, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            return True
        if isinstance(s, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign)) and s.value is not None:
            return calls_own(s.value)  # run_test(), asyncio.run(main()), sys.exit(main()), Runner().run()
        if isinstance(s, (ast.If, ast.Try)):
            return any(runs(b) for b in _nested(s))
        return False
    return any(runs(s) for s in tree.body) or _checks_at_top_level(tree)


def _exits_0(args: list[ast.expr]) -> bool:
    """Whether an exit with these arguments (``sys.exit()``, ``sys.exit(0)``, ``SystemExit(None)``) exits 0."""
    return not args or (isinstance(args[0], ast.Constant) and args[0].value in (0, None))


def _checks_at_top_level(tree: ast.Module) -> bool:
    """Whether the file's module level checks something that can fail, outside its functions, classes and
    ``__main__`` block (also inside a module-level ``for``/``while``/``if``/``with``/``try``): an ``assert``, a
    ``raise``, or an exit whose status may not be 0 (``sys.exit(1)``, ``sys.exit(main())``, ``exit("loss
    rose")``). Such a file is a script-style test, judged by how it exits, whatever ``test_*`` helper it also
    defines and never calls; so does a bare call statement of a function the file defines (``main()``, also
    ``asyncio.run(main())``), which runs the file's own code as its test, as a script-style test's module level does.
    An exit 0 (``sys.exit(0)``, ``raise SystemExit``) is a skip or an end, no check; set-up (an assignment, even from
    its own function, ``CONFIGS = _configs()``, a loop that builds a list) is no check either."""
    own = {s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def calls_own(node: ast.expr) -> bool:  # main(), asyncio.run(main())
        return isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Name) and node.func.id in own) or any(calls_own(a) for a in node.args))

    def exits(node: ast.AST) -> bool:
        if not isinstance(node, ast.Call):
            return False
        func = node.func
        name = func.id if isinstance(func, ast.Name) else (
            f"{getattr(func.value, 'id', '')}.{func.attr}" if isinstance(func, ast.Attribute) else "")
        return name in ("exit", "quit", "sys.exit", "os._exit") and not _exits_0(node.args)

    def checks(s: ast.stmt) -> bool:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or _is_main_guard(s):
            return False
        if isinstance(s, ast.Assert) or (isinstance(s, ast.Expr) and calls_own(s.value)):
            return True
        if isinstance(s, ast.Raise):  # `raise SystemExit` / `raise SystemExit(0)` exits 0
            call = s.exc if isinstance(s.exc, ast.Call) else None
            named = call.func if call else s.exc
            return not (isinstance(named, ast.Name) and named.id == "SystemExit" and _exits_0(call.args if call else []))
        inner = _nested(s)
        if inner:  # a compound statement: what it runs
            return any(checks(x) for x in inner)
        return any(exits(n) for n in ast.walk(s))
    return any(checks(s) for s in tree.body)


#: the test entry points of the file that began to run in the wrapper's process (``execute()``, ``test_loss()``)
_ENTERED: set[str] = set()
#: the global the marked entry points call to say they began (:func:`_mark_entries`)
_ENTERED_MARK = "__nightly_entered__"


def _is_entry_function(stmt: ast.stmt) -> bool:
    """A module-level ``execute()`` or ``test_*`` function: what the usual anatomy or pytest calls to run a test."""
    return isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
        stmt.name == "execute" or stmt.name.startswith("test_"))


def _is_testcase_class(stmt: ast.stmt) -> bool:
    """A module-level class with a ``...TestCase`` base (``unittest.TestCase``, a framework's ``CustomTestCase``)."""
    return isinstance(stmt, ast.ClassDef) and any(
        (b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")).endswith("TestCase") for b in stmt.bases)


def _test_entries(tree: ast.Module) -> dict[str, int]:
    """The test entry points the file defines, as the reason names them (``execute()``, ``test_loss()``,
    ``TestTrain``), with their lines. A file that defines any runs a test only when one of them runs:
    its module-level code around them (``CONFIGS = _configs()``, a loop that builds a matrix) is set-up."""
    return {(f"{s.name}()" if _is_entry_function(s) else s.name): s.lineno
            for s in tree.body if _is_entry_function(s) or _is_testcase_class(s)}


def _mark(func: ast.FunctionDef | ast.AsyncFunctionDef, entry: str) -> None:
    """Make ``func`` first say that ``entry`` began, before its first statement (after its docstring)."""
    body = func.body
    doc = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)
    mark = ast.Expr(ast.Call(ast.Name(_ENTERED_MARK, ast.Load()), [ast.Constant(entry)], []))
    body.insert(int(doc), _located(mark, body[min(int(doc), len(body) - 1)]))


def _mark_entries(tree: ast.Module) -> ast.Module:
    """Each entry function (:func:`_is_entry_function`) first says it began: ``__nightly_entered__("execute()")``
    before its first statement (after its docstring), at that statement's line, so tracebacks keep the file's
    lines; so does each ``test*`` method of a ``TestCase`` class, as its class (``__nightly_entered__("TestTrain")``):
    a ``__main__`` block may call it without a runner (``TestTrain("test_loss").debug()``, ``t.test_loss()``).
    The wrapper so knows whether the file's program ran one, however it called it (a loop over ``globals()``, a
    thread); a coroutine says so only once it is awaited. A spawned child imports the file itself, unmarked."""
    for stmt in tree.body:
        if _is_entry_function(stmt):
            _mark(stmt, f"{stmt.name}()")  # type: ignore[arg-type]
        elif _is_testcase_class(stmt):
            for method in stmt.body:  # type: ignore[attr-defined]
                if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.name.startswith("test"):
                    _mark(method, stmt.name)  # type: ignore[attr-defined]
    return tree


#: the global a ``__main__`` block calls as it begins (:func:`_main_program`)
_BLOCK_MARK = "__nightly_block_started__"
#: CPU seconds of the waited-for children when the file's ``__main__`` block began (:func:`_ran_other_process`)
_BLOCK_CHILDREN_S: list[float] = []


def _block_started() -> None:
    """The file's ``__main__`` block began: what the processes the file ran before (at import: ``ctypes.util.
    find_library()`` runs ``ldconfig``) used is no sign that the block ran its test in another process."""
    if not _BLOCK_CHILDREN_S:
        _BLOCK_CHILDREN_S.append(_children_cpu_s())


def _children_cpu_s() -> float:
    """CPU seconds of the processes this one ran and waited for (:func:`_ran_other_process`)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _ran_other_process(children_s: float) -> bool:
    """Whether the test ran another process (it waited for one: CPU time past ``children_s``) or still runs
    one (Ray's, a ``Process`` it never joined): a file that runs its test there (itself under ``torchrun``,
    ``python -m pytest FILE``, ``mp.spawn(execute)``) ran no entry point here, yet may have run a test."""
    if _children_cpu_s() > children_s:
        return True
    try:
        return any(open(f"/proc/self/task/{task}/children").read().split() for task in os.listdir("/proc/self/task"))
    except OSError:  # not Linux, or a kernel without the list: what was waited for must do
        return False


def _exit_point(exc: BaseException, file: str) -> str:
    """Where the test file raised ``exc`` (its innermost line on the stack), as the reason says it:
    ``line 15 (`sys.exit(0)`)``; "" when none of the file's lines is on the stack."""
    tb, line = exc.__traceback__, 0
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == file:
            line = tb.tb_lineno
        tb = tb.tb_next
    return _line_said(file, line)


def _line_said(file: str, line: int) -> str:
    """``line 15 (`sys.exit(0)`)``: a line of the test file as a reason says it ("" for none)."""
    if not line:
        return ""
    try:
        with open(file, encoding="utf-8", errors="replace") as fh:
            text = fh.read().splitlines()[line - 1].strip()
    except (OSError, IndexError):
        return f"line {line}"
    return f"line {line} (`{text}`)" if text else f"line {line}"


def _frame_point(frame, file: str) -> str:
    """Where the test file is on this stack (its innermost line), as :func:`_exit_point` says it."""
    line = 0
    while frame is not None:
        if not line and os.path.abspath(frame.f_code.co_filename) == file:
            line = frame.f_lineno
        frame = frame.f_back
    return _line_said(file, line)


def _listed(entries: dict[str, int]) -> str:
    return ", ".join(f"{name} (line {line})" for name, line in entries.items())


def _named_in(blocks: list[ast.If], entries: dict[str, int]) -> dict[str, int]:
    """The test entry points the ``__main__`` block(s) name (called, or handed on: ``mp.spawn(execute)``),
    and the runners they call (``unittest.main()``, ``pytest.main()``, at the line of the call). A name only in
    the condition of an ``if``/``while`` (``if not test_gpus_available(): sys.exit(0)``) decides whether to run
    the test and is not one; a block that picks a variant (``if SMOKE: test_smoke() else: execute()``) names both."""
    named: dict[str, int] = {}

    def walk(node: ast.AST):  # in source order, without recursion (a file's expression may nest 1,500 deep)
        todo = [node]
        while todo:
            node = todo.pop()
            yield node
            children = [child for field, value in ast.iter_fields(node)
                        if not (field == "test" and isinstance(node, (ast.If, ast.While, ast.IfExp)))  # a condition
                        for child in (value if isinstance(value, list) else [value]) if isinstance(child, ast.AST)]
            todo.extend(reversed(children))

    for node in (n for b in blocks for n in walk(b)):
        if isinstance(node, ast.Name) and (f"{node.id}()" in entries or node.id in entries):
            key = f"{node.id}()" if f"{node.id}()" in entries else node.id
            named[key] = entries[key]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "main"
              and isinstance(node.func.value, ast.Name) and node.func.value.id in ("unittest", "pytest")):
            named.setdefault(f"{node.func.value.id}.main()", node.lineno)
    return named


#: what to do about a __main__ block that ended, or exited 0, before it ran the test it names
SKIP_ADVICE = ("a skip is not a pass, since a nightly that verified nothing is not green; let the test fail when what "
               "it needs is missing, or disable its registration")


class _MustRun:
    """The test entry points the file's program must run for its exit 0 to be a pass, and how the reason
    says where they should have run: set by :func:`_test_function` from the file's code before it runs
    (none set: the exit status and the file's runners judge alone, as for a script-style test)."""

    def __init__(self) -> None:
        self.entries: dict[str, int] = {}
        self.where = ""  # the file's program, as the reason says it
        self.advice = ""  # what to do about it
        self.block = 0  # the line of the __main__ block that names the entries (0: the file's module level runs them)
        self.coroutines: set[str] = set()  # the entries defined `async def`

    def verdict(self, file: str, ran: bool, exited_at: str = "") -> str:
        """Why the file ran no test ("" when one of the entry points it must run ran, or ``ran``: a runner ran a
        test, or the file ran another process, which may have); ``exited_at`` says where it exited 0, if it did.
        Another entry point that ran (a ``test_gpus_available()`` helper the block calls to decide to skip) is no
        test run."""
        if not self.entries or _ENTERED & self.entries.keys() or ran:
            return ""
        one = len(self.entries) == 1
        listed = _listed(self.entries) if one else f"any of {_listed(self.entries)}"
        if self.block:
            block = f"its `if __name__ == \"__main__\":` block (line {self.block})"
            what = (f"it exited 0 at {exited_at}, before {block} ran {listed}" if exited_at
                    else f"{block} calls {_listed(self.entries)}, yet ended without running {'it' if one else 'any'}")
        elif exited_at:
            what = f"it exited 0 at {exited_at}, before {listed} ran ({self.where})"
        else:
            what = f"{self.where}, and " + (f"{listed} never ran" if one else f"none of {_listed(self.entries)} ran")
        unawaited = "".join(f"; {name} is `async def`: calling it only makes a coroutine, run it with "
                            f"`asyncio.run({name})`" for name in self.entries if name in self.coroutines)
        return f"{file}: ran no test: {what}: {self.advice}{unawaited}"


def _run_as_main(path: str, code: types.CodeType) -> None:
    """Run the (rewritten) file as ``__main__``, as ``python3 FILE`` would (a spawned child re-runs
    the file itself as ``__mp_main__``, as it would under ``python3 FILE``)."""
    _run_module("__main__", code, path)


#: the file's own runs going on now, unittest runs and pytest runs alike: a run a test starts inside
#: one (to check that a runner reports a failure, in either framework) is that test's business
_FILE_RUNS = [0]


class NoTest(Exception):
    """The file ran no test: nothing to call, no test found, or every test skipped."""


class _UnittestRuns:
    """The file's unittest runs. Its program (``unittest.main()``) that ran nothing exits 0 on Python 3.11
    ("Ran 0 tests ... OK"): only a program the file runs as its test judges that, not one started inside
    ``execute()`` (there ``execute()`` is the test, and a sub-suite of optional checks may skip), nor a bare
    ``TextTestRunner`` (a helper's run beside the test). A failure is another matter: any run the file
    itself starts (its program, or a bare ``TextTestRunner().run(suite)`` whose result it never checks)
    that reports one fails the test, unless a later run of the file passed that same test (a rerun after a
    flaky failure; for the error of a ``setUpClass``/``setUpModule`` or its teardown, a later run in which that
    class's or module's tests ran and all passed). A known limit: a rerun and the next configuration of a loop
    look the same here, so a loop that runs the same suite per backend (``for backend in ["megatron",
    "fsdp"]: ... TextTestRunner().run(suite)``) whose megatron run failed and fsdp run passed the same test id
    is cleared as if it were a flaky rerun. A run started inside ``execute()``, or inside a test of another run (a test checking
    that a runner reports a failure), is that code's business."""

    def __init__(self) -> None:
        import unittest

        self.results: list = []
        self.runs: list = []  # the result of each run the file itself started (not inside another), as each ended
        self.started: list = []  # every result a test started on, wherever it ran
        self.file = ""  # the test file's absolute path, once known
        base = unittest.TestResult
        start, start_run, stop = base.startTest, base.startTestRun, base.stopTestRun
        success, subtest = base.addSuccess, base.addSubTest
        program = unittest.TestProgram.__init__
        runs, started = self.results, self.started
        deciding = [0]  # programs of the file running now

        def startTest(result, test) -> None:  # noqa: N802 (unittest's names)
            if not any(r is result for r in started):
                started.append(result)
            start(result, test)

        def startTestRun(result) -> None:  # noqa: N802
            # a run a test of the file's run starts, or execute() starts, is that test's business
            if not _FILE_RUNS[0] and not _inside_execute(sys._getframe(1), self.file):
                result.__dict__["_nightly_file_run"] = True
                _FILE_RUNS[0] += 1
            start_run(result)

        def stopTestRun(result) -> None:  # noqa: N802
            if deciding[0]:
                runs.append(result)
            if result.__dict__.pop("_nightly_file_run", False):
                _FILE_RUNS[0] -= 1
                self.runs.append(result)
            stop(result)

        def __init__(prog, *args, **kwargs) -> None:  # noqa: N807
            decides = not _inside_execute(sys._getframe(1), self.file)
            deciding[0] += decides
            try:
                program(prog, *args, **kwargs)
            finally:
                deciding[0] -= decides
                if getattr(prog, "result", None) is not None:
                    prog.result.__dict__["_nightly_program"] = True  # the reason names the program's way to drop it

        # a test with a skipped subTest is never addSuccess'ed; its passing subTests say it ran
        def addSuccess(result, test) -> None:  # noqa: N802
            _ran_part(result, test)
            success(result, test)

        def addSubTest(result, test, sub, err) -> None:  # noqa: N802
            _ran_part(result, test)
            subtest(result, test, sub, err)

        base.startTest, base.startTestRun, base.stopTestRun = startTest, startTestRun, stopTestRun  # type: ignore[method-assign]
        base.addSuccess, base.addSubTest = addSuccess, addSubTest  # type: ignore[method-assign]
        unittest.TestProgram.__init__ = __init__  # type: ignore[method-assign]

    def verdict(self) -> str:
        """Why the runs verified nothing ("" when they ran a test, or no unittest run ended): as for pytest,
        tests that were all skipped or expected failures checked nothing."""
        if not self.results:
            return ""
        ran = sum(r.testsRun for r in self.results)
        if ran == 0:
            return "ran no test: its unittest run found no test to run (\"Ran 0 tests\")"
        skipped, xfailed = (sum(len(_unverified(r)[i]) for r in self.results) for i in (0, 1))
        if skipped + xfailed < ran:
            return ""
        how = (f"skipped ({skipped}) or expected failures ({xfailed})" if skipped and xfailed else "skipped" if skipped
               else "expected failures (`@unittest.expectedFailure`; one that fails as expected verifies nothing)")
        return f"ran no test: all {ran} of its unittest tests were {how}"

    def verified(self) -> bool:
        """Whether any unittest run, wherever it ran, ran a test that was not skipped."""
        return any(r.testsRun > sum(map(len, _unverified(r))) for r in self.started)

    def failed(self) -> str:
        """What the file's runs reported failed, in the runner's own words ("" when nothing failed, or a later run
        passed each failed test): a file that drops its program's status (``unittest.main(exit=False)``, a caught
        ``SystemExit``) or never checks a runner's result exits 0 after it. The reason counts the last run that
        still holds a failure."""
        failing: dict[str, int] = {}  # a test that failed -> the run it last failed in
        for i, r in enumerate(self.runs):
            bad = {_test_id(t) for t, _ in [*r.failures, *r.errors]} | {_test_id(t) for t in r.unexpectedSuccesses}
            passed = set(r.__dict__.get("_nightly_ran", ())) - bad
            for test in passed:  # a rerun passed it
                failing.pop(test, None)
            for test in list(failing):  # a fixture's error ("setUpClass (__main__.TestServer)"): no test passes its id
                fixture = _FIXTURE_ERROR.fullmatch(test)
                scope = f"{fixture.group(1)}." if fixture else ""  # its class's (or module's) tests' ids start so
                if scope and any(t.startswith(scope) for t in passed) and not any(t.startswith(scope) for t in bad):
                    del failing[test]  # a rerun ran that class's (or module's) tests, and they passed
            failing.update(dict.fromkeys(bad, i))
        if not failing:
            return ""
        r = self.runs[max(failing.values())]
        counts = {"failures": len(r.failures), "errors": len(r.errors), "skipped": len(r.skipped),
                  "expected failures": len(r.expectedFailures), "unexpected successes": len(r.unexpectedSuccesses)}
        said = ", ".join(f"{name}={n}" for name, n in counts.items() if n)  # in unittest's order
        how = ("drops the program's status (`unittest.main(exit=False)`, a caught SystemExit)"
               if r.__dict__.get("_nightly_program") else
               "never checks the runner's result (`unittest.TextTestRunner().run(suite)` returns it: end with "
               "`sys.exit(not result.wasSuccessful())`)")
        return f"its unittest run reported FAILED ({said}), yet the file exited 0: it {how}; a failure the runner reported fails the test"


#: the id unittest gives the error of a class's or a module's fixture (``setUpClass (__main__.TestServer)``,
#: ``setUpModule (__main__)``): its class (or module), whose tests' ids start with it and a dot
_FIXTURE_ERROR = re.compile(r"(?:setUpClass|tearDownClass|setUpModule|tearDownModule) \((.+)\)")


def _inside_execute(frame, file: str) -> bool:
    """Whether the test file's ``execute()`` is on this stack."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "execute" and os.path.abspath(code.co_filename) == file:
            return True
        frame = frame.f_back
    return False


def _inside_test(frame, file: str, func: str) -> bool:
    """Whether the test itself runs on this stack: the file's ``execute()`` (or ``func``), a ``test*`` function
    or method of it. ``os._exit()`` there ends the test halfway, whatever the code."""
    while frame is not None:
        code = frame.f_code
        if (code.co_name in ("execute", func) or code.co_name.startswith("test")) and (
                os.path.abspath(code.co_filename) == file):
            return True
        frame = frame.f_back
    return False


class _PytestCount:
    """A pytest plugin (a plain object: pytest finds its hooks by name) that counts one run's tests: one
    whose call passed, or any phase of which failed, ran; the others were skipped or expected failures."""

    def __init__(self) -> None:
        self.collected = 0  # the tests the run selected to run
        self.ran: set[str] = set()
        self.skipped: set[str] = set()
        self.xfailed: set[str] = set()
        self.failed = 0  # failed calls, as pytest's summary counts them ("1 failed")
        self.errors = 0  # failed setups, teardowns and collections ("1 error")
        self.status: object = None  # what pytest.main() returned

    def pytest_collection_finish(self, session) -> None:
        self.collected += len(session.items)

    def pytest_collectreport(self, report) -> None:
        self.errors += bool(report.failed)

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            if report.when == "call":
                self.failed += 1
            else:
                self.errors += 1
        if report.failed or (report.passed and report.when == "call"):  # an XPASS ran its body too
            self.ran.add(report.nodeid)
        elif report.skipped:
            (self.xfailed if hasattr(report, "wasxfail") else self.skipped).add(report.nodeid)


class _PytestRuns:
    """The file's pytest runs (``pytest.main()`` in its ``__main__`` block): one whose tests were all
    skipped or expected failures exits 0 and verified nothing, and so does one that collected none when
    the file drops ``pytest.main()``'s status (no ``sys.exit(...)`` around it). pytest is the test's to
    import, from the test's environment: the wrapper never imports it (it may not be installed, and
    importing it would change what the test sees). An import hook waits for the test's own ``import
    pytest`` and wraps ``pytest.main`` so that it adds a :class:`_PytestCount`. As for unittest, a run
    started inside ``execute()`` does not decide: there ``execute()`` is the test."""

    def __init__(self) -> None:
        self.counts: list[_PytestCount] = []
        self.file = ""  # the test file's absolute path, once known
        sys.meta_path.insert(0, self)  # type: ignore[arg-type]

    def find_spec(self, name, path=None, target=None):
        """The spec the other finders give ``pytest``, with a loader that wraps its ``main`` once the module
        is loaded; None for every other module (the import system then asks the next finder)."""
        if name != "pytest":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None  # not installed here: the test's import fails as it would without the wrapper
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        load = loader.exec_module

        def exec_module(module) -> None:
            load(module)
            self._wrap(module)

        loader.exec_module = exec_module  # type: ignore[method-assign] (this spec's own loader)
        return spec

    def _wrap(self, pytest) -> None:
        real = getattr(pytest, "main", None)
        if not callable(real):
            return

        def main(args=None, plugins=None):
            if _FILE_RUNS[0] or _inside_execute(sys._getframe(1), self.file):
                return real(args, plugins)
            count = _PytestCount()
            self.counts.append(count)
            _FILE_RUNS[0] += 1
            try:
                count.status = real(args, [*(plugins or ()), count])
            finally:
                _FILE_RUNS[0] -= 1
            return count.status

        main.__doc__, main.__wrapped__ = real.__doc__, real  # type: ignore[attr-defined]
        pytest.main = main

    def ran(self) -> bool:
        """Whether one of the file's runs ran a test."""
        return any(c.ran for c in self.counts)

    def verdict(self) -> str:
        """Why the runs verified nothing ("" when one ran a test, or none ran)."""
        if not self.counts or any(c.ran for c in self.counts):
            return ""
        skipped = set().union(*(c.skipped for c in self.counts))
        xfailed = set().union(*(c.xfailed for c in self.counts)) - skipped
        if not skipped and not xfailed:  # pytest exits 5, but a file may drop that (no sys.exit(pytest.main()))
            collected = sum(c.collected for c in self.counts)
            if collected:
                return f"ran no test: its pytest run ran none of the {collected} test(s) it collected"
            return ("ran no test: its pytest run collected no test (pytest collects `test_*` functions and the "
                    "`test_*` methods of `Test*` classes without an __init__)")
        how = (f"skipped ({len(skipped)}) or xfailed ({len(xfailed)})" if skipped and xfailed
               else "skipped" if skipped else "xfailed (expected to fail)")
        return f"ran no test: all {len(skipped) + len(xfailed)} of its pytest tests were {how}"

    def failed(self) -> str:
        """What the file's last run reported failed, in pytest's words ("" when nothing failed): a file that
        calls ``pytest.main()`` without ``sys.exit(...)`` exits 0 after it. Only the last run that ran or
        failed a test judges: a file may run pytest again after a flaky failure and exit with that run's
        status (a rerun that selects no test clears nothing)."""
        c = ([c for c in self.counts if c.ran or c.failed or c.errors] or self.counts or [None])[-1]
        if c is None:
            return ""
        said = ", ".join([*([f"{c.failed} failed"] if c.failed else []),
                          *([f"{c.errors} error{'s' if c.errors > 1 else ''}"] if c.errors else [])])
        if not said:  # no test failed, yet pytest did not pass the run (an internal or usage error, an interrupt)
            if not _failed_status(c.status):
                return ""
            said = f"exit status {int(c.status)}{f' ({c.status.name})' if hasattr(c.status, 'name') else ''}"  # type: ignore[call-overload, attr-defined]
        return (f"its pytest run reported {said}, yet the file exited 0: it drops pytest.main()'s status "
                "(call it as `sys.exit(pytest.main([...]))`); a failure the runner reported fails the test")


def _failed_status(status: object) -> bool:
    """Whether ``pytest.main()`` returned a failure other than "no tests collected" (5, judged as running no test)."""
    try:
        return int(status) not in (0, 5)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return False


def _test_id(test) -> str:
    """The id of the test a result line is about: a subTest's is its test method's."""
    return getattr(test, "test_case", test).id()


def _ran_part(result, test) -> None:
    result.__dict__.setdefault("_nightly_ran", set()).add(_test_id(test))


def _unverified(result) -> tuple[set[str], set[str]]:
    """Tests of a run that verified nothing: (skipped, expected failures), each with no part (a subTest)
    that passed or failed. A method whose 3 configurations skip and 1 passes was not skipped; a test
    marked ``@unittest.expectedFailure`` that failed as expected checked nothing (pytest's xfail)."""
    ran = set(result.__dict__.get("_nightly_ran", ()))
    ran |= {_test_id(t) for t, _ in [*result.failures, *result.errors]}
    ran |= {_test_id(t) for t in result.unexpectedSuccesses}
    skipped = {_test_id(t) for t, _ in result.skipped} - ran
    return skipped, {_test_id(t) for t, _ in result.expectedFailures} - ran - skipped


def _quietly(write, *args, **kwargs) -> None:
    """Write to the test's output if it still can: a test may close its stdout and stderr (fd 1 and 2)
    and then fail; the wrapper must still record why (the result file), not die of the OSError."""
    try:
        write(*args, **kwargs)
    except (OSError, ValueError):
        pass


def _say(text: str) -> None:
    """A line for the test's log."""
    _quietly(print, f"# nightly wrapper: {text}", flush=True)


def _test_function(file: str, func_name: str, must_run: _MustRun):
    """What to call to run the test file, saying in the log which way it runs (see the module's docstring),
    and which of its test entry points its program must run (``must_run``, set before any of the file runs)."""
    with open(file, "rb") as fh:
        source = fh.read()
    try:
        tree = _mark_entries(ast.parse(source, filename=file))
    except RecursionError as exc:  # `python3 FILE` fails there too ("... during compilation")
        raise RecursionError(f"{file}: Python cannot compile it ({exc}): an expression nested too deep for its parser "
                             f"(a chain of about 3,000 `+`), the depth at which `python3 {file}` fails too; split the "
                             "expression (build a long constant in a loop, or read it from a file)") from None
    blocks = _main_blocks(tree)
    entries = _test_entries(tree)
    if func_name == "execute" and blocks:
        program, skipped = _main_program(tree)
        if all(_does_nothing(b) for b in blocks):
            # `python3 FILE` in CI may prepare; here nothing would run (unless the file's test runs at module level)
            what = (f"only calls prepare() ({skipped} call{'s' if skipped > 1 else ''}), which the nightly skips (the "
                    "night's assets built its inputs)") if skipped else "does nothing"
            where = f"its `if __name__ == \"__main__\":` block (line {blocks[0].lineno}) {what}"
            if not _runs_at_top_level(tree):
                raise NoTest(f"{file}: ran no test: {where}, so nothing would run; call the test in that block "
                             "(e.g. execute() after prepare())")
            # a module level that checks (assert, raise, exit 1) is the test; one that only sets up must run an entry
            must_run.entries, must_run.where = ({} if _checks_at_top_level(tree) else entries), where
            must_run.advice = ("module-level set-up (an assignment, a loop that builds a matrix) is no test; call the "
                               "test in that block (e.g. execute() after prepare())")
        elif named := _named_in(blocks, entries):  # it must run one: a block that exits 0 (or ends) first skipped the test
            must_run.entries, must_run.block, must_run.advice = named, blocks[0].lineno, SKIP_ADVICE
        must_run.coroutines = {f"{s.name}()" for s in tree.body if isinstance(s, ast.AsyncFunctionDef)}
        try:
            code = _compile(file, program)
        except RecursionError as exc:  # Python 3.12 converts a tree under a fixed C limit (about 1,500 levels)
            must_run.entries, must_run.block = {}, 0  # no marks in the file's own code: its exit alone judges
            _say(f"this Python ({sys.version.split()[0]}) cannot compile the nightly's rewritten copy of {file} ({exc}: "
                 f"an expression {_depth(program)} levels deep), though it compiles the file itself: running {file} "
                 f"unchanged as __main__, as `python3 {file}` does, its {skipped} prepare() call(s) included, judged "
                 "by its exit and its unittest/pytest runs (whether its __main__ block ran execute() is not checked); "
                 "split the expression to have prepare() skipped")
            code = _compile(file, source)
        else:
            _say(f"running {file} as __main__, as `python3 {file}` would, with the {skipped} prepare() call(s) of its "
                 "__main__ block skipped (the night's assets built its inputs)")
        return lambda: _run_as_main(file, code)
    if func_name == "execute" and not blocks:  # judged if the import ends (returns, or exits 0) with no execute() to call
        must_run.entries = {} if _checks_at_top_level(tree) else entries  # its module level's checks are its test
        must_run.where = "it has no function execute() and no `if __name__ == \"__main__\":` block"
        must_run.advice = (f"`python3 {file}` would run no test (test functions alone are never called; module-level "
                           "set-up is no test); the nightly calls execute(), or runs the __main__ block")
    try:
        code = _compile(file, tree)
    except RecursionError as exc:  # Python 3.12 (see above): a test entry point that ran cannot be seen
        _say(f"this Python ({sys.version.split()[0]}) cannot compile the nightly's rewritten copy of {file} ({exc}), "
             f"though it compiles the file itself: importing {file} unchanged; its test entry points cannot be seen "
             "to run, so only a call of its function or a module level that checks itself can pass it")
        code = _compile(file, source)
    module = _load_module(file, code)
    func = getattr(module, func_name, None)
    if callable(func):
        must_run.entries = {}  # calling it is the test
        _say(f"importing {file} (its __main__ block not run) and calling its {func_name}() (prepare() skipped: the "
             "night's assets built its inputs)")
        return func
    if func_name == "execute" and not blocks:
        if entries or _runs_at_top_level(tree):
            _say(f"{file} has no execute() and no __main__ block: its module-level code ran as it was imported (as "
                 f"under `python3 {file}`)" + (f"; it passes only if one of its test entry points ran: "
                                                     f"{', '.join(must_run.entries)}" if must_run.entries else ""))
            return lambda: None
        raise NoTest(f"{file}: has no function execute() and no `if __name__ == \"__main__\":` block, so "
                     f"`python3 {file}` would run no test (test functions alone are never called); the nightly "
                     "calls execute(), or runs the __main__ block")
    raise AttributeError(f"{file}: has no function {func_name}(); the nightly calls it to run the test")


def _write_result(path: str | None, result: dict) -> None:
    """Write the record atomically (tmp + rename), or in place where a rename cannot work.

    On Kubernetes the path is the container's termination-message file, ``/dev/termination-log``:
    a file the kubelet bind-mounts, so a rename onto it fails (and ``/dev`` may not be writable).
    It is written in place then, as is any target that is not a regular file, and kept under the
    4096 bytes the kubelet reads (a longer record would be cut into invalid JSON): the error text
    is shortened first.
    """
    if not path:
        return
    in_place = path == "/dev/termination-log" or (os.path.exists(path) and not os.path.isfile(path))
    if not in_place:
        tmp = f"{path}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(result, fh)
            os.replace(tmp, path)
            return
        except OSError:  # e.g. EBUSY: a bind-mounted file under another name
            try:
                os.unlink(tmp)
            except OSError:
                pass
    text, error = json.dumps(result), str(result.get("error") or "")
    while len(text.encode()) > 4096 and error:
        error = error[: len(error) // 2]
        text = json.dumps({**result, "error": error + " [cut]"})
    if len(text.encode()) > 4096:  # a huge path: keep what a pass is judged by
        text = json.dumps({k: result[k] for k in ("ok", "exit_code", "finished", "token") if k in result})
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _report_pipes(result: dict) -> None:
    """Report through Dagster Pipes when the launcher opened a Pipes session (Kubernetes). The test's
    result is already written: a report that fails (a bad or stale ``DAGSTER_PIPES_CONTEXT``, a message
    channel gone) is one line in the log and never changes the test's exit status."""
    if "DAGSTER_PIPES_CONTEXT" not in os.environ:
        return
    try:
        from dagster_pipes import open_dagster_pipes
    except ImportError:
        return
    try:
        with open_dagster_pipes() as pipes:
            pipes.report_custom_message(result)
    except Exception as exc:
        _quietly(print, f"# nightly wrapper: the Dagster Pipes report failed ({type(exc).__name__}: {str(exc)[:300]}); "
                 "the test's result stands (the launcher judges the pod, not this report)", file=sys.stderr, flush=True)


def _deadline(seconds: float) -> None:
    """Kill this process group after ``seconds`` (a backstop: the launcher kills it first)."""

    def fire() -> None:
        try:  # the night that read our output may be gone (a broken pipe must not stop the kill)
            print(f"# nightly wrapper: deadline of {seconds:g} s passed; killing the test's process group",
                  file=sys.stderr, flush=True)
        finally:
            os.killpg(os.getpgrp(), signal.SIGKILL)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def _fresh_signals() -> None:
    """Give the test the signals a shell would: nothing blocked, nothing ignored that stops it.

    Masks and ignored signals survive fork and exec, so a night started in the background
    (SIGINT ignored) or from a thread that blocks signals would hand them on, and the test would
    then ignore the SIGTERM the launcher sends at its timeout, losing its chance to clean up.
    """
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def exit_status(code: int) -> int:
    """The status the OS reports for ``sys.exit(code)`` under ``python3 FILE``: CPython exits with the
    code as a C ``long`` and the OS keeps its low 8 bits, so ``sys.exit(256)`` exits 0 (a pass in CI)
    and ``sys.exit(-1)`` 255; a code too large for a C ``long`` exits 255 (CPython's -1)."""
    limit = 2 ** (8 * struct.calcsize("l") - 1)
    return code & 0xFF if -limit <= code < limit else 255


def _shown(code: object) -> str:
    """``repr(code)``, or what it is when Python refuses to print it (an int of over 4300 digits)."""
    try:
        return repr(code)
    except ValueError:
        return f"<an int of {code.bit_length()} bits>" if isinstance(code, int) else type(code).__name__


def script_path(file: str, started_path: list[str]) -> list[str]:
    """``sys.path`` as ``python3 FILE`` would start with, from the one this interpreter started with.

    The interpreter put one entry first for the wrapper itself: its own folder
    (``python3 .../pipelines/launch/wrapper.py``, which holds a ``kubernetes`` package that would shadow
    the real client) or the working directory (``python3 -m pipelines.launch.wrapper``). ``python3 FILE``
    puts the folder of the file there instead, symlinks resolved, and nothing else: not the checkout,
    whose modules a test then imports only through ``PYTHONPATH``, as in CI. Every other entry
    (``PYTHONPATH``'s, the standard library, site-packages) is the environment's and stays. With
    ``PYTHONSAFEPATH`` (``-P``) neither adds an entry."""
    if getattr(sys.flags, "safe_path", False):
        return list(started_path)
    return [os.path.dirname(os.path.realpath(file)), *started_path[1:]]


def main(argv: list[str] | None = None) -> int:
    """The wrapper's program: run the test file in this process (it makes ``sys.path`` the test's)."""
    parser = argparse.ArgumentParser(prog="python -m pipelines.launch.wrapper")
    parser.add_argument("--file", required=True, help="test file, relative to the working directory")
    parser.add_argument("--func", default="execute", help="function to call (default: execute)")
    parser.add_argument("--result", help="write a JSON result here")
    parser.add_argument("--deadline-s", type=float, default=0,
                        help="kill the own process group after this many seconds (0: never)")
    parser.add_argument("args", nargs="*", help="arguments the test sees in sys.argv[1:]")
    ns = parser.parse_args(argv)
    wrapper_pid = os.getpid()  # a child the test forks runs this code too, from where the test forked

    _fresh_signals()
    unittest_runs = _UnittestRuns()  # the standard library's unittest, before the test's folders are on the path
    pytest_runs = _PytestRuns()  # waits for the test's own `import pytest`
    if ns.deadline_s > 0 and os.getpgrp() == os.getpid():  # only when it leads its own group
        _deadline(ns.deadline_s)
    unittest_runs.file = pytest_runs.file = os.path.abspath(ns.file)
    must_run, children_s, exited_at = _MustRun(), _children_cpu_s(), ""
    sys.path[:] = script_path(ns.file, sys.path)  # still the path the interpreter started the wrapper with
    sys.argv = [ns.file, *ns.args]
    result: dict = {"file": ns.file, "func": ns.func, "ok": False, "exit_code": 1}
    started = time.monotonic()
    wrapper_main = sys.modules.get("__main__")

    def finish(exited_at: str) -> int:
        """Judge the run (the result so far: how the file exited) and write the result; the exit status."""
        nonlocal children_s
        if wrapper_main is not None:  # an imported test file was __main__ while it ran
            sys.modules["__main__"] = wrapper_main
        # a failure the file's runner reported, whose status the file dropped, is never a pass
        failed = (unittest_runs.failed() or pytest_runs.failed()) if result["ok"] else ""
        if failed:
            result.update(ok=False, exit_code=1, error=f"{ns.file}: {failed}")
            _quietly(print, f"# nightly wrapper: {ns.file}: {failed}", file=sys.stderr)
        # a run that ran nothing passes (unittest on 3.11, pytest's skipped or xfailed run, any run whose status the
        # file drops) or exits 5 (unittest on 3.12+, pytest when it collected nothing): either way no test ran
        nothing = (unittest_runs.verdict() or pytest_runs.verdict()) if result["ok"] or result["exit_code"] == 5 else ""
        if nothing:
            result.update(ok=False, exit_code=1, error=f"{ns.file}: {nothing}")
            _quietly(print, f"# nightly wrapper: {ns.file}: {nothing}", file=sys.stderr)
        # a file whose test entry points (execute(), test_* functions, TestCase classes) none ran, set-up aside, ran no test;
        # for a __main__ block that names them, only the processes it ran itself may have run the test (not those of the
        # import; a block that never began waited for none)
        if must_run.block:
            children_s = _BLOCK_CHILDREN_S[0] if _BLOCK_CHILDREN_S else float("inf")
        ran = unittest_runs.verified() or pytest_runs.ran() or _ran_other_process(children_s)
        nothing = must_run.verdict(ns.file, ran, exited_at) if result["ok"] else ""
        if nothing:
            result.update(ok=False, exit_code=1, error=nothing)
            _quietly(print, f"# nightly wrapper: {nothing}", file=sys.stderr)
        result["elapsed_s"] = round(time.monotonic() - started, 3)
        result["finished"] = True
        result["token"] = os.environ.get("NIGHTLY_ATTEMPT_TOKEN", "")
        result["pid"] = wrapper_pid  # the local launcher checks it is the process it started
        _quietly(sys.stdout.flush)
        _quietly(sys.stderr.flush)
        try:
            _write_result(ns.result, result)
        except OSError as exc:  # e.g. the logs folder went away: say so, and never as the test's own failure
            _quietly(print, f"{RESULT_NOT_WRITTEN_LINE}{ns.result} "
                     f"({exc.strerror or exc}); exiting {RESULT_NOT_WRITTEN}: the test's outcome is unknown "
                     f"(it {'passed' if result['ok'] else 'failed'} here)", file=sys.stderr, flush=True)
            _report_pipes(result)
            return RESULT_NOT_WRITTEN
        _report_pipes(result)
        return int(result["exit_code"])

    real_exit = os._exit

    def exit_now(code: int) -> None:
        """``os._exit(code)`` from the test's program after its test returned (``execute(); os._exit(0)`` in the
        ``__main__`` block: a common way past a hanging NCCL or Ray teardown): the wrapper's own process first writes
        the result as a normal end with that status would (code 0 passes only if the test ran). One inside the test
        itself (``execute()``, a ``test*`` function or method on the stack) exits halfway, with no result, as before;
        so does a child the test forked (multiprocessing's workers end so), as it would without the wrapper."""
        if (os.getpid() != wrapper_pid or not isinstance(code, int) or finishing
                or _inside_test(sys._getframe(1), os.path.abspath(ns.file), ns.func)):
            real_exit(code)
        finishing.append(code)
        status = exit_status(code)
        try:
            result.update(ok=status == 0, exit_code=status, error="" if status == 0 else f"os._exit({code})")
            _say(f"the test called os._exit({code}): writing its result before the process ends")
            at = _frame_point(sys._getframe(1), os.path.abspath(ns.file)) if status == 0 else ""
            status = finish(at)
        finally:
            real_exit(status)

    finishing: list[int] = []
    os._exit = exit_now  # type: ignore[assignment]
    try:
        func = _test_function(ns.file, ns.func, must_run)
        call_started = time.monotonic()
        returned = func()
        if isinstance(returned, types.CoroutineType):  # `async def execute()`: calling it only made the coroutine
            _say(f"{ns.func}() is a coroutine function (async def): running it to its end with asyncio.run()")
            import asyncio

            asyncio.run(returned)
        result.update(ok=True, exit_code=0, execute_s=round(time.monotonic() - call_started, 3))
    except SystemExit as exc:
        code = exit_status(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        exited_at = _exit_point(exc, os.path.abspath(ns.file)) if code == 0 else ""
        result.update(ok=code == 0, exit_code=code, error="" if code == 0 else f"SystemExit({_shown(exc.code)})")
        if exc.code not in (None, 0) and not isinstance(exc.code, int):
            _quietly(print, exc.code, file=sys.stderr)
        elif isinstance(exc.code, int) and code != exc.code:
            _say(f"SystemExit({_shown(exc.code)}) is exit status {code}, as under `python3 {ns.file}`")
    except NoTest as exc:
        result.update(error=str(exc))
        _quietly(print, f"# nightly wrapper: {exc}", file=sys.stderr)
    except BaseException as exc:  # the test's own failure: report it, never hide it
        result.update(error=f"{type(exc).__name__}: {exc}")
        _quietly(traceback.print_exc)  # the error is in the result even when the test closed its stderr
    os._exit = real_exit
    if os.getpid() != wrapper_pid:
        # a child the test forked ended (sys.exit, return, an exception) and unwound into this code: it
        # never writes the attempt's result (it would pass a test whose own process may still fail or
        # os._exit halfway); it exits as that child would under `python3 FILE`
        return int(result["exit_code"])
    return finish(exited_at)


if __name__ == "__main__":
    sys.exit(main())
