"""Registry dialects: the rules of one framework family's runner, read from the framework itself.

Frameworks of the registry family disagree on details: which ``register_<backend>_ci``
functions exist, whether ``labels`` exists or is required, which files the runner collects,
whether ``est_time=0`` is fine, what ``nightly=True`` means. Rather than hard-coding one of
them, the catalog finds the repository's own registry module (the module that defines
``register_*_ci``), reads the signatures with ``ast`` and starts from the built-in profile the
module resembles (framework M, the SGLang family). ``assets/repos.yaml`` may name a profile
(``dialect: sglang``) and override the roots. Messages built from a dialect only quote that
framework's own functions, never another framework's labels or suites.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import re
from dataclasses import dataclass

from pipelines.core.pyparse import parse_python

_DEF = re.compile(rb"^[ \t]*def[ \t]+register_\w+_ci[ \t]*\(", re.MULTILINE)
_FUNC = re.compile(r"register_(\w+)_ci")


@dataclass(frozen=True)
class Signature:
    """One ``register_<backend>_ci`` function as the framework defines it."""

    name: str
    backend: str
    positional: tuple[str, ...]
    keywords: tuple[str, ...]
    required: tuple[str, ...]

    def text(self) -> str:
        """``name(a, b=..., *, c)`` as a CI maintainer recognizes it from the framework."""
        opt = [k for k in self.keywords if k not in self.positional]
        parts = [p if p in self.required else f"{p}=..." for p in self.positional]
        if opt:
            parts.append("*")
            parts += [k if k in self.required else f"{k}=..." for k in opt]
        return f"{self.name}({', '.join(parts)})"


@dataclass(frozen=True)
class Dialect:
    """How one framework's runner reads registrations (see module docstring)."""

    name: str
    functions: tuple[Signature, ...]
    #: file-name globs the runner collects under the roots, and names it skips
    discovery: tuple[str, ...] = ("test_*.py",)
    exclude: tuple[str, ...] = ()
    roots: tuple[str, ...] = ("tests",)
    #: "positive" (est_time > 0) or "non-negative" (0 allowed), and the largest est_time accepted
    est_time: str = "positive"
    est_time_max: int = 10**7
    #: "shaped": a GPU suite must say ``-<N>-gpu``; "free": any name (count assumed 1 when absent)
    suites: str = "shaped"
    #: "also" (M: nightly=True adds a test to nightly/weekly/release) or "exclusive" (SGLang family:
    #: the nightly cadence runs exactly the nightly=True registrations, per-commit the others)
    nightly: str = "also"
    #: suite of files in an implicit CPU folder, as the framework's runner names it
    implicit_suite: str = "stage-a-cpu"
    #: backends whose tests naming no hardware run on the default (NVIDIA) pool; any other backend's
    #: such tests get the backend as hardware (``npu``) so they never land there
    default_pool_backends: tuple[str, ...] = ("cuda", "rocm")
    #: where the rules came from (the registry module, or "built-in profile <name>")
    source: str = ""
    #: the repo-relative registry module the functions were read from; "" for a built-in profile's
    module: str = ""

    @functools.cached_property
    def backends(self) -> dict[str, str]:
        return {s.name: s.backend for s in self.functions}

    def signature(self, name: str) -> Signature:
        return self._by_name[name]

    @functools.cached_property
    def _by_name(self) -> dict[str, Signature]:
        return {s.name: s for s in self.functions}

    def digest(self) -> str:
        """Identifies the rules (cache entries made under other rules are not reused)."""
        fields = dataclasses.astuple(dataclasses.replace(self, source=""))
        return hashlib.sha256(repr(fields).encode()).hexdigest()[:16]

    def describe(self) -> str:
        having = [s for s in self.functions if "labels" in s.keywords]
        needing = [s.name for s in having if "labels" in s.required]
        label_rule = ("no labels" if not having else "labels optional" if not needing
                      else f"labels required by {', '.join(needing)}")
        return (f"dialect {self.name} ({self.source}): {', '.join(s.name for s in self.functions)}; {label_rule}; "
                f"collects {', '.join(self.discovery)}" + (f" except {', '.join(self.exclude)}" if self.exclude else "")
                + f"; est_time {'>= 0' if self.est_time == 'non-negative' else '> 0'}"
                + (f" and <= {self.est_time_max}" if self.est_time_max != 10**7 else "") + "; "
                + ("GPU suites name -<N>-gpu" if self.suites == "shaped" else "any suite name")
                + "; nightly=True " + ("= nightly cadence only" if self.nightly == "exclusive" else "adds nightly/weekly/release"))


def _sig(name: str, positional: tuple[str, ...], keywords: tuple[str, ...], required: tuple[str, ...]) -> Signature:
    return Signature(name, _FUNC.fullmatch(name).group(1), positional, keywords, required)  # type: ignore[union-attr]


