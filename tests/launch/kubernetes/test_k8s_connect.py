"""An API server that accepts connections and never answers (a hung server, a black-holing load
balancer): every call has a deadline, so the doctor and the launcher say the cluster is
unreachable instead of hanging for ever; streams that may rightly be quiet are not cut."""

from __future__ import annotations

import socket
import textwrap
import threading

import pytest
from kubernetes import client

from pipelines.cli import main
from pipelines.launch.kubernetes import connect
from pipelines.launch.kubernetes.connect import TimedApiClient, core_v1_api
from pipelines.launch.kubernetes.launcher import KubernetesLauncher
from tests.launch.kubernetes import pods
from tests.launch.kubernetes.apiserver import StandInApiServer, Step
from tests.launch.kubernetes.test_k8s_launcher import DEPLOYMENT, request

SHORT = (0.5, 0.5)


@pytest.fixture
def silent_server():
    """The URL of a server that accepts every connection and never sends a byte."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    listener.close()
    for c in held:
        c.close()


def within(seconds: float, call):
    """``call()``'s result, or a test failure (not a hung test run) when it takes longer."""
    out: list = []
    worker = threading.Thread(target=lambda: out.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert out, f"still blocked after {seconds} s"
    return out[0]


def kubeconfig(tmp_path, url: str):
    path = tmp_path / "kubeconfig"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: v1
        kind: Config
        clusters: [{{name: h200, cluster: {{server: "{url}"}}}}]
        users: [{{name: launcher, user: {{token: t}}}}]
        contexts: [{{name: h200-launcher, context: {{cluster: h200, user: launcher}}}}]
        current-context: h200-launcher
    """))
    return path


def test_the_doctor_says_the_cluster_is_unreachable_instead_of_hanging(tmp_path, monkeypatch, capsys, silent_server):
    monkeypatch.setattr(connect, "REQUEST_TIMEOUT_S", SHORT)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code = within(20, lambda: main(["doctor", "--deployment", "production", "--kubeconfig",
                                    str(kubeconfig(tmp_path, silent_server)), "--no-pods"]))
    out = capsys.readouterr().out
    assert code == 1
    row = next(x for x in out.splitlines() if x.startswith("api: cluster unreachable"))
    assert "FAIL" in row and silent_server in row and "timed out" in row.lower()


def test_the_launcher_gives_api_unreachable_instead_of_blocking_in_the_create(tmp_path, monkeypatch, silent_server):
    monkeypatch.setattr(connect, "REQUEST_TIMEOUT_S", SHORT)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    api = core_v1_api(kubeconfig=str(kubeconfig(tmp_path, silent_server)))
    launch = KubernetesLauncher(api, DEPLOYMENT, retries=0, pin_nodes=False, backoff_s=0.01, api_attempts=2)
    final = within(20, lambda: launch.launch(request(tmp_path)))
    assert (final.outcome, final.reason, final.details["retriable"]) == ("infra_error", "api_unreachable", "false")


def test_watches_and_log_streams_are_not_cut_by_the_read_limit_of_plain_calls(tmp_path):
    """A pod quiet for longer than the read limit still passes with its whole log."""
    def quiet(pod, node):
        return [Step(mutate=pods.scheduled(node)), Step(mutate=pods.running(), logs=("step 1",)),
                Step(delay_s=1.5, logs=("step 2",)), Step(delay_s=0.1, mutate=pods.terminated("Succeeded", 0, "Completed"))]

    with StandInApiServer(script=quiet) as server:
        api = client.CoreV1Api(TimedApiClient(client.Configuration(host=server.url), timeout=(1.0, 0.5)))
        lines: list[str] = []
        launch = KubernetesLauncher(api, DEPLOYMENT, retries=0, pin_nodes=False, tick_s=0.05, watch_timeout_s=5,
                                    log_join_s=1.0)
        final = launch.launch(request(tmp_path), lines.append)
    assert final.outcome == "passed" and lines == ["step 1", "step 2"]
    watches = [path for method, path in server.requests if method == "GET" and path.endswith("/pods")]
    logs = [path for method, path in server.requests if method == "GET" and path.endswith("/log")]
    assert (len(watches), len(logs)) == (1, 1), "neither the watch nor the log stream was cut and opened again"


def test_each_kind_of_call_gets_its_limit():
    timed = TimedApiClient(client.Configuration(host="http://127.0.0.1:1"), timeout=(10.0, 60.0))
    assert timed.timeout_for([("labelSelector", "a=b")]) == (10.0, 60.0)
    assert timed.timeout_for([("watch", True), ("timeoutSeconds", 60)]) == (10.0, 60 + connect.WATCH_GRACE_S)
    assert timed.timeout_for([("follow", True), ("container", "test")]) == (10.0, None)
