"""The schema of the ``assets/`` YAML files, as pydantic models, and how its errors read.

pydantic checks every key, type and range in one pass (unknown keys, ``roots: [1, 2]``,
``floor_s: 0``, ``policy: bogus``); :func:`validate` turns each of its errors into a located
:class:`Problem` (``file:line: field: what; how to fix``) so a CI maintainer never sees a traceback.
"""

from __future__ import annotations

import datetime
import difflib
import posixpath
import re
import string
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from pipelines.core.asset_rules import REVISION, cache_path_problem, hub_id_problem
from pipelines.core.calibrate.policies import DEFAULTS as POLICY_DEFAULTS
from pipelines.core.model import MAX_EST_TIME_S, Problem

#: what a repo's `env:` values may refer to (filled in per night by pipelines.night)
ENV_PLACEHOLDERS = ("cache", "repo", "home", "hub")
#: what the words of checkpoints.yaml's conversion command may refer to (filled per conversion by
#: pipelines.storage.cache.conversion_command)
CONVERSION_PLACEHOLDERS = ("python", "model_path", "output", "megatron_model_type", "num_gpus_per_node", "extra_args")
FORMATS = ("registry", "template", "auto")
POLICIES = tuple(POLICY_DEFAULTS)


def env_problem(value: str) -> str | None:
    """Why an env template cannot be filled, or None."""
    if nul_problem(value):
        return nul_problem(value)
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(value) if name is not None]
    except ValueError as exc:
        return f"{exc}; write a literal brace as {{{{ or }}}}"
    unknown = [n for n in names if n not in ENV_PLACEHOLDERS]
    if unknown:
        return (f"unknown placeholder {{{unknown[0]}}}; use {', '.join('{' + p + '}' for p in ENV_PLACEHOLDERS)}, "
                "and write a literal brace as {{ or }}")
    return None


def nul_problem(value: str) -> str | None:
    """A NUL in an environment value: Popen refuses it at night, for every test or build given it."""
    return "holds a NUL character (\\0), which no process environment can carry; remove it" if "\0" in value else None


def _checked(problem: Callable[[str], str | None]) -> AfterValidator:
    """A pydantic validator that refuses a value ``problem`` finds fault with, in its words."""
    def check(value: str) -> str:
        bad = problem(value)
        if bad:
            raise ValueError(bad)
        return value
    return AfterValidator(check)


EnvValue = Annotated[str, _checked(env_problem)]

