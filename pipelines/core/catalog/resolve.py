"""Static values of expressions in a test file: literals, module constants and simple f-strings.

Tests build their download and conversion arguments from ``MODEL_NAME = "..."`` constants and
f-strings. We evaluate exactly that much without importing the file; anything else (attribute
access, calls, arithmetic on unknowns) stays visible as its source text in braces, so a report
can say ``unresolved: {args.model_org}/GLM-5`` instead of guessing.
"""

from __future__ import annotations

import ast
import functools
from typing import NamedTuple

from pipelines.core.pyparse import unparsed

Scalar = str | int | float | bool | None


class Value(NamedTuple):
    """A resolved value, or (``ok=False``) a readable rendering with the unknown parts in braces.

    A named tuple, not a frozen dataclass: a few are built per expression of every test file.
    """

    value: Scalar
    text: str
    ok: bool = True


def module_constants(tree: ast.Module) -> dict[str, Scalar]:
    """Module-level ``NAME = <literal or resolvable f-string>`` assignments, in file order.

    A name assigned twice keeps its last resolvable value, like the module would at import.
    """
    env: dict[str, Scalar] = {}
    for stmt in tree.body:
        if stmt.__class__ in _ASSIGNS:
            collect_assignment(stmt, env)
    return env


_ASSIGNS = frozenset({ast.Assign, ast.AnnAssign})


def collect_assignment(stmt: ast.stmt, env: dict[str, Scalar]) -> None:
    """Add ``stmt`` to ``env`` when it assigns a resolvable scalar to a plain name."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target, value = stmt.targets[0], stmt.value
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        target, value = stmt.target, stmt.value
    else:
        return
    if not isinstance(target, ast.Name):
        return
    v = resolve(value, env)
    if v.ok:
        env[target.id] = v.value
    else:
        env.pop(target.id, None)


def _unknown(node: ast.AST) -> Value:
    return Value(None, "{" + unparsed(node) + "}", ok=False)


#: ``Value(value, text)`` without the named tuple's Python-level ``__new__`` (several per test file)
_known = functools.partial(tuple.__new__, Value)
#: the classes a parsed constant of each scalar type has (the parser makes no subclasses)
SCALAR_CLASSES = frozenset({str, int, float, bool, type(None)})


def resolve(node: ast.AST, env: dict[str, Scalar]) -> Value:
    """Evaluate ``node`` statically with ``env`` as the only known names."""
    cls = node.__class__
    if cls is ast.Constant and node.value.__class__ in SCALAR_CLASSES:  # fast paths of the usual shapes
        return _known((node.value, str(node.value), True))
    if cls is ast.Name and node.id in env:
        v = env[node.id]
        return _known((v, str(v), True))
    if cls is ast.JoinedStr:
        return _joined(node, env)
    return _resolve(node, env)


def _joined(node: ast.JoinedStr, env: dict[str, Scalar]) -> Value:
    parts: list[str] = []
    ok = True
    for piece in node.values:
        cls = piece.__class__
        if cls is ast.Constant:
            parts.append(str(piece.value))
            continue
        if cls is not ast.FormattedValue or piece.format_spec is not None or piece.conversion != -1:
            parts.append(_unknown(piece.value if cls is ast.FormattedValue else piece).text)
            ok = False
            continue
        inner = piece.value
        if inner.__class__ is ast.Name and inner.id in env:
            parts.append(str(env[inner.id]))
            continue
        value = resolve(inner, env)
        ok = ok and value.ok
        parts.append(value.text)
    text = "".join(parts)
    return _known((text if ok else None, text, ok))


def _resolve(node: ast.AST, env: dict[str, Scalar]) -> Value:
    """The shapes :func:`resolve` has no fast path for (scalar constants, known names and f-strings
    never reach here). Chains of ``-`` and ``+`` are walked in a loop, not by recursion: a prompt pasted
    as thousands of joined strings is a file Python runs, so it must not end the catalog."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        chain = [node]
        while isinstance(chain[-1].operand, ast.UnaryOp) and isinstance(chain[-1].operand.op, ast.USub):
            chain.append(chain[-1].operand)
        inner = resolve(chain[-1].operand, env)
        for _ in chain:
            if not (inner.ok and isinstance(inner.value, int | float) and not isinstance(inner.value, bool)):
                return _unknown(node)
            inner = Value(-inner.value, str(-inner.value))
        return inner
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        spine = [node]  # ``a + b + c`` is ``(a + b) + c``: the left operands nest
        while isinstance(spine[-1].left, ast.BinOp) and isinstance(spine[-1].left.op, ast.Add):
            spine.append(spine[-1].left)
        left = resolve(spine[-1].left, env)
        for link in reversed(spine):
            left = _added(link, left, resolve(link.right, env))
        return left
    return _unknown(node)


def _added(node: ast.BinOp, left: Value, right: Value) -> Value:
    """``left + right`` of the ``+`` node ``node``: joined strings, or their text with the unknowns in braces."""
    if left.ok and right.ok and isinstance(left.value, str) and isinstance(right.value, str):
        return Value(left.value + right.value, left.value + right.value)
    if isinstance(left.value, str | None) and isinstance(right.value, str | None):
        return Value(None, left.text + right.text, ok=False)
    return _unknown(node)


def literal(node: ast.AST) -> tuple[bool, object]:
    """(True, value) when ``node`` is a plain literal a registration may use; else (False, None).

    Allowed: numbers, strings, booleans, None, and lists of strings (no names, no f-strings,
    no arithmetic): the frameworks' runners accept nothing else.
    """
    if node.__class__ is ast.Constant and node.value.__class__ in SCALAR_CLASSES:
        return True, node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
            and isinstance(node.operand.value, int | float) and not isinstance(node.operand.value, bool)):
        return True, -node.operand.value
    if isinstance(node, ast.List):
        items = []
        for elt in node.elts:
            if not (isinstance(elt, ast.Constant) and isinstance(elt.value, str)):
                return False, None
            items.append(elt.value)
        return True, items
    return False, None
