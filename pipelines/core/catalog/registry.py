"""Registry format (framework M, SGLang family): ``register_<backend>_ci(...)`` calls read with ``ast``.

The same rules as the frameworks' own runners, taken from the repo's :class:`Dialect`: only
module-level ``Expr(Call(Name))`` statements count; every argument is a literal; only the
positional parameters of the framework's signature may be positional; ``*args``, ``**kwargs``
and unknown keywords are errors. The GPU count and hardware come from the suite name
(``stage-c-4-gpu-h200``) or the ``hardware=[...]`` list, each of whose entries is a registration of its own
(as one call per hardware would be; an entry that disagrees with the suite name is a problem of its own);
the ``stage=`` + ``runner_config=`` form
names the suite ``f"{stage}-test-{runner_config}"``. A runner config without a GPU type
(``1-gpu-large``) is kept whole as the hardware: pools list it as an alias. A bad call gives one
located :class:`Problem` and the file's other calls still load; so does a module-level call that looks
like a registration but names no function of the dialect (``register_npu_ci`` where the module lacks it,
the typo ``register_cuda_cl``), which the runner would skip without a word, unless the file binds that
name itself (its own helper: a ``def``, a class, an assignment, an import from another module).
"""

from __future__ import annotations

import ast
import functools
import math
import re
from dataclasses import dataclass

from pipelines.core.catalog.dialect import PROFILES, Dialect, M, Signature
from pipelines.core.catalog.resolve import literal
from pipelines.core.model import Problem
from pipelines.core.pyparse import unparsed

_SUITE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_GPU_SUITE = re.compile(r"(?:^|-)(\d+)-gpu(?:-([A-Za-z0-9][A-Za-z0-9._-]*))?$")
#: the SGLang family counts other devices the same way (``stage-c-test-2-npu-a3``: 2 NPUs of type a3)
_DEVICE_SUITE = re.compile(r"(?:^|-)(\d+)-(?:gpu|npu|xpu)(?:-([A-Za-z0-9][A-Za-z0-9._-]*))?$")
_HARDWARE = re.compile(r"(?:(\d+)-gpu-)?([A-Za-z0-9][A-Za-z0-9._-]*)")
#: a GPU type names a chip and so holds a digit (h200, b200, mi300x); ``large``/``small`` do not
_GPU_TYPE = re.compile(r"[A-Za-z]*\d")
#: a chip after words that name none (``mi35x`` of ``small-amd-mi35x``): letters first, then a digit
_NAMED_CHIP = re.compile(r"[A-Za-z]+\d")
#: the words SGLang's runner configs put between ``-<N>-gpu-`` and the chip: the backend and the runner's size
#: (``stage-c-test-large-8-gpu-amd-mi35x``, ``1-gpu-small-amd-mi35x``). Only these: any other word there (a model,
#: ``deepseek`` of ``8-gpu-deepseek-v31``) means the tail names no chip, and it stays whole
_BEFORE_CHIP = frozenset({"amd", "large", "small"})
#: a word after the chip that names a variant of it, not the suite's purpose: memory (``80gb``, ``40g``),
#: form factor or interconnect (``sxm``, ``sxm5``, ``pcie``, ``nvl``, ``nvl72``), memory kind (``hbm3``)
_CHIP_VARIANT = re.compile(r"\d+(?:gb?|tb)|sxm\d*|pcie\d*|nvl\d*|hbm\d*e?", re.IGNORECASE)


@dataclass(frozen=True)
class Registration:
    """One registration call, checked; becomes one test."""

    backend: str
    suite: str
    gpus: int
    hardware: str
    est_time: int
    labels: tuple[str, ...]
    nightly: bool
    disabled: str | None
    line: int
    #: the suite names no GPU count (a free-form suite such as ``stress``): one GPU is assumed
    assumed_gpus: bool = False
    #: the est_time as the file writes it when that is not whole seconds (SGLang's ``12.5``); ``est_time``
    #: is it rounded up. Calibration shows and patches the file's value, not the rounded one
    est_literal: float | None = None


class _Bad(Exception):
    def __init__(self, field: str, message: str, withheld: tuple[Registration, ...] = ()):
        self.field, self.message = field, message
        #: what the refused call would register, when it can say (its ids still count for its siblings')
        self.withheld = withheld