_M_KW = ("est_time", "suite", "labels", "nightly", "disabled", "hardware", "stage", "runner_config")
_SG_KW = ("est_time", "suite", "nightly", "disabled", "stage", "runner_config")

#: the folders framework M's runner collects (``_DISCOVERY_ROOTS`` of its ci_register.py); its CPU-only ``fast``
#: folder first. A repo holding none of them is read under :data:`FAMILY_ROOT` instead
M_ROOTS = ("tests/fast", "tests/fast-gpu", "tests/e2e", "tests/ci")
#: framework M's CPU-only folder: its runner takes an unregistered file there as a CPU test and refuses a GPU
#: registration there. Only this one: a ``fast`` folder elsewhere (``tests/e2e/fast``) is an ordinary one
M_FAST = M_ROOTS[0]
#: where the registry family keeps its tests when a repo has none of its runner's own folders
FAMILY_ROOT = "tests"

#: framework M as its runner reads it today (also what a repo without a registry module gets)
M = Dialect(
    name="m",
    functions=(
        _sig("register_cuda_ci", ("est_time", "suite"), _M_KW, ("est_time", "suite", "labels")),
        _sig("register_rocm_ci", ("est_time", "suite"), _M_KW, ("est_time", "suite", "labels")),
        _sig("register_cpu_ci", ("est_time", "suite"), _M_KW, ("est_time", "suite")),
    ),
    roots=M_ROOTS,
    source="built-in profile m",
)

#: the SGLang family: many backends, no labels, every *.py under test/registered/
SGLANG = Dialect(
    name="sglang",
    functions=tuple(_sig(f"register_{b}_ci", ("est_time", "suite", "nightly", "disabled"), _SG_KW, ("est_time",))
                    for b in ("cpu", "cuda", "amd", "npu", "xpu", "musa", "mlx")),
    discovery=("*.py",),
    exclude=("conftest.py", "__init__.py"),
    roots=("test/registered",),
    est_time="non-negative",
    suites="free",
    nightly="exclusive",
    implicit_suite="",
    source="built-in profile sglang",
)

PROFILES = {"m": M, "sglang": SGLANG}


def may_define_registry(data: bytes) -> bool:
    """Whether a file's bytes can define a ``register_*_ci`` function (cheap, before ``ast``)."""
    return b"def" in data and _DEF.search(data) is not None


def signatures(source: str) -> tuple[list[Signature], list[str], list[str]]:
    """The ``register_*_ci`` functions a module defines, the est_time bounds its bodies check, and
    the functions whose signature says nothing (``*args``/``**kwargs``: any argument is accepted)."""
    tree = parse_python(source)
    out: list[Signature] = []
    bounds: list[str] = []
    opaque: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.FunctionDef) and _FUNC.fullmatch(node.name)):
            continue
        a = node.args
        bounds += _est_bounds(node)
        if a.vararg is not None or a.kwarg is not None:
            opaque.append(node.name)
            continue
        positional = [p.arg for p in a.posonlyargs + a.args]
        n_defaults = len(a.defaults)
        required = positional[: len(positional) - n_defaults] if n_defaults else list(positional)
        kwonly = [p.arg for p in a.kwonlyargs]
        required += [p for p, d in zip(kwonly, a.kw_defaults, strict=True) if d is None]
        out.append(_sig(node.name, tuple(positional), tuple(positional + kwonly), tuple(required)))
    return out, bounds, opaque


def _like(profile: Dialect, name: str) -> Signature:
    """``name`` as ``profile`` defines it, or shaped like the profile's first GPU function when it has none."""
    by_name = {s.name: s for s in profile.functions}
    model = by_name.get(name) or next(s for s in profile.functions if s.backend != "cpu")
    return _sig(name, model.positional, model.keywords, model.required)


def _est_bounds(fn: ast.FunctionDef) -> list[str]:
    """``est_time > 0`` / ``est_time >= 0`` style checks in the function body."""
    out = []
    for node in ast.walk(fn):
        if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "est_time"
                and len(node.ops) == 1 and isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value == 0):
            op = node.ops[0]
            if isinstance(op, ast.Gt | ast.LtE):
                out.append("positive")
            elif isinstance(op, ast.GtE | ast.Lt):
                out.append("non-negative")
    return out


#: the backends framework M registers
_M_BACKENDS = frozenset(s.backend for s in M.functions)


