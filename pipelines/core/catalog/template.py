"""Template format (framework S): the GPU test list inside a Jinja2 workflow template.

The template uses ``<% %>`` / ``<< >>`` delimiters. We parse it with Jinja2's own parser and read
the ``<% set name = [...] %>`` lists and the ``jobs`` dict from its syntax tree as literals
(a list may refer to an earlier ``set``); nothing is rendered or executed. Each job maps to a
suite, its ``label`` (``run-ci-<x>``) to label ``x``. Entry keys other than ``test_file``,
``num_gpus`` and ``test_args`` become environment variables, named as the template's own
``VAR: ${{ matrix.info.<key> || 'default' }}`` lines name them (else the key upper-cased).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import jinja2
from jinja2 import nodes

from pipelines.core.model import Problem

_ENV_LINE = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*\$\{\{\s*matrix\.info\.([A-Za-z_][A-Za-z0-9_]*)\s*"
    r"(?:\|\|\s*'([^']*)'\s*)?\}\}\s*$",
    re.MULTILINE,
)
ENTRY_KEYS = ("test_file", "num_gpus", "test_args")


@dataclass(frozen=True)
class Entry:
    """One test entry of one job (identical entries in several jobs are merged later)."""

    test_file: str
    job: str
    label: str
    line: int
    num_gpus: int | None
    test_args: str
    extra: tuple[tuple[str, str], ...]
    cpu: bool


@dataclass(frozen=True)
class Template:
    entries: tuple[Entry, ...]
    #: (ENV_VAR, entry key, default or None) in template order
    env: tuple[tuple[str, str, str | None], ...]
    problems: tuple[Problem, ...]
    notes: tuple[str, ...] = ()


class _LineDict(dict):
    line = 1


class _NotLiteral(Exception):
    def __init__(self, line: int, message: str):
        self.line, self.message = line, message


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        block_start_string="<%", block_end_string="%>", variable_start_string="<<", variable_end_string=">>",
        comment_start_string="<#", comment_end_string="#>", autoescape=False,
    )


def _value(node: nodes.Node, scope: dict[str, object]) -> object:
    if isinstance(node, nodes.Const):
        return node.value
    if isinstance(node, nodes.List | nodes.Tuple):
        return [_value(item, scope) for item in node.items]
    if isinstance(node, nodes.Dict):
        out = _LineDict()
        out.line = node.lineno
        for pair in node.items:
            key = _value(pair.key, scope)
            if not isinstance(key, str | int | float | bool):
                raise _NotLiteral(pair.lineno, f"dict key {key!r} is not a string")
            out[key] = _value(pair.value, scope)
        return out
    if isinstance(node, nodes.Name) and node.name in scope:
        return scope[node.name]
    if isinstance(node, nodes.Name):
        raise _NotLiteral(node.lineno, f"`{node.name}` is not set earlier in the template")
    raise _NotLiteral(node.lineno, f"{type(node).__name__} is not a literal; the catalog only reads literal lists and dicts")


def parse_template(source: str, path: str) -> Template:
    """Entries, env mapping and problems of one workflow template (never raises)."""
    try:
        tree = _environment().parse(source)
    except jinja2.TemplateSyntaxError as exc:
        return Template((), (), (Problem(path, exc.lineno or 1, "template", f"{exc.message}; fix the Jinja2 syntax"),))
    problems: list[Problem] = []
    scope: dict[str, object] = {}
    lines: dict[str, int] = {}
    for assign in tree.find_all(nodes.Assign):
        if not isinstance(assign.target, nodes.Name):
            continue
        name = assign.target.name
        try:
            scope[name] = _value(assign.node, scope)
            lines[name] = assign.lineno
        except _NotLiteral as bad:
            problems.append(Problem(path, bad.line, f"set {name}", bad.message))
    env = tuple((m.group(1), m.group(2), m.group(3)) for m in _ENV_LINE.finditer(source)
                if m.group(2) not in ENTRY_KEYS)
    notes: list[str] = []
    jobs = scope.get("jobs")
    if jobs is None:
        jobs = {name: {"tests": value} for name, value in scope.items()
                if isinstance(value, list) and value and all(isinstance(v, dict) and "test_file" in v for v in value)}
        notes.append(f"{path}: no `jobs` dict; each `set` list of tests is taken as a job named after it")
    if not isinstance(jobs, dict):
        problems.append(Problem(path, lines.get("jobs", 1), "set jobs", "must be a dict of job name -> {label, tests}"))
        return Template((), env, tuple(problems), tuple(notes))
    entries: list[Entry] = []
    for job, config in jobs.items():
        entries += _job_entries(path, str(job), config, lines.get("jobs", 1), problems)
    return Template(tuple(entries), env, tuple(problems), tuple(notes))


def _job_entries(path: str, job: str, config: object, line: int, problems: list[Problem]) -> list[Entry]:
    where = f"jobs.{job}"
    if not isinstance(config, dict):
        problems.append(Problem(path, line, where, "must be a dict with `tests` (and usually `label`)"))
        return []
    line = getattr(config, "line", line)
    tests = config.get("tests")
    if not isinstance(tests, list):
        problems.append(Problem(path, line, f"{where}.tests", "must be a list of {'test_file': ..., 'num_gpus': ...} dicts"))
        return []
    label = config.get("label", "")
    label = label.removeprefix("run-ci-") if isinstance(label, str) else ""
    cpu = bool(config.get("cpu"))
    out = []
    for item in tests:
        item_line = getattr(item, "line", line)
        if not isinstance(item, dict):
            problems.append(Problem(path, item_line, f"{where}.tests", f"entry {item!r} is not a dict"))
            continue
        test_file, gpus, args = item.get("test_file"), item.get("num_gpus"), item.get("test_args", "")
        if not isinstance(test_file, str) or not test_file:
            problems.append(Problem(path, item_line, "test_file", "required: the test's path under tests/"))
            continue
        if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
            problems.append(Problem(path, item_line, "num_gpus", f"must be a whole number >= 0, got {gpus!r}"))
            continue
        if not isinstance(args, str):
            problems.append(Problem(path, item_line, "test_args", f"must be a string of arguments, got {args!r}"))
            continue
        extra = []
        for key, value in item.items():
            if key in ENTRY_KEYS:
                continue
            if isinstance(value, dict | list):
                problems.append(Problem(path, item_line, str(key), f"must be a string or number, got {value!r}"))
                break
            extra.append((str(key), str(value)))
        else:
            out.append(Entry(test_file, job, label, item_line, gpus, args, tuple(sorted(extra)), cpu))
    return out
