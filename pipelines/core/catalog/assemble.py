"""Turning scanned files and template entries into :class:`Test` records with their ids.

Registry: one test per registration; the id is the file path when the file registers once,
``<path>::<backend>-<suite>`` for each registration when it registers several (``@<hardware>`` added
where one suite runs on several hardware, from a ``hardware=[...]`` list). Template: one
test per distinct entry (identical entries in several jobs merge, their labels unite, and the
other jobs become ``also_suites`` so that ``--suite`` selects any job; entries that templates give
different environments stay apart, one test per environment); the id
is the path, or ``<path>::<variant>`` when the file appears with different args/env, where the
variant spells out what differs (``use_deepep=1+--async-save``) or, when that would not be a
safe key, a short hash of the entry.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from pipelines.core.catalog.dialect import M_FAST, Dialect, M, Signature
from pipelines.core.catalog.ids import make_id, variant_problem
from pipelines.core.catalog.registry import SUITE_REQUIRED, Registration
from pipelines.core.catalog.scan import FileScan, checked_path
from pipelines.core.catalog.template import TEST_DIR, Entry, Template, as_github, job_value
from pipelines.core.model import Problem, Test, template_digest

_MAX_VARIANT = 80


#: folder -> backend -> (files under the folder registering it, the repo order of the first, and the call to
#: copy: (depth, repo order, as written) of the shallowest folder under it that registers it)
Examples = dict[str, dict[str, tuple[int, int, tuple[int, int, str]]]]


def _examples(scans: list[FileScan], dialect: Dialect) -> Examples:
    """For every folder, what the files of its subtree register (the advice's examples), counted once: 10,000s
    of files may be unregistered."""
    out: Examples = {}
    for order, scan in enumerate(scans):
        written: dict[str, str] = {}  # backend -> the file's first call of it, as written
        for r in scan.registrations:
            sig = next((s for s in dialect.functions if s.backend == r.backend), None)
            if sig is not None and r.backend not in written:
                written[r.backend] = _as_written(sig, r)
        home = posixpath.dirname(scan.path)
        depth = len(home.split("/")) if home else 0
        for backend, call in written.items():
            folder = home
            while True:
                files, first, nearest = out.setdefault(folder, {}).get(backend, (0, order, (depth, order, call)))
                out[folder][backend] = (files + 1, first, min(nearest, (depth, order, call)))
                if not folder:
                    break
                folder = posixpath.dirname(folder)
    return out


def _example(examples: Examples, dialect: Dialect, path: str) -> str:
    """A registration to copy, from this repo's own files (never another framework's suites). The smallest folder
    above ``path`` (its own first) whose subtree registers any; there the backend most files register (a tie: not
    the CPU one, so a GPU folder's file is not shown a CPU call), then the repo's first; the call of that backend
    from the folder nearest the file. Every folder of that subtree has it as its common path with the file (a
    deeper one would be smaller), so the nearest is the fewest folders down from it, then the repo's first."""
    folder = posixpath.dirname(path)
    while folder not in examples and folder:
        folder = posixpath.dirname(folder)
    counts = examples.get(folder)
    if counts:
        backend = max(counts, key=lambda b: (counts[b][0], b != "cpu", -counts[b][1]))
        return f"e.g. {counts[backend][2][2]} as other files here do"
    return f"with the framework's signature {dialect.functions[0].text()}" if dialect.functions else ""


def _as_written(sig: Signature, r: Registration) -> str:
    """``r`` as a call in the form the repo writes it: the est_time literal (``120.5``, not the rounded 121)
    and the suite as ``stage=`` + ``runner_config=`` where the framework has that pair, else by name."""
    est = f"{r.est_literal:g}" if r.est_literal is not None else r.est_time
    stage, sep, runner = r.suite.partition("-test-")
    if sep and stage and runner and "runner_config" in sig.keywords:
        return f"{sig.name}({est}, stage=\"{stage}\", runner_config=\"{runner}\", ...)"
    return f"{sig.name}({est}, \"{r.suite}\", ...)"


def _suite_example(scans: list[FileScan], dialect: Dialect, backend: str) -> str:
    """A ``backend`` registration's suite to copy, in the form this repo's files write it (stage= +
    runner_config=, or a suite name), for a call that names none; "" when the repo has none."""
    sig = next((s for s in dialect.functions if s.backend == backend), None)
    if sig is None:
        return ""
    for scan in scans:
        for r in scan.registrations:
            if r.backend == backend:
                return f"e.g. {_as_written(sig, r)} as other files here do"
    return ""


_CALLED = re.compile(r"e\.g\. (\w+)\(")


def _with_repo_suite(problem: Problem, scans: list[FileScan], dialect: Dialect, memo: dict[str, str]) -> Problem:
    """A "suite required" problem advising what the repo's own registrations of that backend write (the
    dialect's own forms stay when it has none)."""
    called = _CALLED.search(problem.message)
    backend = next((s.backend for s in dialect.functions if called and s.name == called.group(1)), "")
    if backend not in memo:
        memo[backend] = _suite_example(scans, dialect, backend) if backend else ""
    if not memo[backend]:
        return problem
    head, _, _ = problem.message.partition("; ")
    return dataclasses.replace(problem, message=f"{head}; {memo[backend]}")


#: folder names that hold CPU unit tests in the frameworks we serve (M's runner treats its ``fast`` one so)
_CPU_FOLDERS = frozenset({"fast", "unit", "units", "unittest", "unittests", "unit_tests", "cpu"})


def _cpu_folder(path: str, beside: dict[str, set[str]]) -> str | None:
    """The folder of ``path`` when it looks like one of CPU unit tests: a CPU-test folder name, or only
    CPU registrations beside the file (``beside``: folder -> backends registered there). Such a file must
    not be told to register as an 8-GPU test."""
    folder = posixpath.dirname(path)
    if _CPU_FOLDERS.intersection(folder.split("/")):
        return folder
    return folder if beside.get(folder) == {"cpu"} else None


def _backends_by_folder(scans: list[FileScan]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for s in scans:
        for r in s.registrations:
            out.setdefault(posixpath.dirname(s.path), set()).add(r.backend)
    return out


def _cpu_example(scans: list[FileScan], dialect: Dialect) -> str:
    """A CPU registration to copy: this repo's own first one, else the framework's signature."""
    cpu_fn = next((s for s in dialect.functions if s.backend == "cpu"), None)
    if cpu_fn is None:
        return ""
    return next((f'{cpu_fn.name}({r.est_time}, "{r.suite}")' for s in scans for r in s.registrations
                 if r.backend == "cpu"), cpu_fn.text())


def _cpu_advice(folder: str, example: str, names: str) -> str:
    return (f"no {names} call at module level; {folder}/ looks like a folder of CPU unit tests: list \"{folder}\" "
            "under `implicit_cpu_dirs:` for this repo in assets/repos.yaml (its unregistered files become CPU tests "
            "of est_time 1, as the framework's runner treats its fast folder)"
            + (f", or register the file as a CPU test, e.g. {example}" if example else ""))


#: every field of Test with its default (required ones are always given)
_TEST_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Test)}
_PLAIN = not hasattr(Test, "__post_init__") and all(f.default_factory is dataclasses.MISSING for f in dataclasses.fields(Test))


