"""Template format (framework S): the GPU test list inside a Jinja2 workflow template.

The template uses ``<% %>`` / ``<< >>`` delimiters. We parse it with Jinja2's own parser and read
the ``<% set name = [...] %>`` lists and the ``jobs`` dict from its syntax tree as literals
(a list may refer to an earlier ``set``, or join lists with ``+``); nothing is rendered or executed. Each job maps to a
suite, its ``label`` (``run-ci-<x>``) to label ``x``. Entry keys other than ``test_file``,
``num_gpus`` and ``test_args`` become environment variables, named as the template's own
``VAR: ${{ matrix.info.<key> || 'default' }}`` lines name them (else the key upper-cased). ``test_file``
is relative to the folder the job's ``run:`` line runs it from (:func:`run_folder`), else to ``tests/``.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass

import jinja2
import yaml
from jinja2 import nodes

from pipelines.core.model import Problem
from pipelines.core.specs_schema import env_name_problem, nul_problem

#: the template's Jinja parts: statements and comments are dropped, expressions become a placeholder
_JINJA_DROP = re.compile(r"<%.*?%>|<#.*?#>", re.DOTALL)
_JINJA_EXPR = re.compile(r"<<.*?>>", re.DOTALL)
#: the top-level ``on:`` key of a workflow (``"on":`` and ``'on':`` too)
_ON = re.compile(r"""^(?:on|"on"|'on')[ \t]*:""")
#: events that run a workflow for each change: under review, in the merge queue, or pushed (a reusable
#: workflow may be called by one of those); a push of tags alone is not one (see _tags_only)
_PR_EVENTS = frozenset({"pull_request", "pull_request_target", "merge_group", "workflow_call", "push"})


def _newlines(m: re.Match[str]) -> str:
    return "\n" * m.group().count("\n")


def _tags_only(push: object) -> bool:
    """A ``push:`` filtered to tags alone (``tags:``/``tags-ignore:``, no ``branches:``/``branches-ignore:``):
    GitHub then runs it for a pushed tag, never for a pushed commit, so it is no per-change event."""
    return (isinstance(push, dict) and bool({"tags", "tags-ignore"} & push.keys())
            and not {"branches", "branches-ignore"} & push.keys())


def _nightly_only(source: str, path: str = "") -> tuple[bool, str]:
    """Whether GitHub runs the workflow only on a schedule (its ``on:`` has ``schedule`` and no
    per-change event): then neither does ``--cadence pr``. An ``on:`` that cannot be read (said in the
    note), or none, is not assumed nightly-only (the template's tests run on every cadence).

    Only the top-level ``on:`` block is read, as YAML once the template's Jinja parts are out: the rest
    of the file (``<< name >>:`` job keys, loops) need not be YAML.
    """
    # each Jinja part keeps its newlines, so a line of ``text`` is the same line of the file (for the note)
    text = _JINJA_EXPR.sub(lambda m: "x" + _newlines(m), _JINJA_DROP.sub(_newlines, source))
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _ON.match(line)), None)
    if start is None:  # a fragment, not a workflow of its own: nothing says when it runs
        return False, ""
    block = [lines[start]]
    for line in lines[start + 1:]:
        if line.strip() and not line[0].isspace() and not line.lstrip().startswith("#"):
            break
        block.append(line)
    try:
        doc = yaml.safe_load("\n".join(block))
    except yaml.YAMLError:
        doc = None
    on = doc.get("on", doc.get(True)) if isinstance(doc, dict) else None  # YAML 1.1 reads a bare `on` as True
    if isinstance(on, str):
        events = {on}
    elif isinstance(on, list | dict):
        events = {e for e in on if isinstance(e, str)}
        if isinstance(on, dict) and _tags_only(on.get("push")):
            events.discard("push")  # a release trigger: no branch push starts it
    else:
        return False, (f"{path}:{start + 1}: `on:` cannot be read as a list of events; its entries are taken to run "
                       "on every cadence")
    return "schedule" in events and not events & _PR_EVENTS, ""


_ENV_LINE = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*\$\{\{\s*matrix\.info\.([A-Za-z_][A-Za-z0-9_]*)\s*"
    r"(?:\|\|\s*'([^']*)'\s*)?\}\}\s*$",
    re.MULTILINE,
)
ENTRY_KEYS = ("test_file", "num_gpus", "test_args")
#: where framework S's job runs ``test_file`` from (``python tests/${{ matrix.info.test_file }}``)
TEST_DIR = "tests"


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
    #: the template it came from (a repo may keep its matrix in several)
    source: str = ""
    #: each ``extra`` key's value as a GitHub expression gives it (``true``, ``2``), and whether it is truthy
    #: there (``false``, ``0``, ``''`` and ``null`` are not: ``matrix.info.<key> || 'd'`` then gives ``d``)
    github: tuple[tuple[str, str, bool], ...] = ()
    #: the folder of the checkout its template's job runs ``test_file`` from (see :func:`run_folder`)
    test_dir: str = TEST_DIR
    #: the line of its job's dict in ``jobs`` (where its ``tests`` list is built); 0 when not known
    job_line: int = 0


@dataclass(frozen=True)
class Template:
    entries: tuple[Entry, ...]
    #: (ENV_VAR, entry key, default or None) in template order
    env: tuple[tuple[str, str, str | None], ...]
    problems: tuple[Problem, ...]
    notes: tuple[str, ...] = ()
    #: its ``on:`` names no pull-request event (a scheduled workflow): its entries run only on nightly cadences
    nightly_only: bool = False
    #: the folder its job runs ``test_file`` from; the run line that says so (``test_dir_read``), else why
    #: tests/ is assumed ("" when no run line names the file) (see :func:`run_folder`)
    test_dir: str = TEST_DIR
    test_dir_said: str = ""
    test_dir_read: bool = False


class _LineDict(dict):
    line = 1


class _NotLiteral(Exception):
    def __init__(self, line: int, field: str, message: str):
        self.line, self.field, self.message = line, field, message


#: what to do about a value the catalog cannot read (it never renders the template)
_WRITE_IT = "write the value itself (a string, number, list or dict): the catalog reads the template without rendering it"


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        block_start_string="<%", block_end_string="%>", variable_start_string="<<", variable_end_string=">>",
        comment_start_string="<#", comment_end_string="#>", autoescape=False,
    )


class _Reader:
    """Literal values of one template's ``set`` statements; a bad list item is dropped alone, with its problem."""

    def __init__(self, path: str):
        self.path = path
        self.scope: dict[str, object] = {}
        self.lines: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.problems: list[Problem] = []

    def assign(self, name: str, node: nodes.Node, line: int) -> None:
        try:  # a set dict (the jobs) keeps its readable jobs, as a list keeps its readable items
            self.scope[name] = self._dict(node, name, skip_bad=True) if isinstance(node, nodes.Dict) else self.value(node, name)
            self.lines[name] = line
        except _NotLiteral as bad:
            self.failed[name] = line
            self.problems.append(Problem(self.path, bad.line, f"set {name}" if bad.field == name else bad.field,
                                         bad.message))

    def value(self, node: nodes.Node, where: str) -> object:
        if isinstance(node, nodes.Const):
            return node.value
        if isinstance(node, nodes.Neg | nodes.Pos) and isinstance(node.node, nodes.Const) and _is_number(node.node.value):
            return -node.node.value if isinstance(node, nodes.Neg) else node.node.value
        if isinstance(node, nodes.List | nodes.Tuple):
            return self._items(node, where)
        if isinstance(node, nodes.Dict):
            return self._dict(node, where, skip_bad=False)
        if isinstance(node, nodes.Add):
            return self._add(node, where)
        if isinstance(node, nodes.Name) and node.name in self.scope:
            return self.scope[node.name]
        if isinstance(node, nodes.Name) and node.name in self.failed:
            raise _NotLiteral(node.lineno, where, f"`{node.name}` could not be read (line {self.failed[node.name]}); "
                                                  "fix the problem reported there")
        if isinstance(node, nodes.Name):
            raise _NotLiteral(node.lineno, where, f"`{node.name}` is not set earlier in the template; set it with "
                                                  f"`<% set {node.name} = [...] %>` above this line, or {_WRITE_IT}")
        raise _NotLiteral(node.lineno, where, f"{type(node).__name__} is not a literal; {_WRITE_IT}")

    def _add(self, node: nodes.Add, where: str) -> object:
        """``a + b`` as Jinja renders it: two lists (``fsdp_tests + megatron_tests``) or two strings joined, numbers added."""
        left, right = self.value(node.left, where), self.value(node.right, where)
        if isinstance(left, list) and isinstance(right, list):
            return left + right
        if isinstance(left, str) and isinstance(right, str):
            return left + right
        if _is_number(left) and _is_number(right):
            return left + right  # type: ignore[operator]
        raise _NotLiteral(node.lineno, where, f"`+` joins two lists or two strings here, not a {type(left).__name__} "
                                              f"and a {type(right).__name__}; write both sides as lists (or both as strings)")

    def _dict(self, node: nodes.Dict, where: str, skip_bad: bool) -> _LineDict:
        """``skip_bad``: an unreadable value drops its key alone (a job), else the whole dict (an entry)."""
        out = _LineDict()
        out.line = node.lineno
        for pair in node.items:
            try:
                key = self.value(pair.key, where)
                if not isinstance(key, str | int | float | bool):
                    raise _NotLiteral(pair.lineno, where, f"dict key {key!r} is not a string; quote the key")
                out[key] = self.value(pair.value, f"{where}.{key}")
            except _NotLiteral as bad:
                if not skip_bad:
                    raise
                self.problems.append(Problem(self.path, bad.line, bad.field, f"{bad.message}; this entry is skipped"))
        return out

    def _items(self, node: nodes.List | nodes.Tuple, where: str) -> list[object]:
        """The readable items; each unreadable one is a problem of its own (``<list>[i]``) and the rest stay."""
        out = []
        for i, item in enumerate(node.items):
            try:
                out.append(self.value(item, f"{where}[{i}]"))
            except _NotLiteral as bad:
                self.problems.append(Problem(self.path, bad.line, bad.field, f"{bad.message}; this entry is skipped"))
        return out


def _used(roots: set[str], refs: dict[str, set[str]]) -> set[str]:
    """The sets ``roots`` depend on, themselves included (a problem elsewhere cannot change the test lists)."""
    used, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name not in used:
            used.add(name)
            todo += refs.get(name, ())
    return used


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


#: ``${{ matrix.info.test_file }}``: where the job's ``run:`` line names the entry's file
_TEST_FILE = re.compile(r"\$\{\{\s*matrix\.info\.test_file\s*\}\}")
#: the checkout's root as a run line names it
_WORKSPACE = re.compile(r"\$\{\{\s*github\.workspace\s*\}\}|\$\{GITHUB_WORKSPACE\}|\$GITHUB_WORKSPACE\b")
_RUN_KEY = re.compile(r"^\s*(?:-\s+)?run\s*:\s*(.*)$")
_WORKING_DIRECTORY = re.compile(r"^\s*(?:-\s+)?working-directory\s*:\s*(.*?)\s*$", re.MULTILINE)
#: a folder word as the catalog takes it from a run line: no variable, home, glob or option
_PLAIN_FOLDER = re.compile(r"[A-Za-z0-9._/+@-]+")
#: a YAML block scalar's indicator: ``run: |`` (the commands follow, one a line)
_BLOCK_SCALAR = re.compile(r"[|>][+-]?[1-9]?")


def run_folder(source: str) -> tuple[str, str, bool]:
    """(folder, what says so, whether the run line said it): the folder of the checkout the template's job runs ``test_file`` from, read
    from its ``run:`` line, e.g. ``tests/e2e`` from ``cd tests/e2e && python ${{ matrix.info.test_file }}``
    or ``tests`` from ``python tests/${{ matrix.info.test_file }}`` (``cd`` commands before the one naming
    the file, then the path glued in front of it). Only a command that runs the file (:func:`_runs_file`) counts
    where there is one. Where the line cannot be read for sure (a variable, a
    ``working-directory:`` elsewhere than the checkout, two lines that disagree), or names no folder, the
    job is taken to run it from ``tests/``, as framework S does, and the second value says why."""
    found: list[tuple[str, str, bool]] = []
    lines = source.splitlines()
    for m in _WORKING_DIRECTORY.finditer(source):
        value = _WORKSPACE.sub(".", m.group(1)).strip("'\"")
        if posixpath.normpath(value or ".") != ".":
            line = source.count("\n", 0, m.start()) + 1
            return TEST_DIR, (f"`working-directory: {m.group(1)}` at line {line} starts the run line in a folder the "
                              "catalog does not follow"), False
    for i, text in enumerate(lines):
        hit = _TEST_FILE.search(text)
        if hit is None:
            continue
        own = _RUN_KEY.match(text)
        if own is not None:
            block, shown = [own.group(1)], f"`{text.strip().removeprefix('- ')}` at line {i + 1}"
        else:  # a line of a `run: |` block (else not a command: an `env:` value): its lines from the first on
            start = _parent(lines, i)
            key = _RUN_KEY.match(lines[start]) if start is not None else None
            if key is None or not _BLOCK_SCALAR.fullmatch(key.group(1).strip()):
                continue
            block = lines[start + 1:i + 1]
            cds = [line.strip() for line in block[:-1] if line.strip().startswith(("cd ", "pushd ", "popd"))]
            shown = f"`{'; '.join([*cds, text.strip()])}` in the `run:` block at line {start + 1}"
        for at in _TEST_FILE.finditer(block[-1]):
            before = block[-1][:at.start()]
            found.append((_folder_of("\n".join([*block[:-1], before])), shown, _runs_file(before)))
    # the command that runs the file decides; an `echo`, `mv` or `tee` naming it too says nothing of its folder
    found = [f for f in found if f[2]] or found
    if not found:
        return TEST_DIR, "", False
    folders = {f for f, _, _ in found}
    if len(folders) > 1:
        return TEST_DIR, f"its run lines disagree: {'; '.join(dict.fromkeys(s for _, s, _ in found))}", False
    folder, said, _ = found[0]
    if folder.startswith("?"):
        return TEST_DIR, f"{said} {folder[1:]}", False
    if not folder:
        return TEST_DIR, f"{said} names no folder", False
    return folder, said, True


#: a program that runs a test file given as its argument (``python3.11``, ``/usr/bin/python`` too)
_RUNNER = re.compile(r"(?:.*/)?(?:python[0-9.]*|pytest|py\.test|torchrun|accelerate|deepspeed|coverage|mpirun|srun)")
#: what may stand before the runner: ``NAME=value``, and commands that run the rest of the line as a command
_PREFIX_WORDS = frozenset({"env", "exec", "time", "nohup", "uv", "poetry", "pdm", "run", "timeout"})


def _runs_file(before: str) -> bool:
    """Whether the file's name that follows ``before`` (the text in front of it on its line) is what a command
    runs: the command it is in starts, after ``NAME=value`` words and ``env``/``exec``/``timeout N``/``uv run``
    and the like, with python, pytest, torchrun, accelerate, deepspeed, coverage, mpirun or srun, and not
    as python's ``-c`` code. An ``echo``, ``mv`` or ``tee`` naming the file does not run it."""
    command = re.split(r"&&|\|\||;|\||\(", before)[-1]
    words = command.split()
    if words and not command[-1].isspace():
        words = words[:-1]  # the path glued to the file's name, or an opening quote
    while words and (words[0] in _PREFIX_WORDS or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0])
                     or (words[0][:1] == "-" or words[0][:1].isdigit())):
        words = words[1:]  # timeout's options and duration, env's options
    program = words[0].strip("'\"") if words else ""
    return _RUNNER.fullmatch(program) is not None and not ("python" in program and "-c" in words[1:])


