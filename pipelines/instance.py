"""The Dagster instance of the embedded default: SQLite storage in the project's state folder.

``nightly run`` and ``nightly ui`` (``dagster dev``) share it, so the UI shows every night
the command line ran. With ``NIGHTLY_POSTGRES_URL`` set it uses that PostgreSQL instead, as production
does (see k8s/helm/values.yaml and docs/storage.md).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from pipelines.storage.state import StateError

POSTGRES_ENV = "NIGHTLY_POSTGRES_URL"


def instance_yaml(home: Path) -> dict:
    """dagster.yaml content: SQLite by default, PostgreSQL when NIGHTLY_POSTGRES_URL is set."""
    cfg: dict = {
        "telemetry": {"enabled": False},
        "nux": {"enabled": False},
        "run_coordinator": {
            "module": "dagster.core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": {"max_concurrent_runs": 4},
        },
    }
    url = os.environ.get(POSTGRES_ENV)
    if url:
        # by reference: the password stays in the environment, never in dagster.yaml
        cfg["storage"] = {"postgres": {"postgres_url": {"env": POSTGRES_ENV}}}
    else:
        cfg["storage"] = {"sqlite": {"base_dir": str(home / "dagster" / "storage")}}
    return cfg


def ensure_dagster_home(home: Path) -> Path:
    """Create ``<home>/dagster/dagster.yaml`` and point ``DAGSTER_HOME`` at it; an unwritable home
    is a StateError that says what to do (``nightly ui`` exits 2 with it). The file is generated: one
    that differs (edited, garbled, no UTF-8 text) is written again."""
    from pipelines.storage.state import writable_home

    dagster_home = writable_home(Path(home)) / "dagster"
    dagster_home.mkdir(parents=True, exist_ok=True)
    path = dagster_home / "dagster.yaml"
    text = yaml.safe_dump(instance_yaml(Path(home)), sort_keys=False)
    if not path.exists() or path.read_bytes() != text.encode("utf-8"):  # bytes: a damaged one need not decode
        path.write_text(text, encoding="utf-8")
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    os.environ["NIGHTLY_HOME"] = str(home)
    return dagster_home


class InstanceError(StateError):
    """The Dagster instance's storage cannot be reached; the message names it (never the password)."""


#: seconds one connection attempt to NIGHTLY_POSTGRES_URL may take before it is an error
CONNECT_TIMEOUT_S = 10


def _where(url: str) -> str:
    """``HOST:PORT/DB`` of a PostgreSQL URL: what a message may show of it (no user, no password)."""
    parts = urlsplit(url)
    try:
        port = parts.port or 5432
    except ValueError:
        port = "?"
    return f"{parts.hostname or '?'}:{port}/{parts.path.lstrip('/') or '?'}"


def _masked(text: str, url: str) -> str:
    """``text`` with the URL's password shown as ``***`` where it stands as the password (``:PASSWORD@``,
    ``password=PASSWORD``), never replaced elsewhere: a short password such as ``p`` is also a letter of
    the driver's words, and replacing it there garbles the message and gives the password away."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if not password:
        return text
    pw = re.escape(password)
    text = re.sub(f"(?<=:){pw}(?=@)", "***", text)
    return re.sub(f"(password\\s*=\\s*['\"]?){pw}(?=['\"]?(\\s|$))", r"\1***", text)


def _refused(url: str, exc: BaseException) -> InstanceError:
    first = _masked(next((line.strip() for line in str(getattr(exc, "orig", None) or exc).splitlines() if line.strip()),
                         ""), url)
    return InstanceError(f"{POSTGRES_ENV}: cannot connect to {_where(url)} ({type(exc).__name__}: {first}); "
                         "check the server or unset it to use SQLite")


#: the URL schemes Dagster's PostgreSQL storage (SQLAlchemy with psycopg2) reads
SCHEMES = ("postgresql", "postgresql+psycopg2")


def check_postgres(url: str) -> None:
    """One connection within CONNECT_TIMEOUT_S: an unreachable server is one line at once, not
    Dagster's five retries per storage and a stack. A scheme SQLAlchemy would refuse after the
    check (``postgres://``, which psycopg2 accepts) or cannot drive (``postgresql+psycopg://``) is
    refused first, saying which to write."""
    import psycopg2

    scheme, sep, rest = url.partition("://")
    if scheme not in SCHEMES:
        rest = _masked(rest, url) if sep else "USER:PASSWORD@HOST:5432/DB"
        raise InstanceError(f"{POSTGRES_ENV}: {scheme + '://' if sep else 'a URL without a scheme'} is not read by "
                            f"Dagster's PostgreSQL storage; write postgresql://{rest} (or postgresql+psycopg2://)")

    try:
        psycopg2.connect(url.replace("postgresql+psycopg2://", "postgresql://", 1),
                         connect_timeout=CONNECT_TIMEOUT_S).close()
    except psycopg2.Error as exc:
        raise _refused(url, exc) from exc


def open_instance(home: Path):
    """The instance, its SQLite tables created under a lock (``run`` and ``ui`` race on a fresh home);
    with NIGHTLY_POSTGRES_URL, the server is checked first (InstanceError when it cannot be reached)."""
    import fcntl

    import dagster as dg

    url = os.environ.get(POSTGRES_ENV)
    if url:
        check_postgres(url)
    dagster_home = ensure_dagster_home(home)
    with open(dagster_home / ".init.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return dg.DagsterInstance.get()
        except Exception as exc:  # a server that went away between the check and Dagster's connections
            if url and type(exc).__name__ in ("DagsterPostgresException", "OperationalError"):
                raise _refused(url, exc.__cause__ or exc) from exc
            raise