def new_test(**values) -> Test:
    """``Test(**values)`` without the frozen dataclass's ``object.__setattr__`` per field (21 fields, 10,000s of
    tests a catalog): the same fields in the same order, so the same record."""
    if not _PLAIN:
        return Test(**values)
    t = object.__new__(Test)
    t.__dict__.update(_TEST_DEFAULTS, **values)
    return t


def registry_tests(scans: list[FileScan], implicit_cpu_dirs: tuple[str, ...], dialect: Dialect = M
                   ) -> tuple[list[Test], list[Problem]]:
    tests: list[Test] = []
    problems: list[Problem] = []
    implicit = tuple(d.strip("/") + "/" for d in implicit_cpu_dirs)
    fast = f"{M_FAST}/" if dialect.name == "m" and f"{M_FAST}/" in implicit else None  # where M's runner refuses GPU calls
    examples: Examples | None = None  # what each folder's files register, built at the first unregistered file
    beside: dict[str, set[str]] | None = None  # built at the first unregistered file
    cpu_example = None
    suites: dict[str, str] = {}  # backend -> a suite to copy, built at the first call naming no suite
    for scan in scans:
        problems += [_with_repo_suite(p, scans, dialect, suites) if p.field == "suite" and
                     p.message.startswith(SUITE_REQUIRED) else p for p in scan.problems]
        if not scan.parsed:
            continue
        regs = list(scan.registrations)
        # the ids are made over every registration of the file, refused ones too: refusing one call must not move
        # its siblings' ids (and so their history), e.g. from tests/fast/x.py::cpu-stage-a-cpu to tests/fast/x.py
        named = sorted(regs + list(scan.withheld), key=lambda r: r.line) if scan.withheld else regs
        if regs and fast is not None and scan.path.startswith(fast):
            regs, refused = _cpu_only(scan.path, regs, dialect)
            problems += refused
            if not regs:
                continue
        if not regs and not any(scan.problems):
            home = next((d for d in implicit if scan.path.startswith(d)), None)
            if home is None:
                names = "/".join(s.name for s in dialect.functions)
                beside = _backends_by_folder(scans) if beside is None else beside
                cpu = _cpu_folder(scan.path, beside)
                if cpu is not None:
                    cpu_example = _cpu_example(scans, dialect) if cpu_example is None else cpu_example
                    problems.append(Problem(scan.path, 1, "registration", _cpu_advice(cpu, cpu_example, names)))
                    continue
                examples = _examples(scans, dialect) if examples is None else examples
                problems.append(Problem(scan.path, 1, "registration", (
                    f"no {names} call at module level; register the file {_example(examples, dialect, scan.path)}"
                    + (" or move it to an implicit CPU folder" if implicit else ""))))
                continue
            suite = dialect.implicit_suite or posixpath.basename(home.rstrip("/"))
            regs = named = [Registration("cpu", suite, 0, "cpu", 1, (), False, None, 1)]
        variants = _variants(named, by_nightly=dialect.nightly == "exclusive")
        kept = {id(r) for r in regs} if len(regs) < len(named) else None
        for r, variant in zip(named, variants, strict=True):
            if kept is not None and id(r) not in kept:
                continue
            tests.append(new_test(
                id=make_id(scan.path, variant), path=scan.path, backend=r.backend, suite=r.suite,  # type: ignore[arg-type]
                gpus=r.gpus, est_time=r.est_time, labels=r.labels, nightly=r.nightly, disabled=r.disabled,
                sha256=scan.sha256, line=r.line, hardware=r.hardware, est_source="registered", fmt="registry",
                nightly_rule=dialect.nightly, est_literal=r.est_literal,
            ))
    return tests, problems


