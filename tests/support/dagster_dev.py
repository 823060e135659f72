"""``dagster dev -w workspace.yaml`` as ``make ui`` starts it, for the UI tests: start, wait, query, stop.

One place for what both UI modules need: the instance's schemas created before the webserver and
the daemon race to create them, the process group started in its own session (so stopping it
reaches the code servers too), a wait that fails with the log when the code location does not
load, GraphQL calls the UI itself makes, and a stop that never leaves a process behind.
All limits are hang guards: nothing here judges how fast the machine is.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
DAGSTER = Path(sys.executable).parent / "dagster"
# `dagster dev` answers after ~10 s idle and ~40 s on a busy 2-CPU machine; the limit only stops a hang
START_TIMEOUT_S = 300
GRAPHQL_TIMEOUT_S = 120  # a query answers in < 1 s idle; the first ones load the code location
_LOADED = ("{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus "
           "locationOrLoadError { __typename ... on PythonError { message } } } } } }")


@dataclass(frozen=True)
class DagsterDev:
    url: str
    proc: subprocess.Popen
    log: Path

    def wait_until_loaded(self) -> None:
        """Until the webserver answers and the code location is loaded; fail with the log otherwise."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"dagster dev exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                entries = graphql(self.url, _LOADED)["workspaceOrError"]["locationEntries"]
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                entries = []
            for e in entries:
                loaded = e["locationOrLoadError"] or {}
                if loaded.get("__typename") == "PythonError":
                    pytest.fail(f"code location {e['name']} failed to load: {loaded['message']}")
                if e["loadStatus"] == "LOADED" and loaded.get("__typename") == "RepositoryLocation":
                    return
            time.sleep(0.5)
        pytest.fail(f"dagster dev not ready after {START_TIMEOUT_S}s:\n{self.log.read_text()[-3000:]}")


@contextmanager
def dagster_dev(env: dict[str, str], home: Path) -> Iterator[DagsterDev]:
    """Start ``dagster dev`` on the instance ``env`` names (DAGSTER_HOME, written by ``nightly ui
    --print-command`` beforehand); its output goes to ``home/dagster-dev.log``. Stopped on exit.

    The caller waits with :meth:`DagsterDev.wait_until_loaded` when it needs the UI, so work such
    as a night can run while the webserver starts."""
    # create the SQLite schemas once: `dagster dev` and a night would otherwise race to create them
    # ("table alembic_version already exists") on a fresh state folder
    subprocess.run([sys.executable, "-c", "import dagster; dagster.DagsterInstance.get()"], env=env,
                   timeout=START_TIMEOUT_S, check=True)
    port = free_port()
    log = home / "dagster-dev.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            ["env", "--default-signal=INT,TERM", str(DAGSTER), "dev", "-w", str(PROJECT / "workspace.yaml"),
             "-h", "127.0.0.1", "-p", str(port)],
            cwd=PROJECT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield DagsterDev(f"http://127.0.0.1:{port}", proc, log)
    finally:
        stop(proc)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(url: str, query: str, variables: dict | None = None) -> dict:
    """The query's data; a GraphQL error fails the test with the server's message."""
    req = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=GRAPHQL_TIMEOUT_S) as resp:
        body = json.loads(resp.read())
    assert not body.get("errors"), body["errors"]
    return body["data"]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def group_members(pgid: int, proc: Path = Path("/proc")) -> str:
    """"PID STATE ARGS" per process of the group, as `ps -o pid,stat,args -g` shows them, read from
    /proc: a machine or image without procps has no `ps`, and the stop must still kill the group."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:  # the process may end while it is read
            state, _ppid, group = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
            if int(group) != pgid:
                continue
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError):
            continue
        found.append((int(entry.name), f"{entry.name} {state} {args}"))
    return "\n".join(line for _, line in sorted(found))


def stop(proc: subprocess.Popen, grace_s: float = 12) -> None:
    """SIGTERM to the whole process group (webserver, daemon, code servers), wait for all of it.

    It usually exits in ~5 s; now and then a code server lingers, so after ``grace_s`` the group
    gets SIGKILL and a warning names what was left.
    """
    if group_alive(proc.pid):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while group_alive(proc.pid) and time.monotonic() < deadline:
        proc.poll()  # reap the leader so the group can empty
        time.sleep(0.2)
    if group_alive(proc.pid):
        warnings.warn(f"dagster dev left processes after SIGTERM + {grace_s}s; killing:\n"
                      f"{group_members(proc.pid)[:2000]}", stacklevel=1)
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
