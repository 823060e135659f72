"""Reading a test's configuration matrix from source, never importing it.

Python: a module-level ``_CONFIGS = [...]`` (or the group's ``matrix:`` name) of tuples or dicts,
every value a literal, with the literal ``+=``, ``.append(...)`` and ``.extend(...)`` that follow it
at module level (``sort()``/``reverse()`` change nothing); an addition it cannot read is a located
note, any other change of it a located problem. Tuple positions are named by the group's ``fields:`` or, by convention, by
a comment directly above the matrix: ``# (name, backend, use_lora, grad_accum_2)``. A field called
``name`` names the configuration. A file joins a group by itself with ``# coverage-group: NAME``.

Template (framework S): a test's entries in the workflow template are its configurations; their
fields are ``job``, ``num_gpus``, ``test_args`` and the env keys (with the template's defaults).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from pipelines.core.catalog.assemble import entry_gpus, entry_ids, entry_key, env_lines, template_path
from pipelines.core.catalog.scan import FileScan
from pipelines.core.catalog.template import job_value, parse_template
from pipelines.core.coverage.model import Configuration, Note, norm
from pipelines.core.model import Problem
from pipelines.core.pyparse import parse_python, unparsed

GROUP_MARKER = "coverage-group:"
_GROUP_COMMENT = re.compile(r"^#\s*coverage-group:\s*(\S+)\s*$", re.MULTILINE)
_ANY_GROUP_COMMENT = re.compile(r"^#\s*coverage-group:.*$", re.MULTILINE)
_FIELDS_COMMENT = re.compile(r"^\s*#\s*\(\s*([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)\s*,?\s*\)")


def declared_groups(source: str) -> list[tuple[str, int]]:
    """(group name, line) of each ``# coverage-group: NAME`` comment at the start of a line."""
    return [(m.group(1), source.count("\n", 0, m.start()) + 1) for m in _GROUP_COMMENT.finditer(source)]


def unreadable_group_comments(source: str, path: str) -> list[Problem]:
    """Each ``# coverage-group:`` comment at the start of a line that is not the name alone: read as
    nothing, it would silently drop the file from its group (``# coverage-group: diag  (pairs with a)``)."""
    return [Problem(path, source.count("\n", 0, m.start()) + 1, "coverage-group",
                    f"cannot read {m.group(0).strip()!r}; write '# coverage-group: NAME' alone on the line "
                    "(a note goes on a line of its own)")
            for m in _ANY_GROUP_COMMENT.finditer(source) if not _GROUP_COMMENT.fullmatch(m.group(0))]


def python_matrix(source: str, path: str, var: str, fields: tuple[str, ...] | None = None,
                  test: str | None = None, groups_file: str = "assets/coverage.yaml"
                  ) -> tuple[list[Configuration], list[Problem]]:
    """The configurations of ``var`` in one Python file, and what is wrong with them (never raises).
    ``groups_file``: where the fix names the group's ``fields:`` (the file its groups came from)."""
    test = test or path
    try:
        tree = parse_python(source, path)
    except SyntaxError as exc:
        return [], [Problem(path, exc.lineno or 1, "syntax", f"{exc.msg}; fix the file's syntax (the matrix is read without running it)")]
    rows, line, problems = _rows(tree, var, path)
    if line is None:
        return [], [Problem(path, 1, var, f"no module-level `{var} = [...]`; add the matrix or fix the group's `matrix:`")]
    if fields is None:
        fields = _comment_fields(source, line)
    configs: list[Configuration] = []
    for i, item in enumerate(rows):
        where = f"{var}[{i}]"
        try:
            value = ast.literal_eval(item)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            problems.append(Problem(path, item.lineno, where, "is not a literal; write the values out (strings, numbers, booleans)"))
            continue
        pairs = _pairs(value, fields, path, item.lineno, where, var, problems, groups_file)
        if pairs is None:
            continue
        named = dict(pairs)
        configs.append(Configuration(test, named.get("name", where), path, item.lineno, pairs))
    return configs, problems + _named_twice(configs)


def _named_twice(configs: list[Configuration]) -> list[Problem]:
    """A name two rows share: a log's ``config NAME: failed`` could not say which of them failed."""
    first: dict[str, int] = {}
    problems = []
    for c in configs:
        if c.name in first:
            problems.append(Problem(c.path, c.line, c.name, f"another configuration of this test is named {c.name!r} "
                                                            f"(line {first[c.name]}); give each a name of its own"))
        first.setdefault(c.name, c.line)
    return problems


#: the compound statements a module-level change may hide in, as the reader writes them
_BLOCKS = {ast.If: "if", ast.For: "for", ast.AsyncFor: "async for", ast.While: "while", ast.With: "with",
           ast.AsyncWith: "async with", ast.Try: "try", ast.Match: "match"}


