"""Requirements of the catalog: inferred downloads and conversions, merged with assets/ specs.

Models are keyed by the ``--local-dir`` folder name, datasets by their name; identical conversions
(same model, output path and parameters) in many tests collapse into one requirement keyed
``<model>_torch_dist``, with a short parameter hash appended only when one model is converted in
several different ways. ``assets/models.yaml`` / ``datasets.yaml`` override sources and paths, and
a repo's ``requirements:`` globs add keys for what inference cannot see.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
from collections.abc import Mapping

from pipelines.core.catalog.ids import variant_problem
from pipelines.core.catalog.infer import Conversion, Needs
from pipelines.core.model import Problem, Requirement, Test
from pipelines.core.specs import RepoSpec, Specs

_ORDER = {"model": 0, "dataset": 1, "conversion": 2}


def _key_problem(key: str) -> str | None:
    if "/" in key:
        return "contains '/'"
    return variant_problem(key)


def conversion_keys(conversions: list[Conversion]) -> dict[Conversion, str]:
    """A readable, stable key per distinct conversion; hashed suffix only where names collide."""
    by_base: dict[str, list[Conversion]] = {}
    for c in dict.fromkeys(conversions):
        by_base.setdefault(f"{c.model}_torch_dist", []).append(c)
    keys = {}
    for base, group in by_base.items():
        for c in group:
            if len(group) == 1:
                keys[c] = base
            else:
                digest = hashlib.sha256(repr((c.source_model, c.path, c.params)).encode()).hexdigest()[:6]
                keys[c] = f"{base}-{digest}"
    return keys


def build_requirements(
    tests: list[Test], needs: Mapping[str, Needs], spec: RepoSpec, specs: Specs | None
) -> tuple[list[Test], list[Requirement], list[Problem]]:
    """Tests with their requirement keys filled in, the requirements they use, and conflicts."""
    problems: list[Problem] = []
    declared: dict[str, Requirement] = {}
    if specs is not None:
        for kind, table in (("model", specs.models), ("dataset", specs.datasets)):
            for key, m in table.items():
                declared[key] = Requirement(kind, key, m.source, m.path)  # type: ignore[arg-type]
    found: dict[str, Requirement] = {}
    owner: dict[str, str] = {}
    all_conversions: list[Conversion] = []
    for t in tests:
        n = needs.get(t.id, Needs())
        for d in n.downloads:
            why = _key_problem(d.key)
            if why:
                problems.append(Problem(t.path, 1, "prepare", f"download folder {d.path!r} {why}; it cannot be a key"))
                continue
            req = declared.get(d.key) or Requirement(d.kind, d.key, d.source, d.path)  # type: ignore[arg-type]
            prev = found.get(d.key)
            if prev is not None and (prev.kind, prev.source, prev.path) != (d.kind, d.source, d.path) \
                    and d.key not in declared:
                problems.append(Problem(t.path, 1, "prepare", (
                    f"{d.kind} {d.key!r} is {d.source} at {d.path} here but {prev.kind} {prev.source} at {prev.path} "
                    f"in {owner[d.key]}; use one source per folder or declare it in assets/{prev.kind}s.yaml")))
                continue
            found.setdefault(d.key, req)
            owner.setdefault(d.key, t.id)
        all_conversions += n.conversions
    conv_key = conversion_keys(all_conversions)

    globs = spec.requirements
    spec_file = f"{specs.root}/repos.yaml" if specs is not None else "assets/repos.yaml"
    where = f"repos.{spec.name}.requirements"
    used_globs: set[str] = set()
    out_tests: list[Test] = []
    used: dict[str, Requirement] = {}
    for t in tests:
        n = needs.get(t.id, Needs())
        keys: list[str] = [d.key for d in n.downloads if d.key in found]
        unresolved = list(t.unresolved) + list(n.unresolved)
        for c in n.conversions:
            key = conv_key[c]
            why = _key_problem(key)
            if why:
                problems.append(Problem(t.path, 1, "convert_checkpoint", f"model name {c.model!r} {why}"))
                continue
            source = found.get(c.source_model) or declared.get(c.source_model)
            if source is None:
                unresolved.append(f"unresolved: model {c.source_model} for convert_checkpoint is neither downloaded "
                                  "in prepare() nor declared in assets/models.yaml")
            else:
                used[source.key] = source
                if source.key not in keys:
                    keys.append(source.key)
            used[key] = Requirement("conversion", key, c.source_model, c.path, c.params, (c.source_model,))
            keys.append(key)
        for pattern, extra in globs.items():
            if fnmatch.fnmatchcase(t.id, pattern) or fnmatch.fnmatchcase(t.path, pattern):
                used_globs.add(pattern)
                for key in extra:
                    req = used.get(key) or found.get(key) or declared.get(key)
                    if req is None:
                        problems.append(Problem(spec_file, 1, where, f"{pattern}: unknown requirement {key!r}; "
                                                                     "declare it in assets/models.yaml or datasets.yaml"))
                        continue
                    used[key] = req
                    keys.append(key)
        for key in keys:
            if key in found:
                used[key] = found[key]
        out_tests.append(dataclasses.replace(t, requirements=tuple(dict.fromkeys(keys)),
                                             unresolved=tuple(dict.fromkeys(unresolved))))
    for pattern in globs:
        if pattern not in used_globs:
            problems.append(Problem(spec_file, 1, where, f"{pattern}: matches no test id; fix or remove the glob"))
    problems = list(dict.fromkeys(problems))
    reqs = sorted(used.values(), key=lambda r: (_ORDER[r.kind], r.key))
    return out_tests, reqs, problems