def _cpu_only(path: str, regs: list[Registration], dialect: Dialect) -> tuple[list[Registration], list[Problem]]:
    """Framework M's runner refuses a GPU registration in its CPU-only folder (``tests/fast/``: "register_cuda_ci
    is forbidden in tests/fast/; move the file to tests/fast-gpu/"): one problem per such call, and only the
    file's CPU registrations stay. Only there: another implicit CPU folder (``implicit_cpu_dirs: [tests/unit]``)
    makes its unregistered files CPU tests, and its registered ones stay what they register, as before."""
    names = {s.backend: s.name for s in dialect.functions}
    cpu_fn = names.get("cpu", "register_cpu_ci")
    problems: dict[int, Problem] = {}
    for r in regs:
        if r.backend == "cpu" or r.line in problems:
            continue
        func = names.get(r.backend, f"register_{r.backend}_ci")
        why = (f"{func} is forbidden in {M_FAST}/, framework M's CPU-only folder (its runner refuses the file there); "
               f"move the file to {M_FAST}-gpu/")
        problems[r.line] = Problem(path, r.line, func, f"{why}, or register it with {cpu_fn} if it needs no GPU")
    return [r for r in regs if r.backend == "cpu"], list(problems.values())


def _variants(regs: list[Registration], by_nightly: bool = False) -> list[str | None]:
    """``<backend>-<suite>`` per registration of a file with several, ``...@<hardware>`` where one suite runs on
    several hardware (a ``hardware=[...]`` list); a true repeat keeps its id and is reported as a duplicate.

    ``by_nightly`` (the SGLang family, whose runner keys a registration on backend, suite and nightly): where a
    per-commit and a nightly registration would share an id, the first in file order keeps it (before such pairs
    were two tests it was that one's id, the later one dropped as a duplicate: its history is under it) and the
    later one gets its cadence, ``+nightly`` or ``+per-commit`` (no suite or hardware holds a ``+``). Only then:
    every other id stays as it was, since history is keyed by ids."""
    if len(regs) == 1:
        return [None]
    bases = [f"{r.backend}-{r.suite}" for r in regs]
    hardware: dict[str, set[str]] = {}
    for base, r in zip(bases, regs, strict=True):
        hardware.setdefault(base, set()).add(r.hardware)
    variants = [base + (f"@{r.hardware}" if len(hardware[base]) > 1 else "") for base, r in zip(bases, regs, strict=True)]
    if by_nightly:
        first: dict[str, bool] = {}  # variant -> the cadence of its first registration, which keeps the id
        for v, r in zip(variants, regs, strict=True):
            first.setdefault(v, r.nightly)
        variants = [v if r.nightly == first[v] else v + ("+nightly" if r.nightly else "+per-commit")
                    for v, r in zip(variants, regs, strict=True)]
    return variants