def _rows(tree: ast.Module, var: str, path: str) -> tuple[list[ast.expr], int | None, list[Problem]]:
    """The matrix's row expressions as the module builds them, in order; the line of its first
    assignment (None: never assigned); and each change of it the checker cannot read.

    Read: ``var = [...]`` (also annotated), ``var += [...]``, ``var.append(row)`` and
    ``var.extend([...])`` at module level; ``sort()`` and ``reverse()`` only reorder, so change nothing.
    An addition it cannot read (a computed list, an addition inside an ``if`` or a loop) adds rows
    that are not counted: a located ``Note``, never a failure, since those rows could only add
    coverage. Any other change (``del``, an item or slice assignment, ``insert``, ...) may drop or
    move rows, and a write into a row (``_CONFIGS[0]["backend"] = ...``, ``.update()`` of a row, through
    a name or loop variable bound to a row) makes the test run another configuration than the literal
    says, so the rows before it are not counted either: a located problem. The checker never runs test code."""
    rows: list[ast.expr] = []
    line: int | None = None
    problems: list[Problem] = []
    reads = (f"the checker reads only literal `{var} = [...]`, `{var} += [...]`, `{var}.append(...)` and "
             f"`{var}.extend([...])` at module level")

    def unread(stmt: ast.stmt, what: str, drops: bool) -> None:
        nonlocal rows
        if drops:
            rows = []
            problems.append(Problem(path, stmt.lineno, var, f"{what}; {reads}, so rows before this line are not "
                                                            "counted; write the rows out as one of those"))
        else:
            problems.append(Note(path, stmt.lineno, var, f"{what}; {reads}, so its rows are not counted (they could "
                                                         "only add coverage: not a failure); write them out as one "
                                                         "of those to count them"))

    items: set[str] = set()  # module-level names bound to one of its rows (`row = _CONFIGS[0]`, a loop's variable)
    for stmt in tree.body:
        kind, value = _change(stmt, var, frozenset(items))
        _bind(stmt, var, items)
        if kind == "assign":
            line = stmt.lineno if line is None else line
            if isinstance(value, ast.List | ast.Tuple):
                rows, line = list(value.elts), stmt.lineno
            else:
                rows = []
                problems.append(Problem(path, stmt.lineno, var, "must be a literal list of tuples or dicts; the checker "
                                                                 "never runs test code"))
            continue
        if line is None:  # not the module's matrix yet (an import of the name, say)
            continue
        if kind in ("+=", "extend"):
            if isinstance(value, ast.List | ast.Tuple):
                rows += value.elts
            else:
                unread(stmt, f"`{'+=' if kind == '+=' else '.extend()'}` of a value that is not a literal list", False)
        elif kind == "append":
            rows.append(value)  # type: ignore[arg-type]  # a row that is not a literal is reported as such
        elif kind == "order":
            continue
        elif kind is not None:
            unread(stmt, str(value), True)
        elif type(stmt) in _BLOCKS:
            for inner, scope in _nested(stmt, var, frozenset(items)):
                inner_kind, what = _change(inner, var, scope)
                if inner_kind not in (None, "order"):
                    adds = inner_kind in ("+=", "extend", "append")
                    block = f"{'an' if _BLOCKS[type(stmt)][0] in 'aio' else 'a'} `{_BLOCKS[type(stmt)]}` block"
                    said = what if inner_kind == "row" else "an addition" if adds else "a change"
                    unread(inner, f"{said} inside {block}", not adds)
    return rows, line, problems


def _nested(stmt: ast.stmt, var: str, items: frozenset[str]):
    """Every statement inside a compound statement, functions and classes left out (they run later,
    if ever), each with the names bound to rows of ``var`` there (``for row in _CONFIGS:`` binds ``row``)."""
    scope = set(items)
    if isinstance(stmt, ast.For | ast.AsyncFor) and _mentions(stmt.iter, var, items):
        scope |= _targets(stmt.target)
    for child in ast.iter_child_nodes(stmt):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(child, ast.stmt):
            yield child, frozenset(scope)
        if isinstance(child, ast.stmt | ast.excepthandler | ast.match_case):
            yield from _nested(child, var, frozenset(scope))
        if isinstance(child, ast.stmt):
            _bind(child, var, scope)  # `row = dict(row)` in the loop: a copy, no longer a row


def _targets(target: ast.expr) -> frozenset[str]:
    return frozenset(n.id for n in ast.walk(target) if isinstance(n, ast.Name))


def _mentions(node: ast.expr, var: str, items: frozenset[str]) -> bool:
    return any(isinstance(n, ast.Name) and (n.id == var or n.id in items) for n in ast.walk(node))


