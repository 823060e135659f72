"""What a test's ``prepare()`` downloads and converts, read statically from its source.

Recognized (both frameworks write them this way):
- any call whose first argument is a string or f-string starting with ``hf download``
  (``exec_command(f"hf download {ORG}/{NAME} --local-dir /root/models/{NAME}")``), with its
  ``--revision``, ``--include`` and ``--exclude`` and the file names after the repo id (they decide
  what lands in the folder);
- ``hf_download_dataset("<org/name>")`` -> ``/root/datasets/<name>``;
- ``convert_checkpoint(model_name, megatron_model_type, num_gpus_per_node, multinode=False,
  extra_args="", dir_dst="/root", hf_checkpoint=None)`` -> ``<dir_dst>/<model>_torch_dist``.
Values come from literals, module constants, simple assignments in ``prepare()`` and f-strings
over those. What cannot be resolved is reported as ``unresolved: <text>`` with the unknown
parts in braces, never guessed.
"""

from __future__ import annotations

import ast
import operator
import posixpath
import shlex
from dataclasses import dataclass

from pipelines.core.catalog.resolve import Scalar, Value, collect_assignment, resolve
from pipelines.core.pyparse import unparsed

CONVERT_PARAMS = ("model_name", "megatron_model_type", "num_gpus_per_node", "multinode", "extra_args", "dir_dst",
                  "hf_checkpoint")
CONVERT_DEFAULTS: dict[str, Scalar] = {"multinode": False, "extra_args": "", "dir_dst": "/root", "hf_checkpoint": None}
_DOWNLOAD_PREFIXES = ("hf download ", "huggingface-cli download ")


@dataclass(frozen=True)
class Download:
    kind: str  # "model" or "dataset"
    key: str
    source: str
    path: str
    #: line of the call in the test file (a problem about it points there)
    line: int = 1
    #: ``hf download --revision`` (a branch, tag or commit; "" for the default branch)
    revision: str = ""
    #: ``--include`` / ``--exclude`` patterns, space-separated as written ("" for every file)
    include: str = ""
    exclude: str = ""
    #: file names after the repo id (``hf download org/m config.json``), space-separated; hf then
    #: fetches those files only and ignores ``--include`` / ``--exclude``, so they are left out
    files: str = ""


@dataclass(frozen=True)
class Conversion:
    model: str
    #: the model requirement (key) it converts: hf_checkpoint's folder name, else model_name
    source_model: str
    path: str
    params: tuple[tuple[str, str], ...]
    #: line of the call in the test file
    line: int = 1


@dataclass(frozen=True)
class Needs:
    downloads: tuple[Download, ...] = ()
    conversions: tuple[Conversion, ...] = ()
    unresolved: tuple[str, ...] = ()


