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
#: what a folder of the asset cache must look like (said by the catalog and by the builds)
CACHE_PATH_RULE = "not a usable path for a cached asset; use an absolute path under /root, without '..' (e.g. /root/models/NAME)"


def hub_id_problem(source: str) -> str | None:
    """Why ``source`` is not a Hub id a download may fetch, or None. Said before a night whose build
    would refuse it (it never reaches ``hf`` or the hub folder)."""
    if HUB_ID.match(source) and ".." not in source:
        return None
    return f"{source!r} is not a Hub id (org/name)"


def cache_relpath(container_path: str) -> str | None:
    """Where a test's container path lives in the asset cache (``/root/models/x`` -> ``models/x``,
    ``/dev/shm/x`` -> ``dev/shm/x``), or None where it cannot: a relative path, the cache's root itself,
    or one whose '..' leaves the cache."""
    parts = PurePosixPath(container_path).parts
    rel = parts[2:] if parts[:2] == ("/", "root") else parts[1:]
    if not container_path.startswith("/") or not rel or ".." in rel:
        return None
    return "/".join(rel)


def cache_path_problem(container_path: str) -> str | None:
    """Why a download's or conversion's folder cannot be in the asset cache, or None."""
    return None if cache_relpath(container_path) is not None else f"{container_path!r} is {CACHE_PATH_RULE}"


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