def _bind(stmt: ast.stmt, var: str, items: set[str]) -> None:
    """Keep ``items`` (the module-level names bound to a row of ``var``) up to date after ``stmt``: a
    loop over the matrix leaves its variable on the last row; ``row = _CONFIGS[0]`` binds one."""
    if isinstance(stmt, ast.For | ast.AsyncFor):
        if _mentions(stmt.iter, var, frozenset(items)):
            items |= _targets(stmt.target)
        else:
            items -= _targets(stmt.target)
    elif isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
        row = isinstance(stmt.value, ast.Subscript) and _names(stmt.value.value, var) \
            and not isinstance(stmt.value.slice, ast.Slice)
        for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
            if isinstance(target, ast.Name):
                (items.add if row else items.discard)(target.id)


#: list methods that leave the same rows in the matrix (reorder it, or only read it)
_SAME_ROWS = ("sort", "reverse", "copy", "count", "index")


#: methods that change a dict, list or set in place: called on a row or on a field of one, they change
#: the configuration it holds (any other method, such as a string field's ``.replace()``, only reads it)
_WRITES_ROW = frozenset(("update", "setdefault", "pop", "popitem", "clear", "append", "extend", "insert", "remove",
                         "add", "discard", "sort", "reverse", "difference_update", "intersection_update",
                         "symmetric_difference_update", "__setitem__", "__delitem__", "__iadd__", "__ior__"))


def _names(node: ast.expr, var: str) -> bool:
    return isinstance(node, ast.Name) and node.id == var


def _in_row(node: ast.expr, var: str, items: frozenset[str]) -> bool:
    """Whether ``node`` is a row of ``var`` or inside one: ``_CONFIGS[0]``, ``_CONFIGS[0]["backend"]``, or
    ``row``/``row["backend"]`` for a name in ``items`` (bound to a row)."""
    depth = 0
    while isinstance(node, ast.Subscript | ast.Attribute):
        node, depth = node.value, depth + isinstance(node, ast.Subscript)
    return isinstance(node, ast.Name) and ((node.id == var and depth >= 1) or node.id in items)


def _row_change(stmt: ast.stmt, var: str, items: frozenset[str]) -> bool:
    """Whether ``stmt`` writes into a row of ``var``: an item assigned or deleted in it, or a method
    that changes it (``update``, ``setdefault``, ``pop``, ...), also in a comprehension over the rows."""
    targets = (stmt.targets if isinstance(stmt, ast.Assign | ast.Delete) else [stmt.target]
               if isinstance(stmt, ast.AnnAssign | ast.AugAssign) else [])
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Subscript | ast.Attribute) and _in_row(node.value, var, items) \
                    and not (isinstance(node, ast.Subscript) and _names(node.value, var)):
                return True
        if isinstance(stmt, ast.AugAssign) and isinstance(target, ast.Name) and target.id in items:
            return True  # `row |= {...}` updates the row in place
    if type(stmt) in _BLOCKS or isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return False  # its statements are read one by one
    scope = items | {n.id for c in ast.walk(stmt) if isinstance(c, ast.comprehension) and _mentions(c.iter, var, items)
                     for n in ast.walk(c.target) if isinstance(n, ast.Name)}
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _WRITES_ROW
               and _in_row(n.func.value, var, scope) for n in ast.walk(stmt))


def _change(stmt: ast.stmt, var: str, items: frozenset[str] = frozenset()) -> tuple[str | None, object]:
    """How one statement changes ``var``: ("assign", value), ("+=", value), ("append", row),
    ("extend", value), ("order", None) for a call that only reorders or reads it (the rows are the
    same), ("row", what) for a write into one of its rows (``items``: the names bound to its rows),
    ("other", what it is), or (None, None) when it does not."""
    targets = (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
               if isinstance(stmt, ast.AnnAssign | ast.AugAssign) else stmt.targets if isinstance(stmt, ast.Delete) else [])
    if isinstance(stmt, ast.Delete) and any(_names(t, var) or (isinstance(t, ast.Subscript) and _names(t.value, var))
                                            for t in targets):
        return "other", "`del`"
    if any(isinstance(t, ast.Subscript) and _names(t.value, var) for t in targets):
        return "other", "an item or slice assignment"
    if any(isinstance(t, ast.Tuple | ast.List | ast.Starred) and any(_names(n, var) for n in ast.walk(t)) for t in targets):
        return "other", "an unpacking assignment"
    if any(_names(t, var) for t in targets):
        if isinstance(stmt, ast.AugAssign):
            return ("+=", stmt.value) if isinstance(stmt.op, ast.Add) else ("other", f"`{unparsed(stmt)}`")
        if stmt.value is not None:  # type: ignore[union-attr]  # a bare annotation assigns nothing
            return "assign", stmt.value  # type: ignore[union-attr]
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        if isinstance(call.func, ast.Attribute) and _names(call.func.value, var):
            plain = len(call.args) == 1 and not call.keywords and not isinstance(call.args[0], ast.Starred)
            if call.func.attr in ("append", "extend") and plain:
                return call.func.attr, call.args[0]
            if call.func.attr in _SAME_ROWS:
                return "order", None
            return "other", f"`.{call.func.attr}()`"
    if _row_change(stmt, var, items):
        text = unparsed(stmt)
        return "row", f"a change of one of its rows (`{text if len(text) <= 80 else text[:77] + '...'}`)"
    if type(stmt) not in _BLOCKS and not isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        # `last = _CONFIGS.pop()`: a call inside an expression changes it as well
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _names(node.func.value, var) \
                    and node.func.attr not in _SAME_ROWS:
                return "other", f"`.{node.func.attr}()`"
    return None, None


