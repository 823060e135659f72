"""Parsing a Python file without running it, the one way every reader of test and converter files does.

``ast.parse`` raises more than SyntaxError: an expression nested too deeply for its parser
(thousands of strings joined by ``+``) ends in RecursionError, a long chain of unary operators in
MemoryError. Python cannot compile such a file either, so it is that file's syntax problem, never a
crash that loses the catalog of every other test.
"""

from __future__ import annotations

import ast


def parse_python(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source)``; a file too deeply nested for the parser raises SyntaxError (on line 1: the
    parser does not say where), so each caller's ``except SyntaxError`` locates it as it does a typo."""
    try:
        return ast.parse(source, filename=filename)
    except (RecursionError, MemoryError) as exc:
        raise SyntaxError(
            f"an expression is nested too deeply for Python's parser ({type(exc).__name__}), so Python cannot "
            "run the file either; split it (e.g. a long `+` chain of strings into one triple-quoted string or "
            "a ''.join([...]) list)", (filename, 1, 0, None)) from None


def unparsed(node: ast.AST) -> str:
    """``ast.unparse(node)`` for a message; a chain of thousands of operators (which Python runs, and
    ``unparse`` recurses over) is shown as a placeholder instead of ending the catalog in RecursionError."""
    try:
        return ast.unparse(node)
    except RecursionError:
        return f"<an expression of line {getattr(node, 'lineno', '?')} too long to show>"