#: expression parts that never hold a call (names, constants, operators, contexts)
_LEAVES = (ast.Name, ast.Constant, ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
#: fields that never hold a node that may hold a call (names, flags, contexts, operators, aliases)
_SCALAR_FIELDS = frozenset({"ctx", "op", "ops", "name", "names", "asname", "id", "attr", "arg", "kind", "conversion",
                            "is_async", "simple", "level", "module", "type_comment", "rest", "kwd_attrs", "tag"})


def _child_fields(cls: type) -> tuple[str, ...]:
    """The fields of a node class that may hold a call (none for leaves and non-nodes)."""
    fields = _CHILD_FIELDS.get(cls)
    if fields is None:
        leaf = not issubclass(cls, ast.AST) or issubclass(cls, _LEAVES)
        fields = _CHILD_FIELDS[cls] = () if leaf else tuple(n for n in cls._fields if n not in _SCALAR_FIELDS)
    return fields


def _calls(root: ast.AST) -> list[ast.Call]:
    """Every call under ``root`` (``ast.walk`` without its generator overhead, skipping leaves: this runs
    per test file)."""
    out: list[ast.Call] = []
    stack: list = [root]
    pop, push, extend, fields_of, call = stack.pop, stack.append, stack.extend, _CHILD_FIELDS.get, ast.Call
    while stack:
        node = pop()
        cls = node.__class__
        if cls is call:
            out.append(node)
        fields = fields_of(cls)
        if fields is None:
            fields = _child_fields(cls)
        for name in fields:
            value = getattr(node, name)
            if value.__class__ is list:
                extend(value)  # non-node items (Global.names, Dict's None keys) are leaves above
            elif isinstance(value, ast.AST):
                push(value)
    return out


def infer_needs(tree: ast.Module, constants: dict[str, Scalar]) -> Needs:
    """Downloads and conversions of the module-level ``prepare()`` (empty when there is none)."""
    for prepare in tree.body:
        if prepare.__class__ is ast.FunctionDef and prepare.name == "prepare":
            break
    else:
        return _NO_NEEDS
    env = dict(constants)
    for stmt in prepare.body:
        collect_assignment(stmt, env)
    # plain tuples until the end: a known combination is then looked up, not rebuilt as records
    downloads: list[tuple[str, str, str, str]] = []
    conversions: list[tuple] = []
    unresolved: list[str] = []
    calls = _calls(prepare)
    if len(calls) > 1:
        calls.sort(key=_position)
    for call in calls:
        func = call.func
        name = func.id if func.__class__ is ast.Name else getattr(func, "attr", "")
        if name == "hf_download_dataset":
            _dataset(call, env, downloads, unresolved)
        elif name == "convert_checkpoint":
            _conversion(call, env, conversions, unresolved)
        elif call.args and call.args[0].__class__ in _TEXT_NODES:
            first = resolve(call.args[0], env)
            if first.text.startswith(_DOWNLOAD_PREFIXES):
                _hf_download(first, call.lineno, downloads, unresolved)
    return _shared(tuple(dict.fromkeys(downloads)), tuple(dict.fromkeys(conversions)), tuple(dict.fromkeys(unresolved)))


_position = operator.attrgetter("lineno", "col_offset")
_TEXT_NODES = frozenset({ast.Constant, ast.JoinedStr, ast.BinOp})
_NO_NEEDS = Needs()
#: needs by their plain-tuple form, one shared object each (bounded: a few per framework)
_NEEDS: dict[tuple, Needs] = {}


def _shared(downloads: tuple, conversions: tuple, unresolved: tuple[str, ...]) -> Needs:
    """One object per distinct needs: files of a framework share a few, so the records are built once,
    and results sent back from a parsing process (:mod:`.forked`) pickle each once instead of once per
    file. Keyed by plain tuples, which hash far faster than the frozen records."""
    key = (downloads, conversions, unresolved)
    needs = _NEEDS.get(key)
    if needs is None:
        if len(_NEEDS) >= 4096:
            _NEEDS.clear()
        needs = _NEEDS[key] = Needs(tuple(Download(*d) for d in downloads),
                                    tuple(Conversion(*c) for c in conversions), unresolved)
    return needs


def _unresolved(text: str, what: str, line: int) -> str:
    return f"unresolved: {text} ({what}, line {line})"


def _dataset(call: ast.Call, env: dict, downloads: list[tuple], unresolved: list[str]) -> None:
    node = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "repo_id"), None)
    if node is None:
        unresolved.append(_unresolved("{no dataset id}", "hf_download_dataset", call.lineno))
        return
    v = resolve(node, env)
    if not v.ok or not isinstance(v.value, str) or "/" not in v.value:
        unresolved.append(_unresolved(v.text, "hf_download_dataset", call.lineno))
        return
    name = v.value.rstrip("/").split("/")[-1]
    downloads.append(("dataset", name, v.value, f"/root/datasets/{name}", call.lineno))


