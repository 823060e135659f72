"""A throwaway S3 server (moto) for tests that talk real boto3 over HTTP (about 1.5 s to start)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

#: moto accepts any credentials; tests set these so boto3 never looks for real ones
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def _moto_server() -> str:
    here = Path(sys.executable).parent / "moto_server"
    found = str(here) if here.exists() else shutil.which("moto_server")
    if not found:
        raise RuntimeError("moto_server is not installed; run `make install` (it comes with moto[server])")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def moto_server(timeout_s: float = 180, auth_after: int | None = None) -> Iterator[str]:
    """Yield the endpoint URL of a fresh moto S3 server; stop it after.

    It answers after ~3 s idle (importing moto); ``timeout_s`` only stops a hang on a loaded machine.
    ``auth_after=N``: moto checks credentials from the N+1-th request on and refuses the test ones
    (InvalidAccessKeyId), as S3 does when credentials expire mid-night.
    """
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, **CREDENTIALS}
    if auth_after is not None:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(auth_after)
    log = tempfile.TemporaryFile()  # a file, not a pipe: moto logs every request and a full pipe blocks it
    proc = subprocess.Popen([_moto_server(), "-H", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"moto_server exited with {proc.returncode}: {log.read().decode()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/moto-api/", timeout=1):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not answer on {url} within {timeout_s} s") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def s3_client(endpoint: str):
    """A boto3 S3 client for the test server, with the test credentials."""
    import boto3

    return boto3.session.Session(
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"], aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
    ).client("s3", endpoint_url=endpoint)


class Refuse:
    """A botocore hook on every S3 client the nightly makes: requests ``refused(operation, key)``
    picks fail with ``code``, as S3 answers an expired key or a policy that lacks the action."""

    def __init__(self, refused, code: str = "AccessDenied"):
        self.refused, self.code, self.count = refused, code, 0

    def __call__(self, params, model, **_):
        if self.refused(model.name, params.get("Key", "")):
            from botocore.exceptions import ClientError

            self.count += 1
            raise ClientError({"Error": {"Code": self.code, "Message": f"refused ({self.code})"}}, model.name)

    def install(self, monkeypatch) -> None:
        from pipelines.storage import s3

        make_client = s3.make_client

        def refusing_client(endpoint_url=None):
            c = make_client(endpoint_url)
            c.meta.events.register("before-parameter-build.s3", self)
            return c

        monkeypatch.setattr(s3, "make_client", refusing_client)