#: a name every launcher takes: Kubernetes 1.31 refuses a leading digit (the whole pod, on every node),
#: a shell cannot export a name with '-', '.' or a space
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an environment variable of a test or build, or None."""
    if _ENV_NAME.fullmatch(name):
        return None
    return (f"{name!r} is not a valid environment variable name; use ASCII letters, digits and '_', "
            "not starting with a digit (e.g. MINIRL_FAIL)")


EnvName = Annotated[str, _checked(env_name_problem)]
Name = Annotated[str, Field(min_length=1)]
Hardware = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TimeoutModel(_Strict):
    floor_s: int = Field(1800, gt=0, le=MAX_EST_TIME_S)
    factor: float = Field(1.25, ge=1, le=10)


class CalibrationModel(_Strict):
    policy: Literal["bucket125", "p90", "median"] = "bucket125"
    max_samples: int | None = Field(None, gt=0)
    window_days: float | None = Field(None, gt=0)
    min_samples: int = Field(1, ge=1)
    factor: float = Field(1.25, ge=1, le=10)
    raise_on_timeout: bool = False
    max_est_time_s: int = Field(MAX_EST_TIME_S, gt=0, le=MAX_EST_TIME_S)
    max_step_factor: float = Field(4.0, ge=1)
    ceiling_s: float | None = Field(None, gt=0)
    outlier_factor: float = Field(10.0, gt=1)
    accept: list[Name] = []

    @model_validator(mode="after")
    def _params_of_the_policy(self) -> CalibrationModel:
        known = POLICY_DEFAULTS[self.policy]
        wrong = sorted(k for k in self.model_fields_set - {"policy"} if k not in known)
        if wrong:
            raise ValueError(f"{wrong[0]} is not a parameter of policy {self.policy!r}; "
                             f"remove it or use one of {', '.join(known)}")
        return self


def _requirement_keys(value: Any) -> Any:
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"expected a list of requirement keys, got {value!r}")
    return value


_MODULE_PATH = re.compile(r"(?:[A-Za-z0-9_-][A-Za-z0-9._-]*/)*[A-Za-z0-9_-][A-Za-z0-9._-]*\.py")


def _registry_module(value: str) -> str:
    if value and not _MODULE_PATH.fullmatch(value):
        raise ValueError(f"{value!r} is not the path of a .py file inside the repository; write it relative to the "
                         "repo's path, e.g. fw/ci_register.py (no leading /, no '..' or hidden folders)")
    return value


def _root(value: str) -> str:
    """A test root as a shell user writes it (``.``/``/`` the whole checkout, ``./tests``), refused at
    load when it leaves the repository: discovery would only say so as a catalog problem, mid-listing."""
    if posixpath.normpath(value.strip("/") or ".").split("/")[0] == "..":
        raise ValueError(f"{value!r} leaves the repository; write a folder of the repository relative to its "
                         "path, e.g. tests or test/registered")
    return value


class FlakyModel(_Strict):
    window_nights: int = Field(14, ge=1)
    min_flips: int = Field(2, ge=1)
    quarantine_after: int = Field(3, ge=1)
    release_after: int = Field(5, ge=1)
    lapse_after: int = Field(5, ge=1)
    run_quarantined: bool = True


class RulesModel(_Strict):
    """A repo's overrides of its registry dialect's rules (pipelines.core.catalog.dialect.with_rules).

    Only the keys written apply; the defaults here are never used.
    """

    #: file-name globs the runner collects under the roots, and file names it skips
    discovery: list[Annotated[str, Field(pattern=r"^[^/]+$")]] = Field(["test_*.py"], min_length=1)
    exclude: list[Annotated[str, Field(pattern=r"^[^/]+$")]] = []
    est_time: Literal["positive", "non-negative"] = "positive"
    est_time_max: int = Field(10**7, gt=0, le=10**7)
    #: shaped: GPU suites must say -<N>-gpu; free: any name, one GPU when it names no count
    suites: Literal["shaped", "free"] = "shaped"
    #: also: nightly=True adds a test to nightly/weekly/release; exclusive: the nightly cadence runs only those
    nightly: Literal["also", "exclusive"] = "also"
    labels_required: bool = False
    #: backends whose tests naming no hardware run on the default pool
    default_pool_backends: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_]*$")]] = ["cuda", "rocm"]


class RepoModel(_Strict):
    path: Name
    format: Literal["registry", "template", "auto"] = "auto"
    roots: list[Annotated[str, Field(min_length=1), AfterValidator(_root)]] = Field(["tests"], min_length=1)
    implicit_cpu_dirs: list[Name] = []
    template: str = ""
    default_est_time: int = Field(1800, gt=0, le=MAX_EST_TIME_S)
    default_num_gpus: int = Field(8, gt=0, le=64)
    timeout: TimeoutModel = TimeoutModel()
    calibration: CalibrationModel = CalibrationModel()
    env: dict[EnvName, EnvValue] = {}
    requirements: dict[str, Annotated[list[str], BeforeValidator(_requirement_keys)]] = {}
    hub: str = ""
    #: registry dialect profile (auto: from the framework's registry module) and implicit CPU suite name
    dialect: Literal["auto", "m", "sglang"] = "auto"
    implicit_cpu_suite: str = Field("", pattern=r"^([A-Za-z0-9][A-Za-z0-9._-]*)?$")
    #: overrides of the dialect's rules, field by field
    rules: RulesModel = RulesModel()
    #: flaky-test rules (pipelines.core.flaky.FlakyRules)
    flaky: FlakyModel = FlakyModel()
    #: the repo's own registry module, when several files define register_*_ci (repo-relative .py path)
    registry_module: Annotated[str, AfterValidator(_registry_module)] = ""

    @model_validator(mode="after")
    def _template_needs_template_format(self) -> RepoModel:
        if self.template and self.format == "registry":
            raise ValueError("template is set but format is registry; set format: template (or auto), "
                             "or remove template")
        return self


_REPO_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _repo_name(name: str) -> str:
    """A repo's name names its state (``estimates/<repo>.json``, ``quarantine/<repo>.json``): no '/',
    no leading '.', no space."""
    if not _REPO_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a usable repo name; use letters, digits, '-', '_' and '.', starting with "
                         "a letter or digit (e.g. megatron-lm): it names the repo's state files")
    return name


class ReposFile(_Strict):
    default: str | None = None
    repos: dict[Annotated[str, AfterValidator(_repo_name)], RepoModel] = {}

    @model_validator(mode="after")
    def _default_is_known(self) -> ReposFile:
        if self.default is not None and self.default not in self.repos:
            raise ValueError(f"default repo {self.default!r} is not under repos:; use one of {sorted(self.repos)}")
        return self


#: a Kubernetes quantity as pod specs take it: "20", "0.5", "500m", "200Gi"
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?$"
#: an object name that is also a label value: what a LocalQueue can be called and a pod's label can say
_QUEUE_NAME = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$"


#: Kubernetes label rules (apimachinery's IsQualifiedName / IsValidLabelValue): a pool's node_selector
#: and tolerations go into every pod, and the API server refuses the whole pod (422) for one bad one
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_RULE = "at most 63 letters, digits, '-', '_' or '.', a letter or digit at both ends"


def label_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a Kubernetes label key (``[prefix/]name``), or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix or (prefix == "" and key.startswith("/")):
        return f"{key!r} is not a label key; write [prefix/]name with one '/', e.g. nvidia.com/gpu.product"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return (f"{key!r} is not a label key: its prefix {prefix!r} must be a DNS subdomain (lowercase letters, "
                "digits, '-' and '.', at most 253), e.g. nvidia.com")
    if len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return f"{key!r} is not a label key: its name {name!r} must be {_LABEL_RULE}"
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be a Kubernetes label value (may be empty), or None."""
    if value and (len(value) > 63 or not _LABEL_NAME.fullmatch(value)):
        return (f"{value!r} is not a label value; it must be {_LABEL_RULE} (the node's label as "
                "`kubectl get nodes --show-labels` prints it, e.g. NVIDIA-H200)")
    return None