def _comment_fields(source: str, line: int) -> tuple[str, ...] | None:
    """The ``# (a, b, c)`` comment among the comment lines right above ``line``, if any."""
    lines = source.splitlines()
    i = line - 2
    while i >= 0 and lines[i].lstrip().startswith("#"):
        m = _FIELDS_COMMENT.match(lines[i])
        if m:
            return tuple(f.strip() for f in m.group(1).split(","))
        i -= 1
    return None


def _pairs(value: object, fields: tuple[str, ...] | None, path: str, line: int, where: str, var: str,
           problems: list[Problem], groups_file: str) -> tuple[tuple[str, str], ...] | None:
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            problems.append(Problem(path, line, where, "dict keys must be strings (the field names)"))
            return None
        return tuple((k, norm(v)) for k, v in value.items())
    if isinstance(value, tuple | list):
        if fields is None:
            problems.append(Problem(path, line, where, (
                f"tuple positions have no names; add a comment `# (name, a, b, ...)` right above `{var} =` "
                f"or `fields:` to the group in {groups_file}")))
            return None
        if len(value) != len(fields):
            problems.append(Problem(path, line, where, (
                f"has {len(value)} values but the fields are ({', '.join(fields)}); make them agree")))
            return None
        return tuple((f, norm(v)) for f, v in zip(fields, value, strict=True))
    problems.append(Problem(path, line, where, f"must be a tuple or a dict, got {type(value).__name__}; "
                                              "write each configuration as a tuple or a dict"))
    return None


def template_matrix(source: str, template: str, test: str, *, scan: FileScan, default_gpus: int,
                    others: Sequence[tuple[str, str]] = ()) -> tuple[list[Configuration], list[Problem]]:
    """The entries of ``test`` (a repo-relative path) in the workflow template, one configuration each.

    An entry without ``num_gpus`` runs on the test file's ``NUM_GPUS`` (read by the catalog's
    ``scan``), else on the repo's ``default_gpus``, as ``nightly catalog`` lists it. Each carries
    its catalog test id, which depends on the test's entries in every template: ``others`` are
    the other templates, (path, text)."""
    parsed = parse_template(source, template)
    every = [(template, parsed), *((name, parse_template(text, name)) for name, text in others)]
    mine = [e for _, t in every for e in t.entries if template_path(e) == test]
    lines = env_lines(every)  # the catalog's ids depend on the environment each template gives
    ids = entry_ids(mine, lines)
    defaults = {key: default for _, key, default in parsed.env if default is not None}
    configs = []
    problems = list(parsed.problems)
    for entry in parsed.entries:
        if template_path(entry) != test:
            continue
        if entry.num_gpus is None and not entry.cpu:  # a NUM_GPUS the catalog cannot read matters here
            problems += [p for p in scan.problems if p.field == "NUM_GPUS" and p not in problems]
        # as the job's environment gets them: GitHub's spelling (``true``), a falsy value replaced by its default
        given = {key: job_value(text, truthy, defaults.get(key)) for key, text, truthy in entry.github}
        fields = {"job": entry.job, "num_gpus": norm(entry_gpus(entry, scan.num_gpus, default_gpus)),
                  "test_args": entry.test_args, **defaults, **given}
        name = " ".join(filter(None, (entry.job, entry.test_args, *(f"{k}={v}" for k, v, _ in entry.github))))
        configs.append(Configuration(test, name, template, entry.line, tuple(sorted(fields.items())),
                                     ids[entry_key(entry, lines)]))
    if not configs and not problems:
        problems.append(Problem(template, 1, "test_file", f"no entry runs {test}; add one or drop it from the group"))
    return configs, problems
