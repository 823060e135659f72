"""A throwaway PostgreSQL server for the production-mode tests (about a second to start)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator


def _bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))), None)
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed; run `make system-deps`")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(argv: list[str]) -> list[str]:
    return argv if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *argv]


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Yield a ``postgresql://`` URL of a fresh server and database; stop and remove it after."""
    root = tempfile.mkdtemp(prefix="nightly-pg-")
    data, sock = os.path.join(root, "data"), os.path.join(root, "sock")
    os.makedirs(sock)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    port = _free_port()
    subprocess.run(_as_postgres([_bin("initdb"), "-D", data, "-U", "nightly", "--auth=trust", "-E", "UTF8"]),
                   check=True, capture_output=True)
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(_as_postgres([_bin("pg_ctl"), "-D", data, "-o", opts, "-w", "-l", os.path.join(root, "log"), "start"]),
                   check=True, capture_output=True)
    try:
        subprocess.run(_as_postgres([_bin("createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "nightly", "dagster"]),
                       check=True, capture_output=True)
        yield f"postgresql://nightly@127.0.0.1:{port}/dagster"
    finally:
        subprocess.run(_as_postgres([_bin("pg_ctl"), "-D", data, "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