def template_path(entry: Entry) -> str:
    """Where the framework's job finds the entry's ``test_file``: in the folder its template's run line runs it
    from (``cd tests/e2e && python ${{ matrix.info.test_file }}``: ``tests/e2e``), else under tests/, where a
    ``test_file`` starting with ``tests/`` is taken as written."""
    folder, test_file = entry.test_dir, entry.test_file
    if folder == TEST_DIR and test_file.startswith(f"{TEST_DIR}/"):
        return test_file
    return posixpath.join(folder, test_file) if folder else test_file


def missing_file(path: str, entry: Entry, tmpl: Template | None) -> str:
    """What to do about an entry whose file is not there, from how its job runs it (never the --roots of a
    registry repo: a template names its files itself)."""
    said = tmpl.test_dir_said if tmpl else ""
    if tmpl is not None and tmpl.test_dir_read:
        return f"{path} does not exist: the job runs test_file from {entry.test_dir}/ ({said}); fix test_file or the run line"
    why = f" because {said}" if said else ""
    return (f"{path} does not exist: test_file is read relative to {TEST_DIR}/{why}; write it as the file's path "
            f"under {TEST_DIR}/ ('e2e/test_x.py' for {TEST_DIR}/e2e/test_x.py), or `cd` into its folder in the job's "
            "run line (`cd tests/e2e && python ${{ matrix.info.test_file }}`)")


def _args(entry: Entry) -> tuple[str, ...]:
    """As the job's shell splits them (:func:`parse_template` reports and skips args that cannot be split)."""
    return tuple(shlex.split(entry.test_args))


def _variant(entry: Entry, gpus_differ: bool) -> str:
    parts = [f"{k}={v}" for k, v in entry.extra] + list(_args(entry))
    if gpus_differ and entry.num_gpus is not None:  # an entry without num_gpus sets none: never `gpus=None`
        parts.insert(0, f"gpus={entry.num_gpus}")
    variant = "+".join(parts) or "default"
    if variant_problem(variant) or len(variant) > _MAX_VARIANT:
        canonical = json.dumps([entry.extra, entry.test_args, entry.num_gpus], sort_keys=True)
        variant = "v-" + hashlib.sha256(canonical.encode()).hexdigest()[:10]
    return variant


def _env(entry: Entry, lines: Mapping[str, tuple[str, str | None]]) -> dict[str, str]:
    """The environment GitHub gives the entry's job: ``VAR: ${{ matrix.info.<key> || 'd' }}`` is the value
    as GitHub renders it (``true``, ``2``), or ``d`` when the value is absent or falsy (false, 0, '', null);
    without ``|| 'd'`` an absent key renders as '' like null, so VAR is set, empty. A key no line names is
    passed upper-cased."""
    given = {key: (text, truthy) for key, text, truthy in entry.github}
    env: dict[str, str] = {}
    absent = as_github(None)  # GitHub renders a missing matrix key as it renders null
    for key, (var, default) in lines.items():
        if key not in given:
            env[var] = job_value(*absent, default)
            continue
        text, truthy = given.pop(key)
        env[var] = job_value(text, truthy, default)
    env.update({key.upper(): text for key, (text, _) in given.items()})
    return env


