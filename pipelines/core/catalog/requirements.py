"""Requirements of the catalog: inferred downloads and conversions, merged with assets/ specs.

Models are keyed by the ``--local-dir`` folder name, datasets by their name. A converted
checkpoint is identified by its output folder, as in the frameworks (conversion is skipped when
the folder exists): conversions into one folder collapse into one requirement keyed
``<model>_torch_dist``, with a short hash of the folder appended only when one model is converted
into several folders. Two conversions into one folder with different output parameters are a
problem (the night would silently reuse whichever ran first); ``multinode`` and ``num_gpus_per_node``
only change how the conversion is launched, not its output (the merged requirement launches with the
most GPUs any of its tests asks for, and its identity leaves them out). The key names the folder only: what
built it (converter, argv, model) is its identity, recorded in the cache's marker and compared
before reuse (:mod:`pipelines.core.recipe`). ``assets/models.yaml`` / ``datasets.yaml`` override sources and paths, and
a repo's ``requirements:`` globs add keys for what inference cannot see.
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import functools
import hashlib
import re
import shlex
from collections.abc import Callable, Iterable, Mapping

# the rules live in asset_rules (the spec schema uses them too); the builds import them from here
from pipelines.core.asset_rules import CACHE_PATH_RULE as CACHE_PATH_RULE
from pipelines.core.asset_rules import (
    cache_path_problem,
    download_option_problem,
    download_text,
    hub_id_problem,
    under_root,
)
from pipelines.core.asset_rules import cache_relpath as cache_relpath
from pipelines.core.catalog.assemble import new_test
from pipelines.core.catalog.ids import describe_char
from pipelines.core.catalog.infer import Conversion, Download, Needs, infer_needs
from pipelines.core.catalog.resolve import module_constants
from pipelines.core.model import Problem, Requirement, Test
from pipelines.core.pyparse import parse_python
from pipelines.core.specs import RepoSpec, Specs

_ORDER = {"model": 0, "dataset": 1, "conversion": 2}


#: what a requirement's key (a download folder's name, a converted model's name) may hold: it names the
#: cached input's folder and its Dagster partition
_KEY_CHARS = re.compile(r"[A-Za-z0-9._+=@-]+")
KEY_RULE = "may only use ASCII letters, digits and ._-+=@"


@functools.lru_cache(maxsize=4096)
def _key_problem(key: str) -> str | None:
    """What in ``key`` keeps it from naming a requirement, or None; the caller says what the key is and
    :data:`KEY_RULE` (thousands of tests share a few keys: checked once each)."""
    if _KEY_CHARS.fullmatch(key) and ".." not in key:
        return None
    if not key:
        return "is empty"
    if ".." in key:
        return "contains '..'"
    return f"contains {describe_char(next(ch for ch in key if not _KEY_CHARS.fullmatch(ch)))}"


#: convert_checkpoint arguments that only change how the conversion is launched, not what it writes:
#: ``multinode`` and ``num_gpus_per_node`` (torchrun's process count; a torch_dist checkpoint loads at any
#: parallelism, and the framework skips the conversion when the folder exists, whoever wrote it)
LAUNCH_ONLY = frozenset({"multinode", "num_gpus_per_node"})


def download_params(revision: str = "", include: str = "", exclude: str = "",
                    files: str = "") -> tuple[tuple[str, str], ...]:
    """A download's ``hf download`` options (and ``files``, the file names after its repo id) as its
    requirement's params, sorted, empty ones left out: they decide which files of which revision land
    in the folder, so the cache rebuilds on a change."""
    return tuple((k, v) for k, v in (("exclude", exclude), ("files", files), ("include", include),
                                     ("revision", revision)) if v)


def output_params(c: Conversion) -> tuple[tuple[str, str], ...]:
    return tuple(p for p in c.params if p[0] not in LAUNCH_ONLY)


def launch_params(merged: list[Conversion]) -> tuple[tuple[str, str], ...]:
    """The params of one conversion requirement merged from ``merged`` (same output, first first):
    the first one's, with the most GPUs any of them asks for and multinode when any is, so the
    build's argv and GPU request do not depend on which test sorts first."""
    params = dict(merged[0].params)
    gpus = [dict(c.params).get("num_gpus_per_node", "") for c in merged]
    if all(g.isdigit() for g in gpus):  # an unusable value is the build's clear error, kept as written
        params["num_gpus_per_node"] = str(max(int(g) for g in gpus))
    if any(dict(c.params).get("multinode") == "True" for c in merged):
        params["multinode"] = "True"
    return tuple(sorted(params.items()))