def _folder_of(before: str) -> str:
    """The folder the commands ``before`` the file's name leave the job in, joined with the path glued to the
    name; ``?<why>`` when the catalog cannot tell it for sure. Only commands that change folder count: an
    ``echo "... $(hostname)"`` before them says nothing of it."""
    before = _WORKSPACE.sub(".", before)
    *earlier, last = re.split(r"&&|;|\n", before)
    if any(re.search(r"<<|`|\$\(", text) for text in (*filter(_changes_folder, earlier), last)):
        return "?computes its folder (a Jinja or shell expression)"
    parts: list[str] = []
    for segment in earlier:
        if not _changes_folder(segment):
            continue
        if "\\" in segment:  # bash reads `cd tests\e2e` as testse2e, a Windows shell as tests/e2e
            return ("?names its folder with a backslash, which bash reads as an escape and a Windows shell as a "
                    "folder separator, so the catalog cannot tell the folder (write it with /)")
        try:
            words = shlex.split(segment)
        except ValueError:
            return "?cannot be split into words as the shell does"
        if words[:1] in (["pushd"], ["popd"]) or (words and words[0].startswith("(")):
            return "?changes folder with pushd, popd or a subshell, which the catalog does not follow"
        if "cd" in words[1:]:  # `then cd x`, `[ -d x ] || cd y`: whether it runs depends on the shell
            return "?changes folder inside a shell construct, which the catalog does not follow"
        if words[:1] != ["cd"]:
            continue
        target = words[1:2]
        rest = words[2:]
        if not target or (rest and rest[0] != "||") or not _PLAIN_FOLDER.fullmatch(target[0]) \
                or target[0].startswith(("/", "-")):
            return "?changes to a folder the catalog cannot read (a variable, an absolute path or an option)"
        parts.append(target[0])
    glued = re.split(r"\s", last)[-1].lstrip("'\"")
    if "\\" in glued:
        return ("?glues to the file's name a path with a backslash, which bash reads as an escape and a Windows shell "
                "as a folder separator, so the catalog cannot tell the folder (write it with /)")
    if glued and (not glued.endswith("/") or not _PLAIN_FOLDER.fullmatch(glued) or glued.startswith(("/", "-"))):
        return "?builds the file's path in a way the catalog cannot read"
    folder = posixpath.normpath(posixpath.join(".", *parts, glued))
    if folder == ".." or folder.startswith("../"):
        return "?leaves the checkout"
    return "" if folder == "." else folder