def entry_gpus(entry: Entry, file_gpus: int | None, default: int) -> int:
    """The GPUs a template entry's test runs on: its ``num_gpus``, else the test file's ``NUM_GPUS``,
    else the repo's ``default_num_gpus``; 0 in a CPU job. One rule for the catalog and coverage."""
    if entry.cpu:
        return 0
    if entry.num_gpus is not None:
        return entry.num_gpus
    return file_gpus if file_gpus is not None else default


#: each template's ``VAR: ${{ matrix.info.<key> ... }}`` lines: template -> entry key -> (VAR, default or None)
EnvLines = Mapping[str, Mapping[str, tuple[str, str | None]]]


def env_lines(tmpls: Sequence[tuple[str, Template]]) -> dict[str, dict[str, tuple[str, str | None]]]:
    """The env lines of each ``(path, template)``: each template names the env vars of its own entries' keys."""
    return {rel: {key: (var, default) for var, key, default in t.env} for rel, t in tmpls}


def entry_env(entry: Entry, lines: EnvLines) -> tuple[tuple[str, str], ...]:
    """The environment the entry's job gets from its own template's env lines, sorted."""
    return tuple(sorted(_env(entry, lines.get(entry.source, {})).items()))


def entry_key(entry: Entry, lines: EnvLines) -> tuple:
    """What makes two template entries one test: an entry listed by several templates or jobs is one, unless
    the templates give it different environments (a PR template's ``|| 'false'`` and a nightly one's ``|| '0'``):
    the test then runs differently in each, so each environment is a test of its own."""
    return (template_path(entry), entry.test_args, entry.extra, entry.num_gpus, entry.cpu,
            entry_env(entry, lines))


def entry_ids(entries: Sequence[Entry], lines: EnvLines, notes: list[str] | None = None) -> dict[tuple, str]:
    """The test id of each distinct entry (by :func:`entry_key`) of one test file, given all its entries:
    the path alone for a file with one entry, else ``<path>::<variant>``. When templates give one entry
    different environments, the first template's (in file-name order, as the catalog reads them) keeps the
    id and each other one gets ``+<its template's file name>``. Entries that read alike but run differently
    (``use_fp8=1`` as a matrix key and as an argument) keep two ids: the one :func:`_rank` puts first keeps
    the readable variant, whatever their order in the template (so adding an entry never takes an existing
    test's id and history), the others get a hashed one, each named in ``notes``. One rule for the catalog
    and coverage (an entry the catalog disabled or left out of the night covers nothing)."""
    first: dict[tuple, Entry] = {}
    for e in sorted(entries, key=lambda e: e.source):  # stable: each template's entries keep their order
        first.setdefault(entry_key(e, lines), e)
    by_entry: dict[tuple, list[tuple]] = {}  # the same entry, one key per environment
    for key in first:
        by_entry.setdefault(key[:5], []).append(key)
    gpus_differ = len({e.num_gpus for e in first.values()}) > 1
    variants = {keys[0]: _variant(first[keys[0]], gpus_differ) if len(by_entry) > 1 else None
                for keys in by_entry.values()}
    alike: dict[str, list[Entry]] = {}  # readable variant -> the entries that read so
    for key, variant in variants.items():
        if variant is not None:
            alike.setdefault(variant, []).append(first[key])
    kept = {variant: min(group, key=_rank) for variant, group in alike.items()}  # keeps the readable id
    ids = {}
    for keys in by_entry.values():
        entry, variant = first[keys[0]], variants[keys[0]]
        if variant is not None and _runs(entry) != _runs(kept[variant]):
            variant = _distinct(entry)  # another entry reads alike (`a=1` set, or passed) but runs otherwise
        ids[keys[0]] = make_id(keys[0][0], variant)
        for key in keys[1:]:
            ids[key] = make_id(key[0], _from_template(variant, first[key]))
    if notes is not None:
        for variant, group in alike.items():
            k = kept[variant]
            notes += [_alike_note(variant, k, ids[entry_key(k, lines)], e, ids[entry_key(e, lines)])
                      for e in group if _runs(e) != _runs(k)]
    return ids


