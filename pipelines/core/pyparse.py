"""Parsing a Python file without running it, the one way every reader of test and converter files does.

``ast.parse`` raises more than SyntaxError: an expression nested too deeply for its parser
(thousands of strings joined by ``+``) ends in RecursionError, a long chain of unary operators in
MemoryError. That is the file's syntax problem for the catalog, never a crash that loses the catalog of
every other test. Where the parser gives up depends on the Python version (3.11 stops near 3,000 joined
strings, 3.13 reads 5,000) and on how deep the call stack already is, so a failed parse is retried from a
fresh thread's empty stack: one answer for a file, whoever reads it from how deep.
"""

from __future__ import annotations

import ast
import platform
import threading


def parse_python(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source)`` as from a shallow stack; a file too deeply nested for the parser raises SyntaxError
    (on line 1: the parser does not say where), so each caller's ``except SyntaxError`` locates it as it does a typo."""
    try:
        return ast.parse(source, filename=filename)
    except (RecursionError, MemoryError):
        pass  # perhaps only because the caller is deep: what parses there parses from an empty stack too
    try:
        return _from_empty_stack(source, filename)
    except (RecursionError, MemoryError) as exc:
        raise SyntaxError(
            f"an expression is nested too deeply for the parser of this Python ({platform.python_version()}: "
            f"{type(exc).__name__}); split it (e.g. a long `+` chain of strings into one triple-quoted string or "
            "a ''.join([...]) list)", (filename, 1, 0, None)) from None


def _from_empty_stack(source: str | bytes, filename: str) -> ast.Module:
    """``ast.parse`` in a new thread, whose Python stack starts empty whatever the caller's depth."""
    result: list[ast.Module] = []
    error: list[BaseException] = []

    def parse() -> None:
        try:
            result.append(ast.parse(source, filename=filename))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            error.append(exc)

    thread = threading.Thread(target=parse, name="parse_python", daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0].with_traceback(None)
    return result[0]


def unparsed(node: ast.AST) -> str:
    """``ast.unparse(node)`` for a message; a chain of thousands of operators (which Python runs, and
    ``unparse`` recurses over) is shown as a placeholder instead of ending the catalog in RecursionError."""
    try:
        return ast.unparse(node)
    except RecursionError:
        return f"<an expression of line {getattr(node, 'lineno', '?')} too long to show>"