def conversion_keys(conversions: list[Conversion]) -> dict[Conversion, str]:
    """A readable, stable key per output folder; hashed suffix only where one model has several."""
    folders: dict[str, set[tuple[str, str]]] = {}
    for c in conversions:
        folders.setdefault(f"{c.model}_torch_dist", set()).add((c.source_model, c.path))
    keys = {}
    for c in dict.fromkeys(conversions):
        base = f"{c.model}_torch_dist"
        if len(folders[base]) == 1:
            keys[c] = base
        else:
            keys[c] = f"{base}-{hashlib.sha256(repr((c.source_model, c.path)).encode()).hexdigest()[:6]}"
    return keys


def with_requirements(t: Test, requirements: tuple[str, ...], unresolved: tuple[str, ...]) -> Test:
    """``dataclasses.replace`` for the two fields, without its per-call introspection (10,000s of tests)."""
    if requirements == t.requirements and unresolved == t.unresolved:
        return t
    return new_test(**{**t.__dict__, "requirements": requirements, "unresolved": unresolved})


def build_requirements(
    tests: list[Test], needs: Mapping[str, Needs], spec: RepoSpec, specs: Specs | None
) -> tuple[list[Test], list[Requirement], list[Problem]]:
    """Tests with their requirement keys filled in, the requirements they use, and conflicts.

    Thousands of tests share a few :class:`Needs` objects (see :func:`infer.infer_needs`); the work
    for one depends on nothing else but what earlier tests settled for good, so it is done at its
    first test and replayed for the others: the same keys, the same unresolved notes, the same
    problems, each naming the test's own path.
    """
    problems: list[Problem] = []
    declared: dict[str, Requirement] = {}
    if specs is not None:
        for kind, table in (("model", specs.models), ("dataset", specs.datasets)):
            for key, m in table.items():
                declared[key] = Requirement(kind, key, m.source, m.path,  # type: ignore[arg-type]
                                            download_params(m.revision))
    found: dict[str, Requirement] = {}
    owner: dict[str, str] = {}
    all_conversions: list[Conversion] = []
    nothing = Needs()
    #: id of a Needs -> (the Needs, its download problems as (line, field, message)); the Needs kept alive
    download_memo: dict[int, tuple[Needs, list[tuple[int, str, str]]]] = {}
    for t in tests:
        n = needs.get(t.id, nothing)
        memo = download_memo.get(id(n))
        if memo is not None:
            # every key of n was settled in `found` at its first test: only the problems recur
            problems += [Problem(t.path, line, field, message) for line, field, message in memo[1]]
            continue
        said: list[tuple[int, str, str]] = []
        for d in n.downloads:
            why = _key_problem(d.key)
            if why:
                said.append((d.line, "prepare", f"download folder {d.path!r}: its name {why}; a download folder's "
                                                f"name {KEY_RULE} (it names the cached input); fix prepare()"))
                continue
            other = declared.get(d.key)
            if other is not None and other.kind != d.kind:
                # one key names one cached input (and Dagster partition): the declared one would replace this
                said.append((d.line, "prepare", (
                    f"{d.kind} download folder {d.path!r} has the name of the {other.kind} {d.key!r} declared in "
                    f"assets/{other.kind}s.yaml ({other.path}); a {d.kind} and a {other.kind} may not share a name "
                    f"(it names the cached input): rename the --local-dir folder, or the {other.kind}")))
                continue
            # a declared entry replaces the inferred source, folder and revision; the build would refuse these
            why = None if d.key in declared else _download_problem(d)
            if why:
                said.append((d.line, "prepare", f"{d.kind} {d.key!r}: {why}"))
                continue
            prev = found.get(d.key)
            params = download_params(d.revision, d.include, d.exclude, d.files)
            if prev is not None and (prev.kind, prev.source, prev.path, prev.params) == (d.kind, d.source, d.path, params):
                continue  # the same download as an earlier test's (the common case)
            req = declared.get(d.key) or Requirement(d.kind, d.key, d.source, d.path, params)  # type: ignore[arg-type]
            if prev is not None and d.key not in declared:
                said.append((d.line, "prepare", (
                    f"{d.kind} {d.key!r} is {download_text(d.source, params)} at {d.path} here but {prev.kind} "
                    f"{download_text(prev.source, prev.params)} at {prev.path} in {owner[d.key]}; use one source "
                    f"(and revision) per folder or declare it in assets/{prev.kind}s.yaml")))
                continue
            found.setdefault(d.key, req)
            owner.setdefault(d.key, t.id)
        download_memo[id(n)] = (n, said)
        problems += [Problem(t.path, line, field, message) for line, field, message in said]
        all_conversions += n.conversions  # keys depend on the distinct conversions only
    conv_key = conversion_keys(all_conversions)
    #: each download's folder (a test's over a declared one), to find a conversion into it
    by_path = {r.path: r for r in (*declared.values(), *found.values())}

    globs = spec.requirements
    spec_file = f"{specs.root}/repos.yaml" if specs is not None else "assets/repos.yaml"
    where = f"repos.{spec.name}.requirements"
    lines = getattr(spec, "requirement_lines", None) or {}
    used_globs: set[str] = set()
    out_tests: list[Test] = []
    used: dict[str, Requirement] = {}
    first_writer: dict[str, tuple[Conversion, str]] = {}
    #: id of a Needs -> (the Needs, its keys, unresolved notes and problems as (line, field, message), and
    #: the first two as a test holds them)
    memo2: dict[int, tuple[Needs, list[str], list[str], list[tuple[int, str, str]], tuple[str, ...],
                           tuple[str, ...]]] = {}
    for t in tests:
        n = needs.get(t.id, nothing)
        memo = memo2.get(id(n))
        if memo is None:
            keys, unresolved, said = _conversions(n, found, declared, by_path, conv_key, used, first_writer, t.id)
            for key in keys:
                if key in found:
                    used[key] = found[key]
            memo = memo2[id(n)] = (n, keys, unresolved, said, tuple(dict.fromkeys(keys)), tuple(dict.fromkeys(unresolved)))
        # later tests of n: what it adds to `used` and `first_writer` is settled, only its answer recurs
        _, keys, unresolved, said, held_keys, held_unresolved = memo
        if said:
            problems += [Problem(t.path, line, field, message) for line, field, message in said]
        if t.unresolved:
            held_unresolved = tuple(dict.fromkeys([*t.unresolved, *unresolved]))
        if globs:
            keys = list(keys)
            for pattern, extra in globs.items():
                if fnmatch.fnmatchcase(t.id, pattern) or fnmatch.fnmatchcase(t.path, pattern):
                    used_globs.add(pattern)
                    for key in extra:
                        req = used.get(key) or found.get(key) or declared.get(key)
                        if req is None:
                            problems.append(Problem(spec_file, lines.get(pattern, 1), where,
                                                    f"{pattern}: unknown requirement {key!r}; "
                                                                         "declare it in assets/models.yaml or datasets.yaml"))
                            continue
                        used[key] = req
                        keys.append(key)
            for key in keys:
                if key in found:
                    used[key] = found[key]
            held_keys = tuple(dict.fromkeys(keys))
        out_tests.append(with_requirements(t, held_keys, held_unresolved))
    for pattern in globs:
        if pattern not in used_globs:
            problems.append(Problem(spec_file, lines.get(pattern, 1), where,
                                    f"{pattern}: matches no test id; fix or remove the glob"))
    problems = list(dict.fromkeys(problems))
    by_key: dict[str, list[Conversion]] = {}
    for c in dict.fromkeys(all_conversions):
        by_key.setdefault(conv_key[c], []).append(c)
    for key, (first, _test) in first_writer.items():
        if key in used and used[key].kind == "conversion":  # merged: the same output (a conflict is a problem)
            same = [c for c in by_key.get(key, ()) if output_params(c) == output_params(first)]
            used[key] = dataclasses.replace(used[key], params=launch_params([first, *same]))
    reqs = sorted(used.values(), key=lambda r: (_ORDER[r.kind], r.key))
    return out_tests, reqs, problems