def _runs(entry: Entry) -> tuple:
    """What the entry's job runs: two entries alike here are one test (a duplicate when both are listed)."""
    return (entry.extra, _args(entry), entry.num_gpus, entry.cpu)


def _rank(entry: Entry) -> tuple:
    """Which of entries that read alike keeps the readable id, by content alone: the one passing no
    arguments (the matrix-key form, ``use_fp8=1`` as an env var), then the one with fewer keys, then
    the canonical form of what it runs."""
    return (bool(_args(entry)), len(entry.extra), json.dumps(_runs(entry), sort_keys=True))


def _alike_note(variant: str, kept: Entry, kept_id: str, other: Entry, other_id: str) -> str:
    def at(e: Entry) -> str:
        return f"{e.source}:{e.line}"

    return (f"{at(other)} and {at(kept)}: two entries of {template_path(kept)} read alike "
            f"({variant}) but run differently; {kept_id} (line {kept.line}) keeps the readable id, {other_id} "
            f"(line {other.line}) gets a hashed one (chosen by what each runs, not by its place in the template)")


def _distinct(entry: Entry) -> str:
    """The hashed variant of an entry whose readable one another entry of the file, which runs differently,
    keeps (``use_fp8=1`` as a matrix key and as an argument; a value holding ``+``)."""
    canonical = json.dumps([entry.extra, entry.test_args, entry.num_gpus, entry.cpu], sort_keys=True)
    return "v-" + hashlib.sha256(canonical.encode()).hexdigest()[:10]


def _from_template(variant: str | None, entry: Entry) -> str:
    """``<variant>+<template file name>``: the same entry with the environment of another template."""
    name = posixpath.basename(entry.source)
    out = f"{variant}+{name}" if variant else name
    if variant_problem(out) or len(out) > _MAX_VARIANT:
        out = "v-" + hashlib.sha256(json.dumps([variant, entry.source]).encode()).hexdigest()[:10]
    return out


def _env_split_note(split: list[list[tuple[str, Entry, tuple]]]) -> list[str]:
    """Say that entries several templates list with different environments became one test each."""
    if not split:
        return []

    def one(test_id: str, e: Entry, env: tuple) -> str:
        return f"{test_id} ({e.source}: {', '.join(f'{k}={v}' for k, v in env) or 'no env'})"

    shown = "; ".join(" and ".join(one(*g) for g in groups) for groups in split[:3])
    more = f"; and {len(split) - 3} more" if len(split) > 3 else ""
    return [f"{len(split)} entr{'y' if len(split) == 1 else 'ies'} listed by several templates get"
            f"{'s' if len(split) == 1 else ''} a different environment from each, so each environment is its own "
            f"test: {shown}{more}"]


def _same_test(test_id: str, first: Entry, again: Entry) -> Problem:
    """Two template entries that make one test (same file, arguments the shell splits alike), located at the
    second entry in its template, not at the test file."""
    where = f"line {first.line}" + ("" if first.source == again.source else f" of {first.source}")
    spelled = (f" (`{first.test_args}` and `{again.test_args}` split alike)" if first.test_args != again.test_args
               else "")
    return Problem(again.source, again.line, "id", (
        f"duplicate test id {test_id!r}: this entry and the one at {where} give the same test file and arguments"
        f"{spelled}; remove one"))


def _listed_twice(test_id: str, entry: Entry) -> Problem:
    """One entry its job lists twice (``a_tests + a_tests``): the file has it once, the job's list repeats it,
    so the problem is at the job (its line where known) and names the entry's line."""
    where, field = (entry.job_line, f"jobs.{entry.job}.tests") if entry.job_line else (entry.line, "id")
    return Problem(entry.source, where, field, (
        f"job {entry.job!r} lists the entry of line {entry.line} (test id {test_id!r}) twice, so it would run it "
        "twice; list it once"))


