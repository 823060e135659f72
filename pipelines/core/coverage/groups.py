"""``assets/coverage.yaml``: groups of sibling tests, their dimensions and required interactions.

Every mistake is one located problem (``coverage.yaml:LINE: repos.R.groups[i].FIELD: what is
wrong; how to fix``) and all of them are raised together, before anything is checked. The file
has its own small line-remembering loader so it does not depend on how ``specs.py`` reads YAML.
"""

from __future__ import annotations

import difflib
import posixpath
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from pipelines.core.coverage.model import DEFAULT_MATRIX, TEMPLATE_MATRIX, Dimension, Group, norm
from pipelines.core.model import CatalogError, Problem

FILE_NAME = "coverage.yaml"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: the keys each level takes; any other is a misspelling that would otherwise be silently ignored
TOP_KEYS, REPO_KEYS = ("repos",), ("groups",)
GROUP_KEYS = ("name", "tests", "matrix", "fields", "dimensions", "strength", "require")
DIMENSION_KEYS = ("field", "fields", "values")


class _Lines(yaml.SafeLoader):
    """Mappings remember the line of each key in ``.lines``. A key given twice (YAML would keep the
    last value without a word) or one that is not a scalar is kept in ``.bad`` as (line, field, message)."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.bad: list[tuple[int, str, str]] = []


class _Map(dict):
    lines: dict[str, int]
    line: int = 1


class _Seq(list):
    line: int = 1


def _mapping(loader: _Lines, node: yaml.MappingNode) -> _Map:
    explicit = sum(1 for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge")
    loader.flatten_mapping(node)
    merged = len(node.value) - explicit  # flatten_mapping puts the merged (`<<:`) pairs first; they may be overridden
    out = _Map()
    out.lines, out.line = {}, node.start_mark.line + 1
    seen: dict[Any, int] = {}
    for i, (key_node, value_node) in enumerate(node.value):
        line = key_node.start_mark.line + 1
        if not isinstance(key_node, yaml.ScalarNode):  # `? [a, b] : x`: a list or mapping as a key
            loader.bad.append((line, "key", "a key must be a plain name, not a list or a mapping; write it as text"))
            continue
        key = loader.construct_object(key_node, deep=True)
        if i >= merged:
            if key in seen:
                loader.bad.append((line, str(key), f"is given twice (also on line {seen[key]}); YAML would keep only "
                                                   "this one, keep one"))
            seen[key] = line
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[str(key)] = line
    return out


def _sequence(loader: _Lines, node: yaml.SequenceNode) -> _Seq:
    out = _Seq(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    return out


def _switch(loader: _Lines, node: yaml.ScalarNode) -> bool | str:
    """YAML 1.1 reads ``on``/``off``/``yes``/``no`` as booleans; a test that says ``"on"`` means the
    word, so only ``true``/``false`` are booleans here and the other words stay as written."""
    text = loader.construct_scalar(node)
    return text.lower() == "true" if text.lower() in ("true", "false") else text


_Lines.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Lines.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)
_Lines.add_constructor("tag:yaml.org,2002:bool", _switch)
# YAML 1.1 wants a dot in a float, so `1e-5` would stay the text "1e-5" while Python's 1e-5 is a number
_Lines.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"),
                             list("-+0123456789."))


def load_groups(path: Path | str, repo: str, known: Collection[str] | None = None) -> tuple[Group, ...]:
    """The groups declared for ``repo`` (its name in repos.yaml); none when the file is absent.

    ``known``: the repo names the file may use (see :func:`parse_groups`)."""
    path = Path(path)
    if not path.exists():
        return ()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CatalogError(Problem(str(path), 1, "file", f"cannot be read ({exc.strerror}); check the path and its permissions")) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:  # a latin-1 `café` in a comment: a located problem, never a traceback
        raise CatalogError(Problem(str(path), data.count(b"\n", 0, exc.start) + 1, "file", (
            f"is not UTF-8 ({exc.reason} at byte {exc.start}); save it as UTF-8 (an editor's 'save with encoding')"))) from exc
    return parse_groups(text, str(path), repo, known)


def parse_groups(text: str, where: str, repo: str, known: Collection[str] | None = None) -> tuple[Group, ...]:
    """Validate the whole file (every repo's groups) and return ``repo``'s; raise all problems at once.

    ``known``: the repo names of repos.yaml. When ``repo`` has no groups here, every other name
    repos.yaml lacks is reported: it is most likely ``repo`` misspelt, whose groups would never be
    checked. (Checking a repo that has its groups leaves other unconfigured checkouts' names alone.)
    """
    loader = None
    try:
        loader = _Lines(text)  # YAML refuses a control character as it takes the text
        raw = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        raise CatalogError(Problem(where, line, "yaml", f"{exc.problem}; fix the YAML syntax")) from exc
    except yaml.reader.ReaderError as exc:  # a control character (not a MarkedYAMLError): YAML refuses the whole file
        raise CatalogError(_unprintable(text, where, exc)) from exc
    except yaml.YAMLError as exc:
        raise CatalogError(Problem(where, 1, "yaml", f"{exc}; fix the YAML syntax")) from exc
    finally:
        if loader is not None:
            loader.dispose()
    reader = _Reader(where)
    for line, field, message in loader.bad:
        reader.add(line, field, message)
    if raw is None:
        raw = _Map()
    if not isinstance(raw, dict):
        reader.add(getattr(raw, "line", 1), "repos", f"the file must be a mapping `repos: {{NAME: {{groups: [...]}}}}`, "
                                                     f"got {'a list' if isinstance(raw, list) else repr(raw)}; see docs/coverage.md")
        raw = _Map()
    reader.unknown(raw, "", TOP_KEYS)
    repos = reader.typed(raw, "repos", dict, "", _Map(), "a mapping of repo name -> {groups: [...]}")
    out: dict[str, tuple[Group, ...]] = {}
    for name, body in repos.items():
        at = f"repos.{name}"
        is_map = reader.is_map(body, at, repos, name)
        if is_map:
            reader.unknown(body, at, REPO_KEYS)
        groups = reader.typed(body, "groups", list, at, _Seq(), "a list of groups") if is_map else []
        parsed = [reader.group(g, f"{at}.groups[{i}]", _line(groups, i, body, "groups")) for i, g in enumerate(groups)]
        seen: set[str] = set()
        for group in filter(None, parsed):
            if group.name in seen:
                reader.add(int(group.origin.rsplit(":", 1)[1]), f"{at}.groups", f"two groups are named {group.name!r}; rename one")
            seen.add(group.name)
        out[str(name)] = tuple(filter(None, parsed))
    if known is not None and repo not in out:
        for name in repos:
            if str(name) not in known:
                near = difflib.get_close_matches(repo, [str(name)], n=1)
                hint = f"did you mean {repo!r}? " if near else ""
                reader.add(repos.lines.get(str(name), repos.line), f"repos.{name}", (
                    f"{name!r} is not a repo in repos.yaml (known: {', '.join(sorted(known)) or 'none'}) and {repo!r} "
                    f"has no groups here; {hint}fix the name (an unconfigured checkout goes by its folder name)"))
    if reader.problems:
        raise CatalogError(sorted(reader.problems, key=lambda p: p.line))
    return out.get(repo, ())


def _unprintable(text: str, where: str, exc: yaml.reader.ReaderError) -> Problem:
    """The line and column of the character YAML refuses (``\\x07``), and what to do with it."""
    at = exc.position if isinstance(exc.position, int) and 0 <= exc.position <= len(text) else 0
    line, column = text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1
    code = exc.character if isinstance(exc.character, int) else 0
    escape = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return Problem(where, line, "yaml", f"character {chr(code)!r} at column {column} is not allowed in YAML; remove it "
                                        f"(write it as \"{escape}\" inside double quotes if it is meant)")


def _line(container: Any, index: int, parent: Any, key: str) -> int:
    item = container[index] if isinstance(container, list) and index < len(container) else None
    return getattr(item, "line", None) or getattr(container, "line", None) or getattr(parent, "lines", {}).get(key, 1)


class _Reader:
    """Typed access that collects located problems instead of stopping at the first."""

    def __init__(self, where: str):
        self.where, self.problems = where, []

    def add(self, line: int, field: str, message: str) -> None:
        self.problems.append(Problem(self.where, line, field, message))

    def is_map(self, value: Any, field: str, parent: Any, key: Any) -> bool:
        if isinstance(value, dict):
            return True
        self.add(getattr(parent, "lines", {}).get(str(key), 1), field, f"must be a mapping, got {value!r}")
        return False

    def unknown(self, m: Any, at: str, keys: tuple[str, ...]) -> None:
        """Each key of ``m`` not among ``keys``: a misspelt ``strenght:`` must not leave the default in force."""
        for key in m:
            if key not in keys:
                near = difflib.get_close_matches(str(key), keys, n=1)
                hint = f"did you mean {near[0]!r}? " if near else ""
                self.add(m.lines.get(str(key), m.line), f"{at}.{key}" if at else str(key),
                         f"unknown key; {hint}the keys here are {', '.join(keys)}")

    def typed(self, m: Any, key: str, typ: type, at: str, default: Any, what: str) -> Any:
        field = f"{at}.{key}" if at else key
        if not isinstance(m, dict) or key not in m:
            return default
        value = m[key]
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            self.add(m.lines.get(key, m.line), field, f"must be {what}, got {value!r}")
            return default
        return value

    def group(self, g: Any, at: str, line: int) -> Group | None:
        if not isinstance(g, dict):
            self.add(line, at, f"must be a mapping with name, tests and dimensions, got {g!r}")
            return None
        before = len(self.problems)
        self.unknown(g, at, GROUP_KEYS)
        name = self.typed(g, "name", str, at, "", "a group name")
        if not _NAME.fullmatch(name):
            self.add(g.lines.get("name", g.line), f"{at}.name", f"required: a name of letters, digits, '.', '_', '-' (got {name!r})")
        tests = self.tests(g, at)
        matrix = self.typed(g, "matrix", str, at, DEFAULT_MATRIX, f"a module variable name or {TEMPLATE_MATRIX!r}")
        if matrix != TEMPLATE_MATRIX and not _IDENT.fullmatch(matrix):
            self.add(g.lines.get("matrix", g.line), f"{at}.matrix", f"{matrix!r} is not a Python name; use e.g. _CONFIGS or {TEMPLATE_MATRIX!r}")
        fields = self.typed(g, "fields", list, at, None, "a list of tuple position names")
        if fields is not None and not all(isinstance(f, str) and _IDENT.fullmatch(f) for f in fields):
            self.add(g.lines.get("fields", g.line), f"{at}.fields", f"must name each tuple position with a Python name, got {fields!r}")
        read = len(self.problems)
        dims = self.dimensions(g, at)
        dims_read = len(self.problems) == read
        strength = self.typed(g, "strength", int, at, 2, "a whole number >= 1")
        if strength < 1:
            self.add(g.lines.get("strength", g.line), f"{at}.strength", f"must be >= 1 (2: all pairs), got {strength}")
        require = self.require(g, at, {d.name for d in dims})
        if "strength" in g and "require" in g:  # either would otherwise be silently ignored (require: decided)
            self.add(g.lines["strength"], f"{at}.strength", (
                f"cannot stand beside require: (line {g.lines['require']}), which names the dimension tuples to "
                "cover instead; keep require: for those tuples only, or strength: for every combination of that "
                "many dimensions"))
        elif "strength" in g and dims and dims_read and strength > len(dims):
            self.add(g.lines["strength"], f"{at}.strength", f"{strength} is more than the {len(dims)} dimensions "
                                                            f"declared; give at most strength: {len(dims)}")
        if len(self.problems) > before:
            return None
        return Group(name, tuple(tests), dims, f"{self.where}:{g.line}", matrix,
                     tuple(fields) if fields is not None else None, strength, require)

    def tests(self, g: Any, at: str) -> tuple[str, ...]:
        """The group's test paths spelt as the checkout lists its files (``./tests/a.py`` is
        ``tests/a.py``), so a test file's own ``# coverage-group:`` comment finds itself listed;
        each once."""
        raw = self.typed(g, "tests", list, at, [], "a list of repo-relative test paths")
        if not raw or not all(isinstance(t, str) and t and not t.startswith("/") and ".." not in t.split("/") for t in raw):
            self.add(g.lines.get("tests", g.line), f"{at}.tests", "required: a list of repo-relative test paths inside the repo (tests/...py)")
            return ()
        paths = [posixpath.normpath(t) for t in raw]
        twice = sorted({t for t in paths if paths.count(t) > 1})
        if twice:  # its rows would be counted, and its problems reported, once per listing
            self.add(g.lines.get("tests", g.line), f"{at}.tests", f"{', '.join(twice)} is listed twice; list each test once")
        return tuple(dict.fromkeys(paths))

    def dimensions(self, g: Any, at: str) -> tuple[Dimension, ...]:
        raw = self.typed(g, "dimensions", dict, at, _Map(), "a mapping of dimension name -> values")
        if not raw:
            self.add(g.lines.get("dimensions", g.line), f"{at}.dimensions", "required: e.g. {backend: [megatron, tilelang]}")
        out = []
        for name, spec in raw.items():
            field, line = f"{at}.dimensions.{name}", raw.lines.get(str(name), raw.line)
            dim = self.dimension(str(name), spec, field, line)
            if dim:
                out.append(dim)
        return tuple(out)

    def dimension(self, name: str, spec: Any, field: str, line: int) -> Dimension | None:
        fields: list[Any] = [name]
        values: Any = spec
        if isinstance(spec, dict):
            self.unknown(spec, field, DIMENSION_KEYS)
            if ("field" in spec) == ("fields" in spec):
                self.add(line, field, "give exactly one of `field: NAME` or `fields: [A, B]` (the tuple positions it reads)")
                return None
            fields = [spec["field"]] if "field" in spec else spec["fields"]
            values = spec.get("values")
        if not isinstance(fields, list) or not fields or not all(isinstance(f, str) and _IDENT.fullmatch(f) for f in fields):
            self.add(line, f"{field}.fields", f"must be a non-empty list of field names, got {fields!r}")
            return None
        pairs = self.values(values, len(fields), field, line)
        if pairs is None:
            return None
        labels = [label for label, _ in pairs]
        if len(set(labels)) != len(labels) or len({raw for _, raw in pairs}) != len(pairs):
            self.add(line, f"{field}.values", f"values must be distinct, got {labels}")
            return None
        return Dimension(name, tuple(fields), tuple(pairs))

    def values(self, values: Any, width: int, field: str, line: int) -> list[tuple[str, tuple[str, ...]]] | None:
        hint = "a list of values, or a mapping label -> value (a list of values when the dimension reads several fields)"
        if isinstance(values, list) and len(values) >= 1 and width == 1 and all(_scalar(v) for v in values):
            return [(norm(v), (norm(v),)) for v in values]
        if isinstance(values, dict) and values:
            out = []
            for label, raw in values.items():
                raw = raw if isinstance(raw, list) else [raw]
                if len(raw) != width or not all(_scalar(v) for v in raw):
                    self.add(values.lines.get(str(label), line), f"{field}.values.{label}",
                             f"must be {width} scalar value(s), one per field, got {raw!r}")
                    return None
                out.append((str(label), tuple(norm(v) for v in raw)))
            return out
        self.add(line, f"{field}.values", f"must be {hint}, got {values!r}")
        return None

    def require(self, g: Any, at: str, dims: set[str]) -> tuple[tuple[str, ...], ...]:
        raw = self.typed(g, "require", list, at, [], "a list of dimension tuples, e.g. [[backend, layout]]")
        out = []
        for item in raw:
            if not isinstance(item, list) or not item or not all(isinstance(d, str) for d in item):
                self.add(g.lines.get("require", g.line), f"{at}.require", f"each entry must be a list of dimension names, got {item!r}")
                continue
            unknown = [d for d in item if d not in dims]
            if unknown and dims:
                self.add(g.lines.get("require", g.line), f"{at}.require",
                         f"unknown dimension(s) {unknown}; declared: {sorted(dims)}")
                continue
            twice = [d for d in dict.fromkeys(item) if item.count(d) > 1]
            if twice:  # its cells would need one row to take two values of one dimension: never covered
                self.add(g.lines.get("require", g.line), f"{at}.require",
                         f"{item!r} names {', '.join(twice)} twice; each tuple must name distinct dimensions, "
                         f"e.g. [{', '.join(sorted(dims)[:2]) or 'backend, layout'}]")
                continue
            out.append(tuple(item))
        return tuple(out)


def _scalar(value: Any) -> bool:
    """A value a dimension may take; YAML ``null`` is one (the label ``null``, as a row's Python ``None``)."""
    return value is None or isinstance(value, str | int | float | bool)