def _download_problem(d: Download) -> str | None:
    """Why an inferred download could never be built into the cache, or None."""
    bad = cache_path_problem(d.path)
    if bad:
        return f"download folder {bad}"
    bad = hub_id_problem(d.source) or next(
        (why for option, value in download_params(d.revision, d.include, d.exclude, d.files)
         if (why := download_option_problem(option, value))), None)
    return f"{bad}; fix prepare() or declare it in assets/{d.kind}s.yaml" if bad else None


def _conversions(n: Needs, found: dict[str, Requirement], declared: dict[str, Requirement],
                 by_path: dict[str, Requirement], conv_key: dict[Conversion, str], used: dict[str, Requirement],
                 first_writer: dict[str, tuple[Conversion, str]], test_id: str
                 ) -> tuple[list[str], list[str], list[tuple[int, str, str]]]:
    """The keys and unresolved notes ``n`` gives a test, and its problems as (line, field, message);
    records the requirements it uses and the first writer of each conversion folder."""
    keys: list[str] = [d.key for d in n.downloads if d.key in found]
    unresolved = list(n.unresolved)
    said: list[tuple[int, str, str]] = []
    for c in n.conversions:
        key = conv_key[c]
        why = _key_problem(key)
        if why:
            said.append((c.line, "convert_checkpoint", f"model name {c.model!r} {why}; a model name {KEY_RULE} "
                                                        "(it names the converted checkpoint's folder)"))
            continue
        why = cache_path_problem(c.path)
        if why:
            said.append((c.line, "convert_checkpoint", f"output folder {why}; fix dir_dst"))
            continue
        extra = dict(c.params).get("extra_args", "")
        try:
            shlex.split(extra)
        except ValueError as exc:
            said.append((c.line, "convert_checkpoint", f"extra_args {extra!r} cannot be split into words as a shell "
                                                        f"would ({exc}); fix its quotes"))
            continue
        # one folder is one cached input: the download would replace the conversion, or each night both rebuild
        # it (the key alone misses it where a model's conversions into several folders get hashed keys); one
        # name is one Dagster partition
        clash = by_path.get(c.path) or found.get(key) or declared.get(key)
        if clash is not None:
            same = "that folder" if clash.path == c.path else f"the name of its folder {c.path}"
            said.append((c.line, "convert_checkpoint", (
                f"converts into {c.path}, but the {clash.kind} download {clash.key!r} ({download_text(clash.source, clash.params)} "
                f"at {clash.path}) has {same}: one folder, one input; give the conversion another dir_dst, or "
                "download into another folder")))
            continue
        source = found.get(c.source_model) or declared.get(c.source_model)
        if source is None or source.kind != "model":
            # nothing would build it: the night failed the conversion (and the Dagster graph did not load)
            what = "is neither downloaded in prepare() nor declared in assets/models.yaml" if source is None else \
                f"is a {source.kind}, not a model"
            said.append((c.line, "convert_checkpoint", (
                f"converts model {c.source_model!r}, which {what}; download it in prepare() (hf download ... "
                f"--local-dir /root/models/{c.source_model}) or declare it in assets/models.yaml")))
            continue
        used[source.key] = source
        if source.key not in keys:
            keys.append(source.key)
        prev = first_writer.setdefault(key, (c, test_id))
        if prev[0] != c and output_params(prev[0]) != output_params(c):
            theirs, ours = dict(output_params(prev[0])), dict(output_params(c))
            diff = ", ".join(f"{k}={ours.get(k)!r} vs {theirs.get(k)!r}" for k in sorted(set(ours) | set(theirs))
                             if ours.get(k) != theirs.get(k))
            said.append((c.line, "convert_checkpoint", (
                f"converts into {c.path} like {prev[1]} but with other parameters ({diff}); the night would "
                "reuse whichever ran first: give one of them another dir_dst")))
        elif key not in used:
            used[key] = Requirement("conversion", key, c.source_model, c.path, c.params, (c.source_model,))
        keys.append(key)
    return keys, unresolved, said