def _hf_download(v: Value, line: int, downloads: list[tuple], unresolved: list[str]) -> None:
    text = v.text
    if not v.ok:
        unresolved.append(_unresolved(text, "hf download", line))
        return
    try:
        argv = shlex.split(text) if '"' in text or "'" in text or "\\" in text else text.split()
    except ValueError:
        unresolved.append(_unresolved(text, "hf download: unbalanced quotes", line))
        return
    repo_id, files, opts = _hf_args(argv[2:])
    if not repo_id or repo_id.startswith("-") or "/" not in repo_id:
        unresolved.append(_unresolved(text, "hf download: no org/name repository id", line))
        return
    local_dir = opts.get("--local-dir", "").rstrip("/")
    if not local_dir:
        unresolved.append(_unresolved(text, "hf download without --local-dir: where it lands is unknown", line))
        return
    kind = "dataset" if opts.get("--repo-type") == "dataset" else "model"
    # the revision and file filters decide what lands in the folder: they are part of the requirement
    include, exclude = ("", "") if files else (opts.get("--include", ""), opts.get("--exclude", ""))
    downloads.append((kind, local_dir.rpartition("/")[2], repo_id, local_dir, line, opts.get("--revision", ""),
                      include, exclude, " ".join(files)))


#: ``hf download`` flags that take no value, and those that take every value up to the next flag (argparse nargs="*")
_HF_SWITCHES = frozenset({"--force-download", "--resume-download", "--quiet", "--dry-run", "-h", "--help"})
_HF_MANY = frozenset({"--include", "--exclude"})


def _hf_args(argv: list[str]) -> tuple[str, list[str], dict[str, str]]:
    """(repo id, file names, options) of ``hf download``'s arguments as its argparse reads them: the repo id
    is the first argument that is no option nor an option's value, wherever it stands (``--local-dir X
    org/name``); the file names are the other such arguments."""
    positional: list[str] = []
    opts: dict[str, str] = {}
    i, n = 0, len(argv)
    while i < n:
        arg = argv[i]
        i += 1
        if arg == "--":
            positional += argv[i:]
            break
        if not arg.startswith("-"):
            positional.append(arg)
            continue
        flag, eq, value = arg.partition("=")
        if not eq and flag not in _HF_SWITCHES:
            taken = []
            while i < n and not argv[i].startswith("-") and (flag in _HF_MANY or not taken):
                taken.append(argv[i])
                i += 1
            value = " ".join(taken)
        opts[flag] = value
    return (positional[0] if positional else ""), positional[1:], opts


def _conversion(call: ast.Call, env: dict, conversions: list[tuple], unresolved: list[str]) -> None:
    args, keywords = call.args, call.keywords
    if any(a.__class__ is ast.Starred for a in args) or any(k.arg is None for k in keywords):
        unresolved.append(_unresolved("{" + unparsed(call) + "}", "convert_checkpoint with *args/**kwargs", call.lineno))
        return
    bound: dict[str, ast.AST] = dict(zip(CONVERT_PARAMS, args, strict=False))
    for kw in keywords:
        if kw.arg in _PARAMS:
            bound[kw.arg] = kw.value  # type: ignore[index]
    missing = [name for name in _REQUIRED if name not in bound]
    if missing:
        unresolved.append(_unresolved("{" + ", ".join(missing) + "}", "convert_checkpoint: missing arguments",
                                      call.lineno))
    ok = not missing
    values: dict[str, Scalar] = dict(CONVERT_DEFAULTS)
    for name in CONVERT_PARAMS:
        node = bound.get(name)
        if node is None:
            continue
        v = resolve(node, env)
        values[name] = v.value
        if not v.ok:
            unresolved.append(_unresolved(v.text, f"convert_checkpoint {name}", call.lineno))
            ok = False
    if not ok:
        return
    model = str(values["model_name"])
    hf_checkpoint = values["hf_checkpoint"]
    source = posixpath.basename(str(hf_checkpoint).rstrip("/")) if hf_checkpoint else model
    path = f"{str(values['dir_dst']).rstrip('/')}/{model}_torch_dist"
    # every parameter has a value, so sorting by name alone is the order sorted((name, value)) gives
    params = tuple((k, str(values[k])) for k in _SORTED_PARAMS if k != "hf_checkpoint" or hf_checkpoint is not None)
    conversions.append((model, source, path, params, call.lineno))


_PARAMS = frozenset(CONVERT_PARAMS)
_REQUIRED = tuple(name for name in CONVERT_PARAMS if name not in CONVERT_DEFAULTS)
_SORTED_PARAMS = tuple(sorted(CONVERT_PARAMS))