def resembles(sigs: list[Signature], opaque: tuple[str, ...] | list[str] = ()) -> Dialect:
    """The built-in profile a registry module looks like.

    Framework M's GPU functions always take ``labels`` and the SGLang family's never do (its older
    ``register_cuda_ci(est_time, suite, nightly=False, disabled=None)`` has no ``stage=`` either), so a
    module whose functions take no labels is the SGLang family's, and so is one defining a backend M
    lacks (``register_amd_ci``, ``register_npu_ci``, ...), or one whose functions take ``stage=`` or
    ``runner_config=`` (only SGLang's do) and none labels. ``opaque`` names functions taking
    ``*args``/``**kwargs``: they may take labels, so only their backends count.
    """
    if any("labels" in s.keywords for s in sigs):
        return M
    if any({"stage", "runner_config"} & set(s.keywords) for s in sigs):
        return SGLANG  # beside a wrapper: `def register_cpu_ci(*args, **kwargs): return register_cuda_ci(...)`
    backends = {s.backend for s in sigs} | {m.group(1) for n in opaque if (m := _FUNC.fullmatch(n))}
    if backends - _M_BACKENDS or (sigs and not opaque):
        return SGLANG
    return M


def derive(module: str, source: str, base: Dialect | None = None) -> tuple[Dialect, list[str]]:
    """The dialect of a framework from its registry module ``module`` (repo-relative) and source.

    ``base`` (a profile named in assets/) wins over the resemblance guess; the functions, their
    keywords and the est_time bound always come from the module itself.
    """
    try:
        sigs, bounds, opaque = signatures(source)
    except (SyntaxError, ValueError) as exc:
        profile = base or M
        return profile, [f"{module}: cannot be parsed ({exc}); using the {profile.source}"]
    if not sigs and not opaque:
        profile = base or M
        return profile, [f"{module}: defines no register_*_ci function; using the {profile.source}"]
    profile = base or resembles(sigs, opaque)
    notes = []
    if opaque:  # `def register_cuda_ci(*args, **kwargs)`: the runner's rules cannot come from it
        one = len(opaque) == 1
        notes.append(f"{module}: {', '.join(opaque)} take{'s' if one else ''} *args/**kwargs, so {'its' if one else 'their'} "
                     f"signature cannot say which arguments are allowed; checking {'it' if one else 'them'} with the "
                     f"{profile.source}'s arguments (set `dialect:` in assets/repos.yaml to pick the profile)")
        sigs = sigs + [_like(profile, name) for name in opaque]
    est = bounds[0] if len(set(bounds)) == 1 else profile.est_time
    return dataclasses.replace(profile, functions=tuple(sorted(sigs, key=lambda s: s.name)), est_time=est,
                               source=f"{module}, {profile.name} profile", module=module), notes


#: the rules a repo may override in assets/repos.yaml (``rules:``), each a Dialect field but
#: ``labels_required``, which rewrites the signatures (see :func:`with_rules`)
RULES = ("discovery", "exclude", "est_time", "est_time_max", "suites", "nightly", "labels_required",
         "default_pool_backends")


def _labels_required(d: Dialect) -> bool | None:
    gpu = [s for s in d.functions if s.backend != "cpu" and "labels" in s.keywords]
    needing = {"labels" in s.required for s in gpu}
    return needing.pop() if len(needing) == 1 else None


def _require_labels(sig: Signature, required: bool) -> Signature:
    """``sig`` with ``labels`` required (GPU functions that take it) or optional (every function)."""
    if "labels" not in sig.keywords:
        return sig
    rest = tuple(r for r in sig.required if r != "labels")
    return dataclasses.replace(sig, required=rest + ("labels",) if required and sig.backend != "cpu" else rest)


def with_rules(dialect: Dialect, rules: dict[str, object]) -> tuple[Dialect, str]:
    """``dialect`` with a repo's ``rules:`` from assets/repos.yaml applied field by field, and a note
    saying which rules were overridden and what the framework said (``nightly=exclusive (was also)``).

    ``labels_required: true`` makes ``labels`` required by every GPU register function that takes it;
    ``false`` makes it optional everywhere. Keys are checked by the schema (pipelines.core.specs_schema).
    """
    changes: dict[str, object] = {}
    said: list[str] = []
    for key in RULES:
        if key not in rules:
            continue
        value = rules[key]
        if key == "labels_required":
            was = _labels_required(dialect)
            if not any("labels" in s.keywords for s in dialect.functions):
                said.append(f"labels_required={_show(value)} (ignored: no register function here takes labels)")
                continue
            changes["functions"] = tuple(_require_labels(s, bool(value)) for s in dialect.functions)
        else:
            value = tuple(value) if isinstance(value, list | tuple) else value
            was = getattr(dialect, key)
            changes[key] = value
        said.append(f"{key}={_show(value)} (was {_show(was)})")
    if not said:
        return dialect, ""
    source = f"{dialect.source}, rules from assets/repos.yaml"
    return (dataclasses.replace(dialect, **changes, source=source),
            f"rules from assets/repos.yaml override the {dialect.name} dialect: {', '.join(said)}")


def _show(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    if value is None:
        return "per function"
    return str(value).lower() if isinstance(value, bool) else str(value)