LabelKey = Annotated[str, _checked(label_key_problem)]
LabelValue = Annotated[str, _checked(label_value_problem)]


class TolerationModel(_Strict):
    """One pod toleration, checked as the Kubernetes 1.31 API server checks it."""

    key: Annotated[str, _checked(lambda k: label_key_problem(k) if k else None)] = ""
    #: "" is Equal, as the API server reads it
    operator: Literal["Exists", "Equal", ""] = "Equal"
    value: LabelValue = ""
    #: "" (or none) tolerates every effect
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = None
    tolerationSeconds: int | None = None  # noqa: N815 - the pod spec's own field name

    @model_validator(mode="after")
    def _consistent(self) -> TolerationModel:
        if self.operator == "Exists" and self.value:
            raise ValueError(f"operator Exists takes no value (got {self.value!r}); remove value, or use "
                             "operator: Equal")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration without key must say operator: Exists (it then tolerates every taint)")
        if self.tolerationSeconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect: NoExecute; remove it or set that effect")
        return self


def _toleration_as_written(t: TolerationModel) -> dict[str, Any]:
    """The checked toleration as the pod spec takes it: the keys the file gave, nothing added."""
    return t.model_dump(exclude_unset=True)


class PoolModel(_Strict):
    nodes: int = Field(gt=0, le=10_000)
    gpus_per_node: int = Field(gt=0, le=64)
    hardware: list[Hardware] = []
    image: str = ""
    node_selector: dict[LabelKey, LabelValue] = {}
    #: each checked by TolerationModel, kept as the dict the pod spec takes
    tolerations: list[Annotated[TolerationModel, AfterValidator(_toleration_as_written)]] = []
    shm_size: str = Field("32Gi", pattern=_QUANTITY)
    priority_class: str = ""
    #: the Kueue LocalQueue, written into the pods' kueue.x-k8s.io/queue-name label
    queue: str = Field("", max_length=63, pattern=_QUEUE_NAME)
    #: requests per GPU (a 0-GPU pod gets one GPU's share): pods are never BestEffort
    cpu_per_gpu: str = Field("4", pattern=r"^[0-9]+(\.[0-9]+)?m?$")
    memory_per_gpu: str = Field("32Gi", pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")
    #: the digest every pod of a night runs (``crane digest IMAGE``)
    image_digest: str = Field("", pattern=r"^(sha256:[0-9a-f]{64})?$")
    #: argv that prints the image's current digest (e.g. ["crane", "digest", IMAGE]); a change under
    #: the same tag starts a backfill of the pool's tests
    image_digest_command: list[str] = []
    #: GPU driver / CUDA version where nvidia-smi and node labels cannot tell (e.g. "550.54.15/12.4")
    driver: str = ""

    @model_validator(mode="after")
    def _aliases_once(self) -> PoolModel:
        seen = [h for i, h in enumerate(self.hardware) if h in self.hardware[:i]]
        if seen:
            raise ValueError(f"hardware {seen[0]!r} is listed twice; list each suite hardware name once")
        return self


class CacheModel(_Strict):
    """How the deployment's input cache checks and builds entries (``deployments.<name>.cache``)."""

    #: "full" hashes every file before reuse (about 190 MB/s), "size" checks names and sizes only
    verify: Literal["full", "size"] = "full"
    #: a download or conversion running longer than this is stuck and killed
    build_timeout_s: int = Field(4 * 3600, ge=60, le=MAX_EST_TIME_S)


class DeploymentModel(_Strict):
    launcher: Literal["local", "kubernetes"] = "local"
    pools: dict[Hardware, PoolModel] = Field(min_length=1)
    namespace: str = "nightly-e2e"
    storage: Literal["local", "s3"] = "local"
    s3_bucket: str = ""
    s3_prefix: str = ""
    cache_pvc: str = ""
    hf_token_secret: str = ""
    max_infra_retries: int = Field(2, ge=0, le=10)
    unschedulable_wait_s: int = Field(1800, ge=0, le=MAX_EST_TIME_S)
    cordon_bad_nodes: bool = False
    startup_wait_s: int = Field(900, ge=0, le=MAX_EST_TIME_S)
    #: suite hardware this deployment knowingly never runs (e.g. a ROCm suite on an NVIDIA fleet):
    #: its tests are reported as not run here, not as unplanned problems
    skip_hardware: list[Hardware] = []
    cache: CacheModel = CacheModel()
    #: the logs of this many nights (the newest, the starting one counted) stay under <home>/logs/; 0 keeps all
    keep_log_nights: int = Field(30, ge=0, le=100_000)

    @model_validator(mode="after")
    def _consistent(self) -> DeploymentModel:
        if self.storage == "s3" and not self.s3_bucket:
            raise ValueError("storage is s3 but s3_bucket is empty; name the bucket or use storage: local")
        owner: dict[str, str] = {}
        for name, pool in self.pools.items():
            for hw in pool.hardware or [name]:
                if hw in owner:
                    raise ValueError(f"pools {owner[hw]!r} and {name!r} both run hardware {hw!r}; "
                                     "a suite's hardware must map to one pool")
                owner[hw] = name
        return self


class ClusterFile(_Strict):
    default: str = "local"
    deployments: dict[str, DeploymentModel] = {}

    @model_validator(mode="after")
    def _default_is_known(self) -> ClusterFile:
        if self.default not in self.deployments:
            raise ValueError(f"default deployment {self.default!r} is not under deployments:; "
                             f"use one of {sorted(self.deployments)}")
        return self


class ModelEntry(_Strict):
    #: refused here as the builds would refuse it: a declared entry replaces what prepare() says, so the
    #: catalog's check of inferred downloads never sees it
    source: Annotated[str, _checked(hub_id_problem)]
    path: Annotated[str, _checked(cache_path_problem)]
    #: ``hf download --revision``: a branch, tag or commit (never an option)
    revision: Annotated[str, Field(pattern=REVISION.pattern)] | None = None


class ModelsFile(_Strict):
    models: dict[str, ModelEntry] = {}


class DatasetsFile(_Strict):
    datasets: dict[str, ModelEntry] = {}


def conversion_word_problem(word: str) -> str | None:
    """Why one word of the conversion command cannot be filled, or None: said when the specs load,
    not after a night has downloaded the models."""
    names = ", ".join("{" + p + "}" for p in CONVERSION_PLACEHOLDERS)
    try:
        unknown = [n for _, n, _, _ in string.Formatter().parse(word) if n is not None and n not in
                   CONVERSION_PLACEHOLDERS]
        if not unknown:
            word.format(**dict.fromkeys(CONVERSION_PLACEHOLDERS, ""))
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        return f"{exc}; use {names}, and write a literal brace as {{{{ or }}}}"
    if unknown:
        return f"unknown placeholder {{{unknown[0]}}}; use {names}, and write a literal brace as {{{{ or }}}}"
    return nul_problem(word)


def conversion_env_problem(value: str) -> str | None:
    """A conversion env value is passed as written; one written for the command's placeholder filling
    (``{output}``, a brace doubled as ``{{``) would reach the converter as that text, so it is refused."""
    bad = nul_problem(value)
    if bad:
        return bad
    named = next((p for p in CONVERSION_PLACEHOLDERS if "{" + p + "}" in value), None)
    if named:
        return (f"{{{named}}} is not filled in env (values are passed as written; only the command's words "
                f"fill placeholders): pass it to the converter as a command argument")
    if "{{" in value:  # never in JSON (an object's first member is a key); a brace escaped for str.format
        return ("'{{' reaches the converter as written (env values fill no placeholders); write one brace "
                "here, e.g. '{\"a\": {\"b\": 1}}'")
    return None


class ConversionModel(_Strict):
    command: list[Annotated[str, _checked(conversion_word_problem)]] = Field(min_length=1)
    #: passed to the converter as written (no placeholders)
    env: dict[EnvName, Annotated[str, _checked(conversion_env_problem)]] = {}


class CheckpointsFile(_Strict):
    conversion: ConversionModel | None = None


# --- errors -------------------------------------------------------------------------------------

_KINDS = {
    "int_type": ("a whole number", "write a whole number"), "float_type": ("a number", "write a number"),
    "string_type": ("text", "quote the value"), "bool_type": ("true or false", "write true or false"),
    "list_type": ("a list", "write a YAML list, e.g. [a, b]"),
    "dict_type": ("a mapping", "write key: value pairs"), "model_type": ("a mapping", "write key: value pairs"),
    "model_attributes_type": ("a mapping", "write key: value pairs"),
    "int_from_float": ("a whole number", "write a whole number"),
}


def _got(value: Any) -> str:
    """The value a key was given and what it is, in the words of the file, never the YAML loader's class
    (``LineList``): ``a list ['h200']``, ``text 'two'``, ``true``, ``an empty value``."""
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return str(value).lower()
    for kind, said in ((int, "a whole number"), (float, "a number"), (str, "text"), (list, "a list"),
                       (dict, "a mapping"), (datetime.date, "a date")):
        if isinstance(value, kind):
            return f"{said} {value!r}"
    return repr(value)


def _unwrap(tp: Any) -> Any:
    """The model inside ``X | None``, ``dict[str, X]``, ``list[X]`` or ``Annotated[X, ...]``."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return next((_unwrap(a) for a in typing.get_args(tp) if a is not type(None)), tp)
    return tp


def _model_at(model: Any, loc: tuple) -> Any:
    for part in loc:
        model = _unwrap(model)
        if isinstance(model, type) and issubclass(model, BaseModel):
            field = model.model_fields.get(str(part))
            if field is None:
                return None
            model = field.annotation
        elif typing.get_origin(model) in (dict, list):
            model = typing.get_args(model)[-1]
        else:
            return None
    model = _unwrap(model)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


_PATTERN_HINTS = {
    _QUANTITY: "write a Kubernetes quantity such as 20, 500m or 200Gi",
    r"^(sha256:[0-9a-f]{64})?$": "write sha256: and the 64 hex digits `crane digest IMAGE` prints",
    r"^[a-z0-9][a-z0-9_.-]*$": "use the hardware part of suite names (lowercase letters, digits, '-', '_', '.')",
}
#: fields whose pattern mismatch reads better said in words than as the regex
_FIELD_HINTS = {
    "queue": "is not a Kueue LocalQueue name; use the LocalQueue's name (lowercase letters, digits, '-' and '.', "
             "at most 63 characters, a letter or digit at both ends, e.g. h200-nightly)",
}


def _message(err: dict, root_model: type[BaseModel]) -> str:
    kind, value, loc = err["type"], err.get("input"), err["loc"]
    if kind == "extra_forbidden":
        parent = _model_at(root_model, loc[:-1])
        known = list(parent.model_fields) if parent else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown key; {hint}known keys: {', '.join(known)}; fix the spelling or remove it"
    if kind == "missing":
        return "required key is missing; add it"
    if kind in _KINDS:
        what, fix = _KINDS[kind]
        return f"expected {what}, got {_got(value)}; {fix}"
    ctx = err.get("ctx", {})
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {value!r}; pick one of those"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[kind]
        bound = next(iter(ctx.values()))
        bound = f"{bound:g}" if isinstance(bound, int | float) else bound
        return f"must be {op} {bound}, got {value!r}; fix the value"
    if kind in ("string_pattern_mismatch", "string_too_long") and loc and loc[-1] in _FIELD_HINTS:
        return f"{value!r} {_FIELD_HINTS[str(loc[-1])]}"
    if kind == "string_pattern_mismatch":
        return f"{value!r} does not match {ctx.get('pattern')}; {_PATTERN_HINTS.get(ctx.get('pattern'), 'fix the value')}"
    if kind in ("too_short", "string_too_short"):
        return "must not be empty; give at least one value"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    return f"{err['msg']}; got {value!r}"


def _line(raw: Any, loc: tuple) -> int:
    """The line of the deepest key of ``loc`` that the YAML loader recorded."""
    line, node = 1, raw
    for part in loc:
        lines = getattr(node, "lines", None)
        if isinstance(node, dict) and lines is not None and part in node:
            line, node = lines.get(part, line), node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node) and lines is not None:
            line, node = lines[part], node[part]
        else:
            break
    return line


def validate(model: type[BaseModel], raw: Any, path: Path) -> tuple[Any, list[Problem]]:
    """``raw`` (from the line-tracking loader) as ``model``, or the located problems."""
    try:
        return model.model_validate(raw if raw is not None else {}), []
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            loc = tuple(p for p in err["loc"] if p != "[key]")
            where = ".".join(str(p) for p in loc) or model.__name__.removesuffix("File").lower()
            problems.append(Problem(str(path), _line(raw, loc), where, _message(err, model)))
        return None, problems
