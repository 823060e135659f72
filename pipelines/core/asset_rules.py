"""Where a cached asset may live and what it may be downloaded from.

One copy of the rules, said by ``assets/models.yaml`` / ``datasets.yaml`` validation, the catalog
(at a test's line) and the builds (local cache and build pods); kept here, apart from the catalog,
because the spec schema cannot import the catalog (the catalog imports the specs).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

#: a Hub id as ``hf download`` takes it: ``org/name``, never an option or a path
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
#: folders that hold other cached inputs (every model, every dataset, the shared-memory checkpoints): an
#: input built into one of them, or into a folder above them, would replace them all (a build removes its
#: folder before it renames the new one into place)
SHARED_FOLDERS = ("/root/models", "/root/datasets", "/dev/shm")
#: what a folder of the asset cache must look like (said by the catalog and by the builds)
CACHE_PATH_RULE = ("not a usable path for a cached asset; use an absolute path under /root, without '..', "
                   "inside a folder but never a folder that holds other inputs (/, /root, /root/models, "
                   "/root/datasets, /dev/shm) (e.g. /root/models/NAME)")


def _absolute(container_path: str) -> PurePosixPath:
    """``container_path`` as one absolute path (``//root//x`` is ``/root/x``: POSIX keeps a leading ``//``)."""
    return PurePosixPath("/" + container_path.lstrip("/"))


def hub_id_problem(source: str) -> str | None:
    """Why ``source`` is not a Hub id a download may fetch, or None. Said before a night whose build
    would refuse it (it never reaches ``hf`` or the hub folder)."""
    if HUB_ID.match(source) and ".." not in source:
        return None
    return f"{source!r} is not a Hub id (org/name)"


def under_root(container_path: str) -> bool:
    """``container_path`` is ``/root`` or in it: what the local deployment shows its tests (repos.yaml's env
    ``{cache}`` stands for ``/root``); an input anywhere else is built into the cache but not found there."""
    return container_path == "/root" or container_path.startswith("/root/")


def holds_others(container_path: str) -> bool:
    """``container_path`` is one of :data:`SHARED_FOLDERS` or a folder above one (``/root/models/`` as a
    download's ``--local-dir``): building an input there would delete every cached input under it."""
    path = str(_absolute(container_path)).rstrip("/") + "/"
    return any(f"{shared}/".startswith(path) for shared in SHARED_FOLDERS)


#: the cache's folder for container paths outside /root (``/dev/shm/x`` -> ``_outside_root/dev/shm/x``):
#: ``/root/x`` is ``x``, so ``/x`` must be elsewhere or the two would be one folder; ``/root/_outside_root``
#: is refused for the same reason
OUTSIDE_ROOT = "_outside_root"


def cache_relpath(container_path: str, *, entry: bool = True) -> str | None:
    """Where a test's container path lives in the asset cache (``/root/models/x`` -> ``models/x``,
    ``/dev/shm/x`` -> ``_outside_root/dev/shm/x``), or None where it cannot: a relative path, the cache's
    root itself, ``/root/_outside_root``, or one whose '..' leaves the cache; and for an input's own folder
    (``entry``, not a volume's mount point) a folder holding other inputs (:func:`holds_others`)."""
    parts = _absolute(container_path).parts
    if not container_path.startswith("/") or ".." in parts:
        return None
    if parts[:2] == ("/", "root"):
        rel = () if parts[2:3] == (OUTSIDE_ROOT,) else parts[2:]
    else:
        rel = (OUTSIDE_ROOT, *parts[1:]) if parts[1:] else ()
    if not rel or (entry and holds_others(container_path)):
        return None
    return "/".join(rel)


def cache_path_problem(container_path: str) -> str | None:
    """Why a download's or conversion's folder cannot be in the asset cache, or None."""
    if cache_relpath(container_path) is not None:
        return None
    parts = _absolute(container_path).parts
    if container_path.startswith("/") and ".." not in parts and holds_others(container_path):
        return (f"{container_path!r} holds other cached inputs: building into it would delete every one of them; "
                "use a folder of its own inside it (e.g. /root/models/NAME, /dev/shm/NAME)")
    if container_path.startswith("/") and parts[:3] == ("/", "root", OUTSIDE_ROOT):
        return (f"{container_path!r} is inside /root/{OUTSIDE_ROOT}, where the asset cache keeps the folders of "
                "container paths outside /root; use another folder name")
    return f"{container_path!r} is {CACHE_PATH_RULE}"


#: the ``hf download`` options a download's requirement may carry (``files`` are the names after its id)
DOWNLOAD_OPTIONS = ("exclude", "include", "revision")
#: ``hf download --revision``: a branch, tag or commit, one word, never an option (models.yaml's pattern too)
REVISION = re.compile(r"^[^-\s][^\s]*$")


def download_option_problem(option: str, value: str) -> str | None:
    """Why a download's ``--revision``, ``--include`` / ``--exclude`` patterns or file names (``files``) cannot
    reach ``hf download``, or None: what could pass for an option never does. Said by the catalog at the
    line of the ``prepare()`` download, and by the builds (local cache and build pods)."""
    if option == "revision":
        return None if REVISION.match(value) else f"--revision {value!r} is not a revision (a branch, tag or commit)"
    bad = next((w for w in value.split() if w.startswith("-")), None)
    if bad is None:
        return None
    return f"{bad!r} is not a file name" if option == "files" else f"--{option} {bad!r} is not a file pattern"


def download_text(source: str, params: tuple[tuple[str, str], ...]) -> str:
    """A download as one line: its Hub id, the file names, then its revision and filter options
    (just the id when it has none). What its completion marker records as ``source`` and what the
    catalog shows of it, so the two never read differently."""
    files = [" ".join(v.split()) for k, v in params if k == "files"]
    options = [f"--{k} {' '.join(v.split()) if k != 'revision' else v}" for k, v in params if k in DOWNLOAD_OPTIONS]
    return " ".join([source, *files, *options])
