"""The asset cache: model weights, datasets and converted checkpoints, built once and reused.

Tests expect container paths such as ``/root/models/<name>``; on this machine those live under
one cache root (``/root/...`` -> ``<cache>/...``, any other path ``/p`` -> ``<cache>/_outside_root/p``,
so ``/x`` and ``/root/x`` stay two folders). In Kubernetes the same folders are a PVC
mounted at ``/root/models`` and ``/root/datasets``. Every build goes to a temporary folder and
is renamed into place with a completion marker, so an interrupted build is never mistaken for a
finished one. The marker carries a manifest (files, sizes, sha256) checked before every reuse: a
damaged entry is rebuilt and reported as ``repaired`` (infra), leftover ``.partial`` folders of
dead builders are removed, and every build command has a time limit.

The marker also records what the entry was built from: a download's source (with its revision and
``--include``/``--exclude`` filters, see :func:`built_from`), and a conversion's
identity (:mod:`pipelines.core.recipe`: the converter's files, argv, environment and its model's
own identity). An entry whose recorded source or identity differs from what the catalog asks for
now is rebuilt in place (``Built.rebuilt`` says why; not infra), so a changed converter is never
hidden by yesterday's checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pipelines.core.asset_rules import DOWNLOAD_OPTIONS, download_option_problem, download_text
from pipelines.core.catalog.requirements import CACHE_PATH_RULE, LAUNCH_ONLY, cache_relpath, hub_id_problem
from pipelines.core.model import Requirement
from pipelines.core.recipe import Recipe, identity, make_recipe, model_identity
from pipelines.core.specs import ConversionSpec
from pipelines.launch.orphans import owner_fields
from pipelines.launch.procs import MARKER as PROC_MARKER
from pipelines.launch.procs import (
    describe,
    kill_attempt,
    marked_pids,
    pid_alive,
    start_time,
    with_signals_unblocked,
)
from pipelines.storage.manifest import MARKER, damage, make_manifest, read_marker

_log = logging.getLogger(__name__)
#: ``take_gpus(count)``: a context holding ``count`` GPUs, giving (their env, the lock fds a command inherits)
TakeGpus = Callable[[int], contextlib.AbstractContextManager[tuple[dict[str, str], tuple[int, ...]]]]
#: a download or conversion that takes longer than this is stuck (a deployment's ``cache: build_timeout_s``)
BUILD_TIMEOUT_S = 4 * 3600
_PARTIAL = re.compile(r"^\.(?P<name>.+)\.partial-(?P<pid>\d+)$")


class BuildError(RuntimeError):
    """A requirement could not be built; the message says which and what to do."""


@dataclass(frozen=True)
class Built:
    """What building (or finding) one requirement did, for asset metadata."""

    key: str
    path: Path
    reused: bool
    seconds: float
    files: int
    bytes: int
    #: the entry was found damaged (why in ``damage``) and rebuilt: an infra event, not a test's
    repaired: bool = False
    damage: str = ""
    #: why a complete, undamaged entry was built again (its source or conversion identity changed)
    rebuilt: str = ""
    #: a conversion's identity as recorded in its marker (see :mod:`pipelines.core.recipe`)
    identity: str = ""


def _size(path: Path) -> tuple[int, int]:
    files = total = 0
    for p in path.rglob("*"):
        if p.is_file() and p.name != MARKER:
            files += 1
            total += p.stat().st_size
    return files, total


class AssetCache:
    def __init__(self, root: Path, hub: Path | None = None, *, build_timeout_s: float = BUILD_TIMEOUT_S,
                 verify: str = "full"):
        self.root = Path(root)
        self.hub = Path(hub) if hub else None
        self.build_timeout_s = build_timeout_s
        #: "full" hashes every file before reuse, "size" checks names and sizes only
        self.verify = verify

    def host_path(self, container_path: str) -> Path:
        """Where a test's container path lives in this cache (``/root/models/x`` -> ``<cache>/models/x``)."""
        rel = cache_relpath(container_path)  # the catalog's rule, so what it accepts the cache builds
        if rel is None:
            raise BuildError(f"{container_path!r}: {CACHE_PATH_RULE}")
        return self.root.joinpath(*rel.split("/"))

    def is_built(self, req: Requirement) -> bool:
        """A completion marker is there (see :meth:`damage` for whether the files still match it)."""
        return (self.host_path(req.path) / MARKER).is_file()

    def damage(self, req: Requirement) -> str:
        """Why the built entry cannot be reused as it is ("" when it matches its manifest)."""
        return damage(self.host_path(req.path), self.verify)

    def clean_partials(self) -> list[Path]:
        """Remove ``.partial`` folders that builders killed mid-build left behind; returns them."""
        removed = []
        for tmp in self.root.rglob(".*.partial-*") if self.root.is_dir() else ():
            m = _PARTIAL.match(tmp.name)
            if m and tmp.is_dir() and not pid_alive(int(m["pid"])):
                shutil.rmtree(tmp, ignore_errors=True)
                removed.append(tmp)
        return removed

    @property
    def running_dir(self) -> Path:
        """Records of the builds running now, one per command (see :meth:`reap_builds`)."""
        return self.root / ".running"

    def reap_builds(self) -> list[str]:
        """Kill build commands whose night died without ending them (``kill -9``); returns what each
        was (``conversion X (pids 1, 2)``) for those still running. A live night's builds are left alone."""
        folder = self.running_dir
        killed = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
            try:
                record = json.loads(path.read_text())
                owner, token = int(record["owner_pid"]), str(record["token"])
            except (OSError, ValueError, KeyError, TypeError):
                path.unlink(missing_ok=True)
                continue
            if owner > 0 and pid_alive(owner) and start_time(owner) == record.get("owner_start", ""):
                continue  # its night still runs
            pids = marked_pids(token)
            if pids:
                kill_attempt(token, int(record.get("pgid") or 0) or None)
                killed.append(f"{record.get('what', token)} (pids {', '.join(map(str, pids))})")
            path.unlink(missing_ok=True)
        return killed

    def stale(self, req: Requirement, want: str = "", recipe: Recipe | None = None) -> str:
        """Why the built entry is not what ``req`` asks for now ("" when it is): another source, or
        for a conversion another identity ``want`` (see :func:`conversion_identity`)."""
        return stale_reason(read_marker(self.host_path(req.path)) or {}, req, want, recipe)

    def conversion_identity(self, req: Requirement, repo: Path | None, conversion: ConversionSpec | None,
                            env: dict[str, str], models: dict[str, Requirement],
                            image: str = "") -> tuple[str, Recipe | None]:
        """(identity, recipe) of ``req`` as it would be built now; ("", None) when it cannot be built
        (no command, no model yet: the build itself says why)."""
        if req.kind != "conversion" or conversion is None or repo is None or not req.depends_on \
                or req.depends_on[0] not in models:
            return "", None
        model = read_marker(self.host_path(models[req.depends_on[0]].path))
        if model is None:
            return "", None
        recipe = conversion_recipe(conversion, req, repo, env, image=image)
        return identity(recipe.digest, model_identity(model)), recipe

    def build(self, req: Requirement, *, repo: Path | None = None, conversion: ConversionSpec | None = None,
              env: dict[str, str] | None = None, models: dict[str, Requirement] | None = None,
              log_path: Path | None = None, timeout_s: float | None = None, image: str = "",
              take_gpus: TakeGpus | None = None) -> Built:
        """Build one requirement unless a complete, undamaged, current entry is there; a damaged
        one is rebuilt (``repaired``), one built from something else too (``rebuilt``).

        A file error on the way (a full disk, a read-only cache) is a :class:`BuildError` naming the
        folder and its free space: the night fails the tests that need this input, not the whole run.
        ``image``: what a conversion runs outside the checkout (the Python environment's digest), part
        of its identity. ``take_gpus(count)``: holds ``count`` GPUs while a conversion runs (only when it
        runs, not when it is reused), giving their environment (``CUDA_VISIBLE_DEVICES``) and the lock files
        the converter inherits, so it never lands on GPUs a test holds (the local launcher's locks)."""
        dest = self.host_path(req.path)
        try:
            return self._build(req, dest, repo, conversion, env, models, log_path, timeout_s, image, take_gpus)
        except OSError as exc:
            raise BuildError(_file_problem(req, dest, exc)) from exc

    def _build(self, req: Requirement, dest: Path, repo: Path | None, conversion: ConversionSpec | None,
               env: dict[str, str] | None, models: dict[str, Requirement] | None, log_path: Path | None,
               timeout_s: float | None, image: str, take_gpus: TakeGpus | None = None) -> Built:
        t0 = time.monotonic()
        env, models = env or {}, models or {}
        want, recipe = self.conversion_identity(req, repo, conversion, env, models, image)
        if self.is_built(req) and not self.damage(req) and not self.stale(req, want, recipe):
            return Built(req.key, dest, True, 0.0, *_size(dest), identity=want)
        dest.parent.mkdir(parents=True, exist_ok=True)
        # one builder per folder across processes (a night beside a rerun or a backfill); the
        # second one waits, then finds the marker and reuses
        with open(dest.with_name(f".{dest.name}.lock"), "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            found = self.damage(req) if self.is_built(req) else ""
            stale = self.stale(req, want, recipe) if self.is_built(req) and not found else ""
            if self.is_built(req) and not found and not stale:
                return Built(req.key, dest, True, 0.0, *_size(dest), identity=want)
            for old in dest.parent.glob(f".{dest.name}.partial-*"):  # we hold the lock: all are leftovers
                shutil.rmtree(old, ignore_errors=True)
            tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
            try:
                if req.kind in ("model", "dataset"):
                    self._download(req, tmp, timeout_s or self.build_timeout_s)
                else:
                    self._convert(req, tmp, repo, conversion, env, models, log_path,
                                  timeout_s or self.build_timeout_s, take_gpus)
                marker = {"key": req.key, "source": built_from(req), "built_at": time.time(),
                          "manifest": make_manifest(tmp)}
                if want and recipe is not None:
                    marker.update(identity=want, recipe=recipe.as_json())
                (tmp / MARKER).write_text(json.dumps(marker))
                with self._no_readers(req, dest):  # never under a running test of another run
                    shutil.rmtree(dest, ignore_errors=True)
                    os.replace(tmp, dest)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return Built(req.key, dest, False, round(time.monotonic() - t0, 3), *_size(dest), repaired=bool(found),
                     damage=found, rebuilt=stale, identity=want)

    def readers_path(self, req: Requirement) -> Path:
        """The lock file that tests reading ``req``'s folder hold shared (:meth:`hold_for_reading`)."""
        dest = self.host_path(req.path)
        return dest.with_name(f".{dest.name}.readers")

    def hold_for_reading(self, reqs: list[Requirement]) -> tuple[int, ...]:
        """Shared locks on the folders of ``reqs`` for a test that reads them (close the files to let go):
        a rebuild replaces a folder only once no test holds one (:meth:`_no_readers`). The files are
        close-on-exec; the local launcher passes them to the test, so they last as long as it does."""
        fds = []
        for req in reqs:
            path = self.readers_path(req)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:  # the test still runs; it is the rebuild that could not wait for it
                _log.warning("%s: cannot hold %s for reading (%s); a rebuild could replace it under the test",
                             req.key, path, exc.strerror or exc)
                continue
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a rebuild swaps the folder
            fds.append(fd)
        return tuple(fds)

    @contextlib.contextmanager
    def _no_readers(self, req: Requirement, dest: Path) -> Iterator[None]:
        """Hold ``req``'s readers lock exclusively: wait until no test (of any run on this host) reads it."""
        fd = os.open(self.readers_path(req), os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                _log.warning("%s %s: built anew; waiting for the tests that read %s to end before replacing it",
                             req.kind, req.key, dest)
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _download(self, req: Requirement, tmp: Path, timeout_s: float) -> None:
        check_hub_id(req)
        section = "models" if req.kind == "model" else "datasets"
        if self.hub is not None:
            src = (self.hub / section / req.source).resolve()
            if not src.is_relative_to(self.hub.resolve()) or not src.is_dir():
                raise BuildError(f"{req.kind} {req.key}: {req.source!r} is not in the local hub {self.hub / section}")
            shutil.copytree(src, tmp)
            return
        hf = shutil.which("hf")
        if hf is None:
            raise BuildError(
                f"{req.kind} {req.key}: no local hub is configured and the `hf` command is missing; "
                "install huggingface_hub or set `hub:` for the repo in assets/repos.yaml"
            )
        argv = [hf, "download", req.source, *download_args(req), "--local-dir", str(tmp)]
        _run(argv, cwd=None, env=dict(os.environ), what=f"{req.kind} {req.key}", log_path=None, timeout_s=timeout_s,
             running=self.running_dir, fix="install huggingface_hub where the night runs")

    def _convert(self, req: Requirement, tmp: Path, repo: Path | None, conversion: ConversionSpec | None,
                 env: dict[str, str], models: dict[str, Requirement], log_path: Path | None,
                 timeout_s: float, take_gpus: TakeGpus | None = None) -> None:
        if conversion is None or repo is None:
            raise BuildError(f"conversion {req.key}: no conversion command is declared in assets/checkpoints.yaml")
        if not req.depends_on or req.depends_on[0] not in models:
            raise BuildError(f"conversion {req.key}: its model {req.depends_on!r} is not a known requirement")
        model = models[req.depends_on[0]]
        if not self.is_built(model):
            raise BuildError(f"conversion {req.key}: model {model.key} is not downloaded yet; build model_weights first")
        argv, conv_env = conversion_command(conversion, req, sys.executable, str(self.host_path(model.path)), str(tmp))
        full_env = {**os.environ, **env, **conv_env}
        gpus = dict(req.params).get("num_gpus_per_node", "")
        with take_gpus(int(gpus)) if take_gpus is not None and gpus.isdigit() else contextlib.nullcontext(({}, ())) \
                as (gpu_env, fds):
            _run(argv, cwd=repo, env={**full_env, **gpu_env}, what=f"conversion {req.key}", log_path=log_path,
                 timeout_s=timeout_s, running=self.running_dir, fix="fix the conversion command in "
                 "assets/checkpoints.yaml, or install it where the night runs", pass_fds=fds)
        if not tmp.is_dir():
            raise BuildError(f"conversion {req.key}: the command exited 0 but wrote nothing to {tmp}")


def _file_problem(req: Requirement, dest: Path, exc: OSError) -> str:
    """What a file error while building ``req`` means, with the free space where it was going."""
    where = dest
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = f"{shutil.disk_usage(where).free} bytes free"
    except OSError:
        free = "free space unknown"
    name = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"{req.kind} {req.key}: {dest}: disk full{name}; {free} under {where}. Free space there or point "
                "NIGHTLY_HOME at a larger disk")
    return f"{req.kind} {req.key}: {dest}: {exc.strerror or exc}{name} ({free} under {where})"


def check_hub_id(req: Requirement) -> None:
    """A Hub id is ``org/name``; anything else (an option, a path) never reaches ``hf`` or the hub folder
    (the catalog's rule, said at the test's line, and the specs', said at the models.yaml / datasets.yaml
    line, before a night gets here; the requirement no longer says which of the two its source came from)."""
    bad = hub_id_problem(req.source)
    if bad:
        raise BuildError(f"{req.kind} {req.key}: {bad}; fix its source: the download in prepare(), or the "
                         f"{req.key!r} entry of assets/{req.kind}s.yaml where it is declared")


def download_args(req: Requirement) -> list[str]:
    """The ``hf download`` arguments of a model or dataset after its repo id: the file names it fetches
    (none: every file), its repo type, and the revision and file filters its requirement carries (the
    local cache and build pods run the same)."""
    files, options = _download_filters(req)
    return [*files, *(["--repo-type", "dataset"] if req.kind == "dataset" else []), *options]


def _download_filters(req: Requirement) -> tuple[list[str], list[str]]:
    """(file names, revision and filter options) of a download; none of them may pass for an option."""
    check_hub_id(req)
    files: list[str] = []
    options: list[str] = []
    for option, value in req.params:
        if option not in (*DOWNLOAD_OPTIONS, "files"):
            continue
        bad = download_option_problem(option, value)  # the catalog's rule: an option in disguise never reaches hf
        if bad:
            raise BuildError(f"{req.kind} {req.key}: {bad}; fix prepare() or assets/{req.kind}s.yaml")
        words = value.split() if option != "revision" else [value]
        if option == "files":
            files += words
        else:
            options += [f"--{option}", *words]
    return files, options


def built_from(req: Requirement) -> str:
    """What the completion marker records as the entry's ``source``: a conversion's model key, a
    download's Hub id followed by the file names, revision and file filters (just the id when it has
    none, so entries built before those were recorded stay current)."""
    if req.kind == "conversion":
        return req.source
    _download_filters(req)  # what could pass for an option is refused, here as in the download
    return download_text(req.source, req.params)


def conversion_command(conversion: ConversionSpec, req: Requirement, python: str, model_path: str,
                       output: str) -> tuple[list[str], dict[str, str]]:
    """The framework's conversion argv and extra env for one requirement (no shell, ever).

    ``{extra_args}`` standing alone expands to its words, split as a shell would (``shlex.split``, as the
    framework's own ``convert_checkpoint`` does; never run through one); any other placeholder is replaced in place
    (the names the specs accept: ``CONVERSION_PLACEHOLDERS``, checked when checkpoints.yaml loads).
    The env is passed as written: the schema allows no placeholders there.
    """
    params = dict(req.params)
    values = {
        "python": python,
        "model_path": model_path,
        "output": output,
        "megatron_model_type": params.get("megatron_model_type", ""),
        "num_gpus_per_node": params.get("num_gpus_per_node", "1"),
        "extra_args": params.get("extra_args", ""),
    }
    try:
        extra = shlex.split(values["extra_args"])
    except ValueError as exc:  # the catalog says so at the call's line; a build never guesses the words
        raise BuildError(f"conversion {req.key}: extra_args {values['extra_args']!r} cannot be split into words "
                         f"({exc}); fix its quotes in the test's convert_checkpoint() call") from None
    try:
        argv: list[str] = []
        for part in conversion.command:
            if part == "{extra_args}":
                argv.extend(extra)
            else:
                argv.append(part.format(**values))
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise BuildError(
            f"conversion {req.key}: the checkpoints.yaml command has a placeholder it cannot fill ({exc}); "
            f"use only {{{'}, {'.join(values)}}}"
        ) from None
    return argv, dict(conversion.env)


def conversion_recipe(conversion: ConversionSpec, req: Requirement, repo: Path, env: dict[str, str],
                      image: str = "") -> Recipe:
    """What the conversion of ``req`` runs from ``repo``, wherever it runs: the argv and extra env with
    ``{python}``, ``{model_path}`` and ``{output}`` left as placeholders, and the checkout's files it runs.
    The launch-only ``{num_gpus_per_node}`` is left as a placeholder too: it changes how the conversion
    is launched, not what it writes (the catalog merges conversions differing only in it)."""
    launch = tuple(sorted({**dict(req.params), **{k: f"{{{k}}}" for k in LAUNCH_ONLY}}.items()))
    argv, conv_env = conversion_command(conversion, dataclasses.replace(req, params=launch), "{python}",
                                        "{model_path}", "{output}")
    pythonpath = conv_env.get("PYTHONPATH") or env.get("PYTHONPATH", "")
    return make_recipe(repo, argv, conv_env, pythonpath=pythonpath, image=image)


def stale_reason(marker: dict, req: Requirement, want: str = "", recipe: Recipe | None = None) -> str:
    """Why an entry whose completion ``marker`` is this is not what ``req`` asks for now ("" when it
    is): another source, or for a conversion another identity than ``want`` (which ``recipe`` of
    the marker's changed). The local cache and the build pods' run worker (Kubernetes) say it alike."""
    source = built_from(req)
    if marker.get("source", source) != source:
        return f"built from {marker.get('source')!r}, the catalog now says {source!r}"
    if req.kind == "conversion" and want and marker.get("identity") != want:
        if not marker.get("identity"):
            return "its marker records no conversion identity (built by an older nightly)"
        return f"the conversion's identity changed: {_recipe_change(marker.get('recipe'), recipe)}"
    return ""


def _recipe_change(old: object, new: Recipe | None) -> str:
    """Which part of a conversion's recipe differs from the one its marker records (for the log)."""
    if not isinstance(old, dict) or new is None:
        return "the recorded identity differs"
    if "argv" not in old:  # a build pod's marker that kept the recipe's digest only
        return "its model changed" if old.get("digest") == new.digest else \
            "its recipe changed (the marker records only the recipe's digest, not which part)"
    now = new.as_json()
    files_then, files_now = old.get("files") or {}, now["files"]
    changed = sorted(f for f in set(files_then) | set(files_now) if files_then.get(f) != files_now.get(f))
    said = [f"files {', '.join(changed)}"] if changed else []
    said += [f"its {part}" for part in ("argv", "env", "image") if old.get(part) != now[part]]
    return "; ".join(said) or "its model changed"


def _write_build_record(folder: Path, token: str, what: str, pgid: int) -> Path:
    """Name a running build and the night that runs it (see :meth:`AssetCache.reap_builds`)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{token}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"token": token, "what": what, "pgid": pgid, **owner_fields()}))
    os.replace(tmp, path)
    return path


def _run(argv: list[str], cwd: Path | None, env: dict[str, str], what: str, log_path: Path | None,
         timeout_s: float = BUILD_TIMEOUT_S, running: Path | None = None, fix: str = "",
         pass_fds: tuple[int, ...] = ()) -> None:
    """Run one build command in its own process group; past ``timeout_s``, or when the night is
    interrupted (Ctrl-C, SIGTERM, Dagster's terminate), the whole group is killed before this returns.

    Its processes carry a token in their environment, and with ``running`` (a folder) a record names
    it and this process, so a later night ends a build whose night was killed with ``kill -9``
    (:meth:`AssetCache.reap_builds`).

    A command that cannot start (not on PATH, the checkout folder gone) is a :class:`BuildError`
    saying so, with ``fix``: not a file error of the cache, which is what :meth:`AssetCache.build`
    makes of any other ``OSError``. ``pass_fds``: GPU lock files the command holds too (a night killed
    with ``kill -9`` leaves its GPUs locked until the command is ended, as a test's). Once it exits,
    what it left running (its marked processes, its group) is killed, as a test attempt's leftovers are."""
    token = f"build-{os.getpid()}-{time.monotonic_ns()}"
    env = {**env, PROC_MARKER: token}
    record = _write_build_record(running, token, what, 0) if running is not None else None
    try:
        try:
            proc = subprocess.Popen(with_signals_unblocked(argv, env), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, pass_fds=pass_fds,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
        except OSError as exc:
            if cwd is not None and not cwd.is_dir():
                raise BuildError(f"{what}: cannot start {argv[0]!r}: its folder {cwd} is missing") from None
            raise BuildError(f"{what}: cannot start {argv[0]!r} ({exc.strerror or exc})"
                             + (f"; {fix}" if fix else "")) from None
        if running is not None:
            _write_build_record(running, token, what, proc.pid)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_attempt(token, proc.pid)
            out, err = proc.communicate()
        except BaseException:  # interrupted: the converter must not outlive the night (it holds GPUs)
            kill_attempt(token, proc.pid)
            proc.wait()
            raise
        # what it left running (a daemon that closed its output; it holds the GPU locks it inherited) is
        # ended as what a test attempt leaves is: else it keeps the GPUs with the marker of a build
        left = {pid: describe(pid) for pid in marked_pids(token)}
        kill_attempt(token, proc.pid)
    finally:
        # kept while a process of the build is still alive, so the next night's reap_builds ends it
        if record is not None and not marked_pids(token):
            record.unlink(missing_ok=True)
    if left:
        err += f"\n# nightly: the command left {len(left)} process(es) running; killed: {', '.join(left.values())}\n"
    if timed_out:
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text(f"$ {argv!r}\n{out}{err}\n# killed after the {timeout_s:g} s build timeout\n")
        raise BuildError(f"{what}: command {argv!r} did not finish within the {timeout_s:g} s build timeout; "
                         "it was killed. If the build is just slow, raise the deployment's "
                         "`cache: {build_timeout_s: N}` in assets/cluster.yaml; else fix what it waits for.") from None
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(f"$ {argv!r}\n{out}{err}")
    if proc.returncode != 0:
        tail = (out + err).strip().splitlines()[-15:]
        raise BuildError(f"{what}: command {argv!r} exited {proc.returncode}:\n" + "\n".join(tail))