def parse_registrations(tree: ast.Module, path: str, source: str, dialect: Dialect = M
                        ) -> tuple[list[Registration], list[Problem], list[Registration]]:
    """Every module-level registration of one file, one problem per bad or misplaced call, and what a call refused
    only for its runner's sake would register (SGLang's ``suite=None`` beside ``stage=``): no test, but the ids of
    the file's other tests are made over it too, so refusing it moves none of their ids (nor their history)."""
    regs: list[Registration] = []
    withheld: list[Registration] = []
    problems: list[Problem] = []
    top_lines: set[int] = set()
    backends = dialect.backends
    near: frozenset[int] | None = None  # the lengths of names one edit from a register function
    own: frozenset[str] | None = None  # the names the file binds itself (its own helpers)
    for stmt in tree.body:  # exact classes: the parser makes no subclasses, and this runs per statement
        if stmt.__class__ is not ast.Expr or stmt.value.__class__ is not ast.Call:
            continue
        call = stmt.value
        if call.func.__class__ is not ast.Name:
            continue
        if call.func.id not in backends:
            name = call.func.id
            near = near or frozenset(len(n) + d for n in backends for d in (-1, 0, 1))
            if name.startswith("register_") or len(name) in near:  # cheap first: most calls are neither
                stray = _not_a_register_function(name, tuple(sorted(backends)), dialect.module, dialect.name)
                if stray:
                    own = _own_names(tree, dialect.module) if own is None else own
                    problems += [] if name in own else [Problem(path, call.lineno, name, stray)]
            continue
        top_lines.add(call.lineno)
        try:
            placed, conflicts = _registrations(call, dialect)
        except _Bad as bad:
            problems.append(Problem(path, call.lineno, bad.field, bad.message))
            withheld += bad.withheld
            continue
        regs += placed
        problems += [Problem(path, call.lineno, bad.field, bad.message) for bad in conflicts]
    calls, aliases = _mentions(tuple(backends))
    if len(calls.findall(source)) > len(top_lines):
        problems += _misplaced(tree, path, top_lines, backends)
    if aliases.search(source):
        problems = sorted(problems + _aliased(tree, path, backends), key=lambda p: p.line)
    return regs, problems, withheld