def _changes_folder(segment: str) -> bool:
    """The command may change the job's folder: it names cd, pushd or popd, or opens a subshell."""
    return re.search(r"(?:^|[^\w.-])(?:cd|pushd|popd)(?:$|[^\w.-])", segment) is not None or segment.lstrip().startswith("(")


def parse_template(source: str, path: str) -> Template:
    """Entries, env mapping and problems of one workflow template (never raises)."""
    try:
        tree = _environment().parse(source)
    except jinja2.TemplateSyntaxError as exc:
        return Template((), (), (Problem(path, exc.lineno or 1, "template", f"{exc.message}; fix the Jinja2 syntax"),))
    reader = _Reader(path)
    # only top-level sets can hold the test lists: a set inside a for/if block (the image of the job being
    # rendered) is scoped to it; each set's problems wait until we know whether `jobs` uses it
    refs: dict[str, set[str]] = {}
    own: dict[str, list[Problem]] = {}
    kinds: dict[str, bool] = {}  # name -> written as a list (a test list even when unreadable)
    for assign in tree.body:
        if isinstance(assign, nodes.Assign) and isinstance(assign.target, nodes.Name):
            name, before = assign.target.name, len(reader.problems)
            reader.assign(name, assign.node, assign.lineno)
            own.setdefault(name, []).extend(reader.problems[before:])
            refs.setdefault(name, set()).update(n.name for n in (assign.node, *assign.node.find_all(nodes.Name))
                                                 if isinstance(n, nodes.Name))
            kinds[name] = isinstance(assign.node, nodes.List | nodes.Tuple | nodes.Add)
    scope, lines = reader.scope, reader.lines
    env = tuple((m.group(1), m.group(2), m.group(3)) for m in _ENV_LINE.finditer(source)
                if m.group(2) not in ENTRY_KEYS)
    notes: list[str] = []
    jobs = scope.get("jobs")
    if "jobs" in own:
        roots = {"jobs"}
    else:
        jobs = {name: {"tests": value} for name, value in scope.items()
                if isinstance(value, list) and value and all(isinstance(v, dict) and "test_file" in v for v in value)}
        roots = set(jobs) | {name for name, listed in kinds.items() if listed}
        notes.append(f"{path}: no `jobs` dict; each `set` list of tests is taken as a job named after it")
    used = _used(roots, refs)
    problems = [p for name, found in own.items() if name in used for p in found]
    notes += [f"{path}:{reader.failed[name]}: set {name}: not used by `jobs`, and the catalog cannot read it "
              f"({own[name][-1].message.split(';')[0]}); ignored"
              for name in own if name not in used and name in reader.failed and own[name]]
    if jobs is None:
        return Template((), env, tuple(problems), tuple(notes))
    if not isinstance(jobs, dict):
        problems.append(Problem(path, lines.get("jobs", 1), "set jobs", "must be a dict of job name -> {label, tests}; "
                                                                        "write `<% set jobs = {'<job>': {...}} %>`"))
        return Template((), env, tuple(problems), tuple(notes))
    entries: list[Entry] = []
    rendered = _rendered_matrix_keys(tree)
    test_dir, said, read = run_folder(source)
    for job, config in jobs.items():
        entries += _job_entries(path, str(job), config, lines.get("jobs", 1), problems, notes, rendered, test_dir)
    # a list shared by several jobs would report each bad entry once per job
    nightly_only, why = _nightly_only(source, path)
    notes += [why] if why and entries else []
    problems += _other_axes(source, path) if entries else []
    return Template(tuple(entries), env, tuple(dict.fromkeys(problems)), tuple(notes), nightly_only, test_dir, said, read)


