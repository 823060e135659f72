"""What a test's ``prepare()`` downloads and converts, read statically from its source.

Recognized (both frameworks write them this way):
- any call whose first argument is a string or f-string starting with ``hf download``
  (``exec_command(f"hf download {ORG}/{NAME} --local-dir /root/models/{NAME}")``);
- ``hf_download_dataset("<org/name>")`` -> ``/root/datasets/<name>``;
- ``convert_checkpoint(model_name, megatron_model_type, num_gpus_per_node, multinode=False,
  extra_args="", dir_dst="/root", hf_checkpoint=None)`` -> ``<dir_dst>/<model>_torch_dist``.
Values come from literals, module constants, simple assignments in ``prepare()`` and f-strings
over those. What cannot be resolved is reported as ``unresolved: <text>`` with the unknown
parts in braces, never guessed.
"""

from __future__ import annotations

import ast
import functools
import posixpath
import shlex
from dataclasses import dataclass

from pipelines.core.catalog.resolve import Scalar, Value, collect_assignment, resolve

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


@dataclass(frozen=True)
class Conversion:
    model: str
    #: the model requirement (key) it converts: hf_checkpoint's folder name, else model_name
    source_model: str
    path: str
    params: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Needs:
    downloads: tuple[Download, ...] = ()
    conversions: tuple[Conversion, ...] = ()
    unresolved: tuple[str, ...] = ()


#: expression parts that never hold a call (names, constants, operators, contexts)
_LEAVES = (ast.Name, ast.Constant, ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type) -> tuple[str, ...]:
    """The fields of a node class that may hold a call (none for leaves and non-nodes)."""
    fields = _CHILD_FIELDS.get(cls)
    if fields is None:
        leaf = not issubclass(cls, ast.AST) or issubclass(cls, _LEAVES)
        fields = _CHILD_FIELDS[cls] = () if leaf else tuple(n for n in cls._fields if n not in ("ctx", "op"))
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
    prepare = next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "prepare"), None)
    if prepare is None:
        return Needs()
    env = dict(constants)
    for stmt in prepare.body:
        collect_assignment(stmt, env)
    downloads: list[Download] = []
    conversions: list[Conversion] = []
    unresolved: list[str] = []
    calls = sorted(_calls(prepare), key=lambda n: (n.lineno, n.col_offset))
    for call in calls:
        name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
        if name == "hf_download_dataset":
            _dataset(call, env, downloads, unresolved)
        elif name == "convert_checkpoint":
            _conversion(call, env, conversions, unresolved)
        elif call.args and isinstance(call.args[0], ast.Constant | ast.JoinedStr | ast.BinOp):
            first = resolve(call.args[0], env)
            if first.text.startswith(_DOWNLOAD_PREFIXES):
                _hf_download(first, call.lineno, downloads, unresolved)
    return _shared(Needs(tuple(dict.fromkeys(downloads)), tuple(dict.fromkeys(conversions)),
                         tuple(dict.fromkeys(unresolved))))


@functools.lru_cache(maxsize=4096)
def _shared(needs: Needs) -> Needs:
    """One object per distinct needs: files of a framework share a few, and results sent back from a
    parsing process (:mod:`.forked`) then pickle each once instead of once per file."""
    return needs


def _unresolved(text: str, what: str, line: int) -> str:
    return f"unresolved: {text} ({what}, line {line})"


def _dataset(call: ast.Call, env: dict, downloads: list[Download], unresolved: list[str]) -> None:
    node = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "repo_id"), None)
    if node is None:
        unresolved.append(_unresolved("{no dataset id}", "hf_download_dataset", call.lineno))
        return
    v = resolve(node, env)
    if not v.ok or not isinstance(v.value, str) or "/" not in v.value:
        unresolved.append(_unresolved(v.text, "hf_download_dataset", call.lineno))
        return
    name = v.value.rstrip("/").split("/")[-1]
    downloads.append(Download("dataset", name, v.value, f"/root/datasets/{name}"))


def _hf_download(v: Value, line: int, downloads: list[Download], unresolved: list[str]) -> None:
    if not v.ok:
        unresolved.append(_unresolved(v.text, "hf download", line))
        return
    try:
        argv = shlex.split(v.text) if any(c in v.text for c in "\"'\\") else v.text.split()
    except ValueError:
        unresolved.append(_unresolved(v.text, "hf download: unbalanced quotes", line))
        return
    repo_id = argv[2] if len(argv) > 2 else ""
    opts: dict[str, str] = {}
    rest = argv[3:]
    while rest:
        flag, eq, value = rest.pop(0).partition("=")
        if not eq and rest and not rest[0].startswith("-"):
            value = rest.pop(0)
        opts[flag] = value
    if not repo_id or repo_id.startswith("-") or "/" not in repo_id:
        unresolved.append(_unresolved(v.text, "hf download: no org/name repository id", line))
        return
    local_dir = opts.get("--local-dir", "").rstrip("/")
    if not local_dir:
        unresolved.append(_unresolved(v.text, "hf download without --local-dir: where it lands is unknown", line))
        return
    kind = "dataset" if opts.get("--repo-type") == "dataset" else "model"
    downloads.append(Download(kind, posixpath.basename(local_dir), repo_id, local_dir))


def _conversion(call: ast.Call, env: dict, conversions: list[Conversion], unresolved: list[str]) -> None:
    bound: dict[str, ast.AST] = {}
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        unresolved.append(_unresolved("{" + ast.unparse(call) + "}", "convert_checkpoint with *args/**kwargs", call.lineno))
        return
    for name, node in zip(CONVERT_PARAMS, call.args, strict=False):
        bound[name] = node
    for kw in call.keywords:
        if kw.arg in CONVERT_PARAMS:
            bound[kw.arg] = kw.value  # type: ignore[index]
    values: dict[str, Scalar] = {}
    missing = [name for name in CONVERT_PARAMS if name not in bound and name not in CONVERT_DEFAULTS]
    if missing:
        unresolved.append(_unresolved("{" + ", ".join(missing) + "}", "convert_checkpoint: missing arguments",
                                      call.lineno))
    ok = not missing
    for name in CONVERT_PARAMS:
        if name not in bound:
            values[name] = CONVERT_DEFAULTS.get(name)
            continue
        v = resolve(bound[name], env)
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
    params = tuple(sorted((k, str(v)) for k, v in values.items() if not (k == "hf_checkpoint" and v is None)))
    conversions.append(Conversion(model, source, path, params))