def _own_names(tree: ast.Module, module: str) -> frozenset[str]:
    """The names the file binds at module level (also inside ``if``/``try``/``with`` blocks) by ``def``, ``class``,
    assignment or an import from anything but the registry ``module``: a call of one of those is the file's own
    helper (``def register_trace_ci(name): ...``), not a registration gone astray. With no registry module (a
    built-in profile), an import from a module named ``ci_register``, the family's, stands for it."""
    registry = _dotted(module) if module else ()
    names: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            if not _names_module(stmt.module or "", registry) and not (
                    not module and (stmt.module or "").split(".")[-1] == "ci_register"):
                names.update(a.asname or a.name for a in stmt.names)
        elif isinstance(stmt, ast.Assign):
            names.update(n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(stmt, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
            names.update(n.id for n in ast.walk(stmt.target) if isinstance(n, ast.Name))
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            names.update(n.id for i in stmt.items if i.optional_vars for n in ast.walk(i.optional_vars)
                         if isinstance(n, ast.Name))
        if not isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for field in ("body", "orelse", "finalbody"):
                todo += getattr(stmt, field, None) or []
            todo += [s for h in getattr(stmt, "handlers", None) or [] for s in h.body]
    return frozenset(names)


def _dotted(module: str) -> tuple[str, ...]:
    """``python/sglang/test/ci/ci_register.py`` as import parts: (python, sglang, test, ci, ci_register)."""
    parts = module.removesuffix(".py").split("/")
    return tuple(parts[:-1] if parts[-1] == "__init__" else parts)


def _names_module(imported: str, registry: tuple[str, ...]) -> bool:
    """Whether ``from <imported> import ...`` (relative dots dropped) names the registry module: its parts end
    the module's path (``sglang.test.ci.ci_register`` for ``python/sglang/test/ci/ci_register.py``)."""
    parts = tuple(p for p in imported.split(".") if p)
    return 0 < len(parts) <= len(registry) and registry[-len(parts):] == parts


#: the family's naming of a register function: a call of such a name the dialect lacks registers nothing
_REGISTER_NAME = re.compile(r"register_\w+_ci")


@functools.lru_cache(maxsize=256)
def _not_a_register_function(name: str, functions: tuple[str, ...], module: str, profile: str) -> str | None:
    """What to say about a module-level call of ``name``, which is none of the dialect's register ``functions``
    (read from ``module``, or "" for the built-in ``profile``), when it looks like one: ``register_<x>_ci`` (``register_npu_ci`` where the module defines cuda/rocm/cpu), or one
    edit from one (``register_cuda_cl``, a typo). Only calls of the dialect's functions register a test, so
    this one registers nothing and, unsaid, the test vanished. None for any other call (``register_fixture()``)."""
    family = {n for p in PROFILES.values() for n in p.backends}  # a real backend (npu) is no typo of cpu
    near = None if name in family else next((f for f in functions if _one_edit(name, f)), None)
    if near is None and not _REGISTER_NAME.fullmatch(name):
        return None
    defined = ", ".join(functions)
    if module:
        reads = f"{module} (the repo's registry module) defines {defined}"
    else:
        reads = f"no module of the repo defines register_*_ci, so the built-in profile {profile}'s {defined} are read"
    said = f"not a register function: {reads}, and only calls of those register a test, so this call registers nothing"
    if near is not None:
        return f"{said}; did you mean {near}? fix the name"
    if module:
        return f"{said}; call one of those, or define {name} in {module}"
    other = next((p for p in PROFILES.values() if p.name != profile and name in p.backends), None)
    if other is not None:
        return (f"{said}; the built-in profile {other.name} has {name}: set `dialect: {other.name}` for this repo in "
                "assets/repos.yaml (or `registry_module:` naming the module that defines it)")
    return f"{said}; call one of those, or name the module that defines it with `registry_module:` in assets/repos.yaml"


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` is ``b`` with one character changed, added, removed or swapped with its neighbour."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = next((i for i, (x, y) in enumerate(zip(short, long, strict=False)) if x != y), len(short))
    return short[i:] == long[i + 1:]


#: what Python allows between a name and ``(`` or ``as``: spaces, tabs, newlines inside brackets, ``\`` continuations
_GAP = r"(?:\s|\\\r?\n)"


@functools.lru_cache(maxsize=16)
def _mentions(names: tuple[str, ...]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Cheap text checks before walking the tree: a call of a register function (``register_cuda_ci(``, and
    ``register_cuda_ci (`` as Python accepts it), and an import alias (``register_cuda_ci as reg``). Every
    name is ``register_<backend>_ci``: the literal ``register_`` first lets the search skip ahead quickly."""
    backends = "|".join(re.escape(n[len("register_"):-len("_ci")]) for n in sorted(names, key=len, reverse=True))
    any_name = f"register_(?:{backends})_ci" if backends else "(?!)"
    return re.compile(rf"{any_name}{_GAP}*\("), re.compile(rf"{any_name}{_GAP}+as\b")


def _aliased(tree: ast.Module, path: str, backends: dict[str, str]) -> list[Problem]:
    """Calls through ``from ... import register_cuda_ci as reg`` (an alias that is no register name itself):
    the runner finds registrations by the function's own name, so ``reg(...)`` registers nothing; say so at
    the call, not as a file without one."""
    aliases = {a.asname: a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               for a in node.names if a.name in backends and a.asname and a.asname not in backends}
    if not aliases:
        return []
    return [Problem(path, node.lineno, aliases[node.func.id], (
        f"{node.func.id} is an alias of {aliases[node.func.id]}; the framework's runner only reads calls by that "
        f"name: call {aliases[node.func.id]}(...)"))
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in aliases]


def _misplaced(tree: ast.Module, path: str, top_lines: set[int], backends: dict[str, str]) -> list[Problem]:
    """Registration calls the runner never sees (nested, or called as an attribute)."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or node.lineno in top_lines:
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        if name not in backends:
            continue
        if isinstance(node.func, ast.Attribute):
            why = f"called as an attribute; the runner only reads plain {name}(...) calls; import the name and call it directly"
        else:
            why = "not a module-level statement, so the runner ignores it; move the call to the top level of the file"
        out.append(Problem(path, node.lineno, name, why))
    return sorted(out, key=lambda p: p.line)


def _registrations(call: ast.Call, dialect: Dialect) -> tuple[list[Registration], list[_Bad]]:
    """One registration per hardware the call lists (one when it lists none), and each listed entry
    that conflicts with the suite name; a call that is wrong as a whole raises :class:`_Bad`."""
    func = call.func.id  # type: ignore[union-attr]
    sig = dialect.signature(func)
    args: dict[str, object] = {}
    for a in call.args:
        if a.__class__ is ast.Starred:
            raise _Bad(func, f"*args is not allowed; write each argument literally: {sig.text()}")
    if len(call.args) > len(sig.positional):
        raise _Bad(func, f"only {' and '.join(sig.positional) if len(sig.positional) < 3 else ', '.join(sig.positional)} "
                         f"may be positional, got {len(call.args)} positional arguments; pass the others as keywords: "
                         f"{sig.text()}")
    for name, node in zip(sig.positional, call.args, strict=False):
        args[name] = _literal(name, node)
    for kw in call.keywords:
        if kw.arg is None:
            raise _Bad(func, f"**kwargs is not allowed; write each argument literally: {sig.text()}")
        if kw.arg not in sig.keywords:
            hint = " (the GPU count comes from the suite name: -<N>-gpu-)" if kw.arg == "num_gpus" else ""
            raise _Bad(kw.arg, f"unknown argument to {func}{hint}; known: {', '.join(sorted(sig.keywords))}; "
                               "remove it or fix the spelling")
        if kw.arg in args:
            raise _Bad(kw.arg, "given twice (positionally or as a keyword); pass it once")
        args[kw.arg] = _literal(kw.arg, kw.value)
    refused = None
    if "suite" in args and args["suite"] is None:  # suite=None is the default of frameworks with the stage= form
        if dialect.name == "sglang" and ("stage" in args or "runner_config" in args):
            # SGLang's runner checks whether suite was passed, not its value: with the pair it refuses the call
            refused = _Bad("suite", "suite=None is still a suite given to SGLang's runner, which refuses it beside "
                                    "stage= and runner_config= (\"must specify exactly one of (stage, runner_config) "
                                    "pair or suite\"); remove suite=None and keep the stage= and runner_config= pair")
        args.pop("suite")
    if refused is None:
        return _checked(call, args, sig, dialect)
    try:
        placed, _ = _checked(call, args, sig, dialect)
    except _Bad:
        raise refused from None  # what to fix first: the rest is read again once suite=None is gone
    raise _Bad(refused.field, refused.message, tuple(placed))


def _checked(call: ast.Call, args: dict[str, object], sig: Signature, dialect: Dialect
             ) -> tuple[list[Registration], list[_Bad]]:
    """:func:`_registrations` of a call whose arguments are read (``args``): each value checked."""
    func = sig.name
    est_time = _est_time(args, dialect, func)
    suite = _suite(args, stage_form="runner_config" in sig.keywords, sig=sig, free=dialect.suites == "free")
    labels = _labels(args, required="labels" in sig.required)
    _required(args, sig.required, func)
    nightly = args.get("nightly", False)
    if not isinstance(nightly, bool):
        raise _Bad("nightly", f"must be True or False, got {nightly!r}; write nightly=True or leave it out")
    disabled = args.get("disabled")
    if disabled is not None and not isinstance(disabled, str):
        raise _Bad("disabled", f"must be None or a reason string, got {disabled!r}; write disabled=\"<why>\" or leave it out")
    if disabled is not None and not disabled.strip():  # the runners skip on any string, an empty one too
        disabled = f"no reason given (disabled={disabled!r})"
    elif disabled is not None and not disabled.isprintable():
        disabled = printable(disabled)
    placements, conflicts = _placements(sig.backend, suite, _hardware_list(args), dialect)
    literal = args["est_time"] if est_time != args["est_time"] else None
    return [Registration(sig.backend, suite, gpus, hardware, est_time, labels, nightly, disabled, call.lineno, assumed,
                         literal) for gpus, hardware, assumed in placements], conflicts


#: the arguments whose value is a list of strings
_LIST_ARGUMENTS = frozenset({"labels", "hardware"})


def _literal(name: str, node: ast.AST) -> object:
    ok, value = literal(node)
    if not ok:
        if isinstance(node, ast.List):
            raise _Bad(name, f"must be a list of string literals, got `{unparsed(node)}`; write each item as a quoted string")
        # a tuple is a literal in Python, but the runner takes lists of strings only
        if name in _LIST_ARGUMENTS and isinstance(node, ast.Tuple | ast.Set):
            kind = "tuple" if isinstance(node, ast.Tuple) else "set"
            as_list = unparsed(ast.List(elts=node.elts, ctx=ast.Load()))
            raise _Bad(name, f"must be a list, got a {kind} `{unparsed(node)}`; write it in square brackets: "
                             f"{name}={as_list}")
        raise _Bad(name, f"must be a literal (number, string, True/False/None, list of strings), got "
                         f"`{unparsed(node)}`; the runner reads files without importing them, so write the value itself")
    return value


def _est_time(args: dict[str, object], dialect: Dialect, func: str) -> int:
    if "est_time" not in args:
        raise _Bad("est_time", f"required: the expected run time in seconds, e.g. {func}(600, ...)")
    v = args["est_time"]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise _Bad("est_time", f"must be a number of seconds, got {v!r}; write the expected run time as a plain number, "
                               f"e.g. {func}(600, ...)")
    if dialect.est_time == "non-negative":
        if v < 0:
            raise _Bad("est_time", f"must be 0 or more, got {v!r}; set the expected run time in seconds")
    elif v <= 0:
        raise _Bad("est_time", f"must be positive, got {v!r}; set the expected run time in seconds")
    if v > dialect.est_time_max:
        limit = "100 days" if dialect.est_time_max == 10**7 else f"{dialect.est_time_max} s, this repo's limit"
        raise _Bad("est_time", f"{v!r} s is more than {limit}; set the expected run time in seconds")
    return math.ceil(v)


#: how a "suite required" problem starts; the catalog replaces what follows ``; `` by a registration of the repo
#: with the backend of the function its first ``e.g. <function>(`` names
SUITE_REQUIRED = "required: the suite name"


def _suite_forms(func: str, backend: str, est_time: object, stage_form: bool, free: bool) -> str:
    """The dialect's own ways to name a suite, for a call that names none: the SGLang family's stage= +
    runner_config= pair and free legacy names, or framework M's shaped ``<stage>-<N>-gpu-<hardware>``.
    The example names ``func`` first: the catalog finds the call's backend by it (:data:`SUITE_REQUIRED`)."""
    est = est_time if isinstance(est_time, int | float) and not isinstance(est_time, bool) else 600
    if not free:
        shape = "<stage>-cpu" if backend == "cpu" else "<stage>-<N>-gpu-<hardware>"
        return f"pass it as the second argument, e.g. {func}({est}, \"{shape}\", ...)"
    pair = (f"give stage= and runner_config= (the suite is <stage>-test-<runner_config>), e.g. {func}({est}, "
            "stage=\"stage-b\", runner_config=\"1-gpu-large\"), or " if stage_form else "give ")
    return pair + f"a suite as the second argument, e.g. {func}({est}, \"nightly-1-gpu\")"


def _suite(args: dict[str, object], stage_form: bool, sig: Signature, free: bool = False) -> str:
    has_stage = "stage" in args or "runner_config" in args
    if "suite" in args and has_stage:
        raise _Bad("suite", "give either suite= or stage= with runner_config=, not both")
    if has_stage:
        stage, runner = args.get("stage"), args.get("runner_config")
        for name, v in (("stage", stage), ("runner_config", runner)):
            if not _name(v):
                raise _Bad(name, f"must be a name of letters, digits, '.', '_' or '-' (no '..'), got {v!r}; give both "
                                 "stage= and runner_config= as names, e.g. stage=\"stage-b\", runner_config=\"1-gpu-large\"")
        return f"{stage}-test-{runner}"
    if "suite" not in args:
        raise _Bad("suite", SUITE_REQUIRED + (" (or stage= with runner_config=)" if stage_form else "")
                   + "; " + _suite_forms(sig.name, sig.backend, args.get("est_time"), stage_form, free))
    suite = args["suite"]
    if not _name(suite):
        raise _Bad("suite", f"must be a name of letters, digits, '.', '_' or '-' (no '..'), got {suite!r}; rename "
                            "the suite with only those characters")
    return suite


def _name(v: object) -> bool:
    """A suite, stage or runner config that can be part of a test id (``..`` cannot: ids are paths too)."""
    return isinstance(v, str) and _SUITE.fullmatch(v) is not None and ".." not in v


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\x1b``): a disabled reason is printed by every
    listing, and a terminal must not act on escapes written in a test file."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


#: what to write for a required parameter the framework's signature names (others get a generic hint)
_REQUIRED_HINT = {"hardware": "a list of hardware names; add hardware=[\"<gpu type>\"]"}


def _required(args: dict[str, object], required: tuple[str, ...], func: str) -> None:
    """Every parameter without a default in the framework's signature is given (running the test file
    would raise TypeError otherwise); est_time, suite and labels have checks of their own above."""
    for name in required:
        if name not in args and name not in ("est_time", "suite", "labels"):
            what = _REQUIRED_HINT.get(name, f"add {name}=<value> as the signature asks")
            raise _Bad(name, f"required by this framework's {func} (no default in its signature): {what}")


def _labels(args: dict[str, object], required: bool) -> tuple[str, ...]:
    if "labels" not in args or args["labels"] is None:
        if required:
            raise _Bad("labels", "required for GPU tests by this framework's register function: a list of label strings; "
                                 "add labels=[\"<label>\"]")
        return ()
    labels = args["labels"]
    if not isinstance(labels, list):
        raise _Bad("labels", f"must be a list of strings, got {labels!r}; write labels=[\"{labels}\"]")
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise _Bad("labels", f"{label!r} is not a label; use letters, digits, '.', '_' or '-'")
    return tuple(dict.fromkeys(labels))


def _hardware_list(args: dict[str, object]) -> list[tuple[int | None, str]]:
    if "hardware" not in args:
        return []
    hw = args["hardware"]
    if not isinstance(hw, list) or not hw:
        raise _Bad("hardware", f"must be a non-empty list of strings such as [\"<gpu type>\"] or [\"<N>-gpu-<gpu type>\"], got {hw!r}")
    out = []
    for item in hw:
        m = _HARDWARE.fullmatch(item) if ".." not in item else None  # it becomes part of a test id
        if not m:
            raise _Bad("hardware", f"{item!r} is not a hardware name; use <gpu type> or <N>-gpu-<gpu type>")
        out.append((int(m.group(1)) if m.group(1) else None, m.group(2)))
    return out


def suite_hardware(tail: str) -> str:
    """The hardware a suite names after ``-<N>-gpu-``: the chip with its variant words (``h100-80gb``,
    ``a100-40g``, ``h200-sxm``: pools and history know the chip by that name), without the words that only
    qualify the suite (``h200`` of ``h200-fp8``, ``gb300`` of ``gb300-kimi-k25``, ``mi35x`` of
    ``mi35x-deepseek-r1-mxfp4-tp2``) nor the words before the chip that name the backend or the runner's
    size (``mi35x`` of SGLang's ``amd-mi35x`` and ``small-amd-mi35x``, :data:`_BEFORE_CHIP`); a tail that
    names no chip stays whole (a runner config such as ``large``, ``small-amd``; ``deepseek-v31``, a model)."""
    words = tail.split("-")
    first = 0
    while first < len(words) - 1 and words[first].lower() in _BEFORE_CHIP:
        first += 1
    if not (_NAMED_CHIP if first else _GPU_TYPE).match(words[first]):
        return tail
    n = first + 1
    while n < len(words) and _CHIP_VARIANT.fullmatch(words[n]):
        n += 1
    return "-".join(words[first:n])


def hardware_name(gpus: int, named: str) -> str:
    """``h200`` stays; a runner config without a GPU type (``1-gpu-large``) stays whole as an alias."""
    if not named or _GPU_TYPE.match(named):
        return named
    return f"{gpus}-gpu-{named}"


def _placements(backend: str, suite: str, hw: list[tuple[int | None, str]], dialect: Dialect
                ) -> tuple[list[tuple[int, str, bool]], list[_Bad]]:
    """(GPUs, hardware, GPU count assumed) for each hardware the registration runs on.

    A file may register once per hardware; a ``hardware=[...]`` list says the same in one call, so
    every entry counts. An entry whose GPU count or GPU type disagrees with the suite name is a
    conflict of its own; the agreeing entries still count.
    """
    if backend == "cpu":
        return [(0, "cpu", False)], []
    m = (_DEVICE_SUITE if dialect.suites == "free" else _GPU_SUITE).search(suite)
    suite_gpus, tail = (int(m.group(1)), m.group(2) or "") if m else (None, "")
    suite_hw = suite_hardware(tail)
    # an entry may name the chip alone, the chip with its variant or the whole tail (h200, h200-fp8 of h200-fp8)
    agreeing = {suite_hw, tail, tail.split("-", 1)[0] if _GPU_TYPE.match(tail) else tail} - {""}
    if not hw:
        return [_placement(backend, suite, suite_gpus, suite_hw, dialect)], []
    placements, conflicts = [], []
    first_named: dict[tuple[int, str, bool], str] = {}  # each placement -> the entry that named it first
    repeats: list[tuple[str, str, tuple[int, str, bool]]] = []
    for n, name in dict.fromkeys(hw):
        shown = f"{n}-gpu-{name}" if n is not None else name
        if suite_gpus is not None and n is not None and n != suite_gpus:
            conflicts.append(_Bad("hardware", f"{shown!r} asks for {n} GPUs but the suite name {suite!r} says "
                                              f"{suite_gpus}; make them agree (write {name!r} or fix the suite name)"))
            continue
        if agreeing and name not in agreeing:
            conflicts.append(_Bad("hardware", f"{shown!r} is not {suite_hw!r}, which the suite name {suite!r} asks "
                                              f"for; list only {suite_hw!r} or register the file once per suite"))
            continue
        try:  # the words after the chip that only qualify the suite are no hardware here either: h200-fp8 is h200
            where = _placement(backend, suite, suite_gpus if suite_gpus is not None else n, suite_hardware(name), dialect)
        except _Bad as bad:
            conflicts.append(bad)
            continue
        if where in first_named:
            repeats.append((first_named[where], shown, where))
        else:
            first_named[where] = shown
            placements.append(where)
    listed = [f"{n}-gpu-{x}" if n is not None else x for n, x in hw]
    if len(hw) != len(dict.fromkeys(hw)):
        conflicts.append(_Bad("hardware", f"{listed!r} lists an entry twice; remove the repeat"))
    if repeats:
        same = "; ".join(f"{first!r} and {again!r} both name {gpus} GPUs of {hardware!r}"
                         for first, again, (gpus, hardware, _) in repeats)
        conflicts.append(_Bad("hardware", f"{listed!r} names the same hardware twice ({same}); list it once"))
    return placements, conflicts


def _placement(backend: str, suite: str, gpus: int | None, named: str, dialect: Dialect) -> tuple[int, str, bool]:
    assumed = False
    if gpus is None:
        if dialect.suites != "free":
            raise _Bad("suite", f"unknown suite shape {suite!r}: GPU suites are named <stage>-<N>-gpu-<hardware>, "
                                "or give hardware=[\"<N>-gpu-<hardware>\"]")
        gpus, assumed = 1, True
    if gpus <= 0:
        raise _Bad("suite", f"{suite!r} asks for {gpus} GPUs; a {backend} test needs at least 1; fix the GPU count")
    if named == backend:  # "stage-b-test-1-gpu-amd" says the backend again, as "nightly-amd-2-gpu" says it before
        named = ""
    hardware = hardware_name(gpus, named)
    if not hardware and backend not in dialect.default_pool_backends:
        hardware = backend  # an NPU/XPU/MLX test naming no hardware must not land on the default (NVIDIA) pool
    return gpus, hardware, assumed