#: ``matrix:`` alone on its line (a job's ``strategy.matrix`` block)
_MATRIX = re.compile(r"^([ \t]*)matrix[ \t]*:[ \t]*(?:#.*)?$")
#: a key of that block: ``backend: [megatron, fsdp]``
_AXIS = re.compile(r"""^([ \t]*)(?:"([^"]+)"|'([^']+)'|([A-Za-z_][\w-]*))[ \t]*:""")
#: ``${{ ... matrix.<name> ... }}`` other than ``matrix.info`` (what an axis beside ``info`` feeds)
_EXPR = re.compile(r"\$\{\{(.*?)\}\}")
_MATRIX_VALUE = re.compile(r"\bmatrix\.([A-Za-z_][\w-]*)")
_VAR = re.compile(r"^[ \t]*-?[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*:[ \t]*\$\{\{")


def _skipped(line: str) -> bool:
    """A line that says nothing of the YAML's nesting: blank, a comment, or a Jinja statement or comment."""
    stripped = line.strip()
    return not stripped or stripped.startswith(("#", "<%", "<#"))


def _depth(line: str) -> int:
    return len(line.expandtabs()) - len(line.expandtabs().lstrip())


def _parent(lines: list[str], i: int) -> int | None:
    """The line of the key that ``lines[i]`` is nested in (the nearest line above it indented less)."""
    depth = _depth(lines[i])
    return next((j for j in range(i - 1, -1, -1) if not _skipped(lines[j]) and _depth(lines[j]) < depth), None)