def template_tests(
    repo: Path, tmpls: Sequence[tuple[str, Template]], scans: Mapping[str, FileScan], default_gpus: int,
    default_est_time: int, estimates: Mapping[str, int],
) -> tuple[list[Test], list[Problem], list[str]]:
    """Tests of every ``(path, template)``: an entry listed by several templates (or jobs) is one test, one per
    environment when the templates give it different ones; and a note naming those."""
    problems = [p for _, t in tmpls for p in t.problems]
    by_source = dict(tmpls)
    merged: dict[tuple, tuple[Entry, list[str], list[str]]] = {}
    nightly_only = {rel: t.nightly_only for rel, t in tmpls}
    lines = env_lines(tmpls)
    on_pr: dict[tuple, bool] = {}  # an entry some pull-request workflow lists runs on PRs
    listed: dict[tuple, dict[tuple[str, str], Entry]] = {}  # an entry -> its first listing per (template, job)
    repeated: dict[tuple, list[tuple[Entry, Entry]]] = {}  # an entry -> (first, again) listed twice in one job
    for e in (e for _, t in tmpls for e in t.entries):
        path = template_path(e)
        bad = checked_path(repo, path, "test_file")
        if bad:
            problems.append(Problem(e.source, e.line, "test_file", f"{bad.path}: {bad.message}"))
            continue
        if not (repo / path).is_file():
            problems.append(Problem(e.source, e.line, "test_file", missing_file(path, e, by_source.get(e.source))))
            continue
        key = entry_key(e, lines)
        on_pr.setdefault(key, False)
        on_pr[key] |= not nightly_only.get(e.source, False)
        where = (e.source, e.job)
        if where in listed.setdefault(key, {}):  # one job lists it twice: the job runs it twice, not a matrix
            repeated.setdefault(key, []).append((listed[key][where], e))
        elif key in merged:  # another job (or template) runs the same test: one test, each job's label
            listed[key][where] = e
            merged[key][1].append(e.label)
            merged[key][2].append(e.job)
        else:
            listed[key][where] = e
            merged[key] = (e, [e.label], [e.job])
    by_path: dict[str, list[tuple]] = {}
    for key in merged:
        by_path.setdefault(key[0], []).append(key)
    # a NUM_GPUS the catalog cannot read matters only to entries that give no num_gpus and run in a GPU job
    file_gpus = {key[0] for key in merged if key[3] is None and not key[4]}
    problems += [p for s in scans.values() for p in s.problems if p.field != "NUM_GPUS" or s.path in file_gpus]
    # a NUM_GPUS also set under an `if` (read from before it); then entries that read alike (entry_ids)
    notes: list[str] = [n for s in scans.values() if s.path in file_gpus for n in s.notes]
    tests: list[Test] = []
    split: dict[tuple, list[tuple[str, Entry, tuple]]] = {}  # an entry -> (id, entry, env) per environment
    for path, keys in by_path.items():
        scan = scans.get(path)
        if scan is None or not scan.parsed:
            continue
        ids = entry_ids([merged[k][0] for k in keys], lines, notes)
        by_id: dict[str, Entry] = {}
        for key in keys:
            e, labels, jobs = merged[key]
            test_id = ids[key]
            problems += [_listed_twice(test_id, again) if (first.source, first.line) == (again.source, again.line)
                         else _same_test(test_id, first, again) for first, again in repeated.get(key, ())]
            if test_id in by_id:  # `--a --b` and `--a  --b`: two entries, one test the job runs alike
                problems.append(_same_test(test_id, by_id[test_id], e))
                continue
            by_id[test_id] = e
            gpus = entry_gpus(e, scan.num_gpus, default_gpus)
            cpu = gpus == 0
            split.setdefault(key[:5], []).append((test_id, e, key[5]))
            history = estimates.get(test_id)
            tests.append(Test(
                id=test_id, path=path, backend="cpu" if cpu else "cuda", suite=e.job, gpus=gpus,
                est_time=int(history) if history else default_est_time, labels=tuple(dict.fromkeys(x for x in labels if x)),
                sha256=template_digest(scan.sha256, gpus, key[5], _args(e)), line=1, hardware="cpu" if cpu else "",
                est_source="history" if history else "default",
                fmt="template", env=key[5], args=_args(e),
                also_suites=tuple(dict.fromkeys(j for j in jobs if j != e.job)), nightly=not on_pr[key],
            ))
    # an entry of a list several jobs reuse is checked once per job: its problem is reported once
    return tests, list(dict.fromkeys(problems)), _env_split_note([groups for groups in split.values() if len(groups) > 1]) + notes