def outside_root_problems(tests: Iterable[Test], requirements: Iterable[Requirement],
                          read: Callable[[str], str | None]) -> list[Problem]:
    """Located problems for the inputs outside ``/root`` that ``tests`` need, for a deployment that shows
    its tests only ``/root`` (the local one: repos.yaml's env ``{cache}`` maps ``/root`` onto the cache):
    such an input is built into the cache, but the test would look for it at the real ``/dev/shm/...``
    and fail as a test failure. ``read``: a test file's text by its repo-relative path (None: unreadable);
    each problem is on the line of the call that asks for the input, or the test's registration line."""
    outside = {r.key: r for r in requirements if not under_root(r.path)}
    problems: list[Problem] = []
    needs_of: dict[str, Needs] = {}
    for t in tests:
        wanted = [outside[k] for k in t.requirements if k in outside]
        if not wanted:
            continue
        if t.path not in needs_of:
            text = read(t.path)
            try:
                tree = parse_python(text or "", t.path)
            except (SyntaxError, ValueError):
                tree = ast.parse("")
            needs_of[t.path] = infer_needs(tree, module_constants(tree))
        n = needs_of[t.path]
        for r in wanted:
            line, field = t.line, "requirements"
            for c in n.conversions:
                if c.path == r.path:
                    line, field = c.line, "convert_checkpoint"
            for d in n.downloads:
                if d.path == r.path:
                    line, field = d.line, "prepare"
            what = "output folder" if r.kind == "conversion" else f"{r.kind} folder"
            fix = "a dir_dst under /root (the default, /root)" if r.kind == "conversion" else "a folder under /root"
            problems.append(Problem(t.path, line, field, (
                f"{what} {r.path} is outside /root: the local deployment builds it in its cache but gives tests only "
                "/root paths (repos.yaml env {cache} stands for /root), so this test would not find it there; "
                f"use {fix}, or run the test on a Kubernetes deployment (its pods mount the input at {r.path})")))
    return list(dict.fromkeys(problems))