def _block_end(lines: list[str], i: int) -> int:
    """The index after the last line nested in ``lines[i]``."""
    depth = _depth(lines[i])
    return next((j for j in range(i + 1, len(lines)) if not _skipped(lines[j]) and _depth(lines[j]) <= depth),
                len(lines))


def _other_axes(source: str, path: str) -> list[Problem]:
    """A ``strategy.matrix`` axis beside ``info`` (``backend: [megatron, fsdp]``) makes GitHub run every entry of
    the job once per value, and ``${{ matrix.backend }}`` gives each run its own value; the catalog reads only
    ``info``, so it would list each entry once and run it without that value, a configuration CI never runs.
    Each such axis, and each ``${{ matrix.<x> }}`` naming no ``info`` key, is a problem on its line rather than
    a silently dropped cell. (The cells are not expanded: with several axes GitHub's include/exclude rules
    differ, and the value may feed ``run:`` arguments or ``runs-on`` rather than an env line.)

    Only a matrix with an ``info`` key is the test list's, and only its job's ``${{ matrix.<x> }}`` feed those
    tests: another job of the workflow (a unit-test job over ``python-version``) runs no e2e test."""
    lines = source.splitlines()
    axes: dict[str, int] = {}  # axis -> line of its first definition
    jobs: list[range] = []  # the lines of each job whose matrix has `info`
    for i, line in enumerate(lines):
        if not _MATRIX.match(line):
            continue
        level, found = None, {}
        for j in range(i + 1, _block_end(lines, i)):
            if _skipped(lines[j]):
                continue
            depth = _depth(lines[j])
            level = depth if level is None else level
            key = _AXIS.match(lines[j])
            if depth == level and key:
                found.setdefault(key.group(2) or key.group(3) or key.group(4), j + 1)
        if "info" not in found:
            continue
        for name, at in found.items():
            if name not in ("info", "include", "exclude"):
                axes.setdefault(name, at)
        strategy = _parent(lines, i)  # job -> strategy -> matrix; without them, the whole file
        job = _parent(lines, strategy) if strategy is not None else None
        jobs.append(range(job, _block_end(lines, job)) if job is not None else range(len(lines)))
    used: dict[str, dict[int, str]] = {}  # value -> line -> "VAR at line N" (or "line N" outside an env line)
    for i, line in enumerate(lines):
        if not any(i in job for job in jobs):
            continue
        for expr in _EXPR.finditer(line):
            for m in _MATRIX_VALUE.finditer(expr.group(1)):
                if m.group(1) != "info":
                    var = _VAR.match(line)
                    used.setdefault(m.group(1), {})[i + 1] = (f"{var.group(1)} at " if var else "") + f"line {i + 1}"
    def fix(name: str, feeds: dict[int, str]) -> str:
        var = next((v.split(" at ")[0] for v in feeds.values() if " at " in v), "VAR")
        return (f"list each combination as an entry of the job's test list instead ({{'test_file': ..., '{name}': "
                f"'<value>'}} with `{var}: ${{{{ matrix.info.{name} }}}}`): the catalog makes one test per entry")

    problems = []
    for name, line in axes.items():
        feeds = used.get(name, {})
        problems.append(Problem(path, line, f"strategy.matrix.{name}", (
            f"an axis beside `info` is not read: GitHub runs each test of the job once per {name} value"
            + (f" and gives it ${{{{ matrix.{name} }}}} ({', '.join(feeds.values())})" if feeds else "")
            + f", the catalog lists each test once, without it; {fix(name, feeds)}")))
    for name, feeds in used.items():
        if name in axes:
            continue
        for at in feeds:
            problems.append(Problem(path, at, f"matrix.{name}", (
                f"${{{{ matrix.{name} }}}} is a matrix value the catalog does not read (it reads `info` and its keys), "
                f"so the tests of the job would run without it; {fix(name, {at: feeds[at]})}")))
    return problems


