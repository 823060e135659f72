"""The Dagster instance of the embedded default: SQLite storage in the project's state folder.

``nightly run`` and ``nightly ui`` (``dagster dev``) share it, so the UI shows every night
the command line ran. Production mode uses PostgreSQL instead (see k8s/helm/values.yaml).
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

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
    is a StateError that says what to do (``nightly ui`` exits 2 with it)."""
    from pipelines.storage.state import writable_home

    dagster_home = writable_home(Path(home)) / "dagster"
    dagster_home.mkdir(parents=True, exist_ok=True)
    path = dagster_home / "dagster.yaml"
    text = yaml.safe_dump(instance_yaml(Path(home)), sort_keys=False)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    os.environ["NIGHTLY_HOME"] = str(home)
    return dagster_home


def open_instance(home: Path):
    """The instance, its SQLite tables created under a lock (``run`` and ``ui`` race on a fresh home)."""
    import fcntl

    import dagster as dg

    dagster_home = ensure_dagster_home(home)
    with open(dagster_home / ".init.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return dg.DagsterInstance.get()