#: the job keys the catalog reads; any other is named in a note (it may change how the job runs)
JOB_KEYS = ("label", "tests", "cpu", "include", "exclude")


def _rendered_matrix_keys(tree: nodes.Template) -> set[str]:
    """The job keys among ``include``/``exclude`` the template's body reads (``config.include``,
    ``config['exclude']``, ``config.get('include')``): only those reach the job's ``strategy.matrix``. A key
    the body never reads is not rendered, and GitHub runs the job's matrix without it."""
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, nodes.Assign) and isinstance(node.target, nodes.Name):
            continue  # the top-level sets hold the job dicts themselves, not what is rendered
        found |= {n.attr for n in node.find_all(nodes.Getattr)}
        found |= {n.value for n in node.find_all(nodes.Const) if isinstance(n.value, str)}
    return found & {"include", "exclude"}


def _matches(value: object, pattern: object) -> bool:
    """GitHub's matrix exclude: a dict pattern matches a dict that has each of its keys with a matching
    value (the rest of the entry does not matter); anything else must be equal."""
    if isinstance(pattern, dict):
        return isinstance(value, dict) and all(k in value and _matches(value[k], v) for k, v in pattern.items())
    return value == pattern


def _matrix(path: str, where: str, config: dict, tests: list, line: int, notes: list[str],
            rendered: set[str] | frozenset[str] = frozenset({"include", "exclude"})) -> list:
    """``tests`` after the job's ``exclude`` and ``include`` lists, as GitHub expands ``strategy.matrix`` whose one
    dimension is ``info``: an exclude drops the entries whose ``info`` has every key and value it gives (a partial
    match, nested dicts too), an include adds its ``info`` as a new combination unless an identical one is there
    already (includes apply after excludes). A list the template never renders (not in ``rendered``) changes
    nothing and is named."""
    for key in ("exclude", "include"):
        if key in config and key not in rendered:
            first = next(iter(config[key] or ()), None) if isinstance(config[key], list) else None
            notes.append(f"{path}:{getattr(first, 'line', line)}: {where}.{key}: not rendered by the template (its body never reads "
                         f"`config.{key}`), so GitHub runs the job without it; the job's tests are listed without it")
            continue
        for i, item in enumerate(config.get(key) or ()):
            at = f"{path}:{getattr(item, 'line', line)}: {where}.{key}[{i}]"
            info = item.get("info") if isinstance(item, dict) else None
            if not isinstance(info, dict):
                notes.append(f"{at}: has no `info` dict; not read (the catalog reads {{'info': {{...}}}} entries)")
                continue
            notes += [f"{at}.{k}: not read by the catalog (it reads `info` of an include or exclude entry); the "
                      f"{key}d entry is listed without it" for k in item if k != "info"]
            if key == "exclude":
                kept = [t for t in tests if not _matches(t, info)]
                if len(kept) == len(tests):
                    notes.append(f"{at}: matches no entry of the job (no entry's `info` has every key and value it "
                                 "gives); nothing is excluded")
                tests = kept
            elif info not in tests:
                tests = [*tests, info]
    return tests


def _job_entries(path: str, job: str, config: object, line: int, problems: list[Problem],
                 notes: list[str], rendered: set[str], test_dir: str = TEST_DIR) -> list[Entry]:
    where = f"jobs.{job}"
    if not isinstance(config, dict):
        problems.append(Problem(path, line, where, "must be a dict with `tests` (and usually `label`); "
                                                   "write {'label': 'run-ci-<x>', 'tests': [...]}"))
        return []
    job_line = getattr(config, "line", 0)  # a `set` list taken as a job has no dict of its own
    line = job_line or line
    tests = config.get("tests")
    if not isinstance(tests, list):
        problems.append(Problem(path, line, f"{where}.tests", "must be a list of {'test_file': ..., 'num_gpus': ...} dicts; "
                                                           "give the job a `tests` list"))
        return []
    for key in config:
        if key not in JOB_KEYS:
            notes.append(f"{path}:{line}: {where}.{key}: not read by the catalog (it reads {', '.join(JOB_KEYS)}); "
                         "the job's tests are listed without it")
    tests = _matrix(path, where, config, tests, line, notes, rendered)
    label = config.get("label", "")
    label = label.removeprefix("run-ci-") if isinstance(label, str) else ""
    cpu = bool(config.get("cpu"))
    out = []
    for item in tests:
        entry = _entry(path, job, label, cpu, item, getattr(item, "line", line), test_dir, job_line)
        if isinstance(entry, Problem):
            problems.append(entry)
        else:
            out.append(entry)
    return out


def _entry(path: str, job: str, label: str, cpu: bool, item: object, line: int,
           test_dir: str = TEST_DIR, job_line: int = 0) -> Entry | Problem:
    """One checked entry, or the first thing wrong with it (the entry is then skipped)."""
    if not isinstance(item, dict):
        return Problem(path, line, f"jobs.{job}.tests", f"entry {item!r} is not a dict; "
                                                        "write it as {'test_file': ..., 'num_gpus': ...}")
    test_file, gpus, args = item.get("test_file"), item.get("num_gpus"), item.get("test_args", "")
    if not isinstance(test_file, str) or not test_file:
        return Problem(path, line, "test_file", f"required: the test's path under {test_dir}/; add 'test_file': "
                                                "'test_<name>.py'")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
        return Problem(path, line, "num_gpus", f"must be a whole number >= 0, got {gpus!r}; "
                                               "write the test's GPU count (0 for a CPU test)")
    if not isinstance(args, str):
        return Problem(path, line, "test_args", f"must be a string of arguments, got {args!r}; quote them as one string")
    try:
        shlex.split(args)
    except ValueError as exc:  # the job's shell would fail on it too: never guess how it splits
        return Problem(path, line, "test_args", f"{args!r} cannot be split into arguments ({exc}); "
                                                "close the quote or escape it with a backslash")
    extra, github = [], []
    for key, value in item.items():
        if key in ENTRY_KEYS:
            continue
        bad_name = env_name_problem(key) if isinstance(key, str) else f"{key!r} is not a string"
        if bad_name:
            return Problem(path, line, str(key), f"{bad_name}: the job passes every key as one")
        if isinstance(value, dict | list):
            return Problem(path, line, str(key), f"must be a string or number, got {value!r}; "
                                                 "the job passes it as one environment variable, so write one value")
        if nul_problem(str(value)):
            return Problem(path, line, str(key), nul_problem(str(value)))
        extra.append((str(key), str(value)))
        github.append((str(key), *as_github(value)))
    return Entry(test_file, job, label, line, gpus, args, tuple(sorted(extra)), cpu, path, tuple(sorted(github)),
                 test_dir, job_line)


def job_value(text: str, truthy: bool, default: str | None) -> str:
    """What ``${{ matrix.info.<key> || 'default' }}`` gives the job for a value GitHub renders as ``text``:
    the default replaces a falsy value (false, 0, '', null); without a default the text stands."""
    return text if truthy or default is None else default


def as_github(value: object) -> tuple[str, bool]:
    """(text, truthy) of a matrix value in ``${{ matrix.info.<key> }}``: GitHub turns the JSON value into a
    string (booleans lower-case, numbers as JSON, null as ''), and ``||`` skips the falsy ones."""
    if value is None:
        return "", False
    if isinstance(value, bool):
        return ("true" if value else "false"), value
    if isinstance(value, float) and value.is_integer():
        return str(int(value)), value != 0
    if isinstance(value, int | float):
        return str(value), value != 0
    text = str(value)
    return text, text != ""
