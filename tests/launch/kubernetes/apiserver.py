"""A stand-in Kubernetes API server for the launcher tests (no cluster here).

A small threaded HTTP server on 127.0.0.1 that speaks the JSON the real ``kubernetes`` client
uses for the calls the launcher makes: create/get/list/delete pods, ``?watch=true`` chunked
event streams (with resourceVersion and timeoutSeconds), ``pods/{name}/log`` (follow),
``GET nodes`` (label selectors) and ``PATCH nodes/{name}``. A *script* decides how each created
pod evolves: a list of steps, each mutating the stored pod (phase, conditions, container
states) and/or appending log lines, or deleting it. Each log line gets its time as it is added
(the kubelet's), sent before it with ``timestamps=true`` (RFC3339, nanoseconds), as a real one
does. The "scheduler" picks the first node the pod's ``nodeSelector``, tolerations (of the node's
NoSchedule/NoExecute taints) and required node affinity allow, matched as kube-scheduler does
(``matchExpressions`` against the node's labels, ``matchFields`` against its name), so retries avoiding a failed node really land elsewhere and
pinned pods land on their node. The QoS class is computed from the containers' resources as the
real API server does.

Like a real 1.31 API server it refuses (422 Invalid) a pod whose env names, label values (its own
and its ``nodeSelector``'s) or node field selectors (``matchFields``: ``metadata.name``, In/NotIn,
one value each) it would refuse, so a test notices a pod that no real cluster would create, and
answers a node listing whose label selector holds a bad value with 400. Faults a real API server has:
:meth:`StandInApiServer.fail` answers the next matching calls with 429/5xx or drops the
connection (before or after doing the work); ``log_cuts`` cuts follow streams mid-way (after
``log_cut_after`` lines; ``log_cut_how``: between chunks, or mid-chunk with a close or a TCP reset), and
``on_log_cut`` runs as one is cut, e.g. :meth:`StandInApiServer.rotate`:
the kubelet rotated the container's log, and the logs endpoint then reads the newest file only.

This checks the launcher's lifecycle against the API's shapes, not a real kubelet: it is a
stand-in, and the docs say so.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubernetes import client

from tests.launch.kubernetes.objects import gpu_node, qos_class

Mutation = Callable[[dict[str, Any]], None]
__all__ = ["Fault", "StandInApiServer", "Step", "gpu_node", "now", "qos_class"]


@dataclass
class Step:
    """After ``delay_s``: apply ``mutate`` to the pod, add ``logs``; ``delete`` removes the pod.

    ``work``, when set, runs first without the server's lock (e.g. really running the
    container, see ``kubelet.py``) and returns the step to apply in its place.
    """

    delay_s: float = 0.01
    mutate: Mutation | None = None
    logs: tuple[str, ...] = ()
    delete: bool = False
    work: Callable[[], Step] | None = None


Script = Callable[[dict[str, Any], str], list[Step]]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _State:
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    logs: dict[str, list[str]] = field(default_factory=dict)
    stamps: dict[str, list[str]] = field(default_factory=dict)  # each line's time, as the kubelet took it
    log_start: dict[str, int] = field(default_factory=dict)  # the first line of the newest log file
    ended: set[str] = field(default_factory=set)


@dataclass
class Fault:
    """Answer the next ``times`` calls of ``method`` whose path contains ``fragment`` with
    ``status`` (0: drop the connection); ``after``: do the work first, then drop the answer."""

    method: str
    fragment: str
    status: int
    times: int = 1
    after: bool = False


class StandInApiServer:
    def __init__(self, nodes: tuple[str, ...] = ("h200-a", "h200-b", "h200-c", "h200-d"), script: Script | None = None,
                 node_objects: list[dict[str, Any]] | None = None):
        self.node_objects = node_objects if node_objects is not None else [gpu_node(n) for n in nodes]
        self.nodes = tuple(n["metadata"]["name"] for n in self.node_objects)
        self.script: Script = script or (lambda pod, node: [])
        self.state = _State()
        self.cond = threading.Condition()
        self.rv = itertools.count(100)
        self.created: list[dict[str, Any]] = []  # bodies as POSTed
        self.deleted: list[str] = []  # DELETE calls by the client
        self.patches: list[tuple[str, str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.faults: list[Fault] = []
        #: what ``nightly doctor`` reads: RBAC answers, PVCs, Kueue objects (path after /apis/kueue.x-k8s.io/v1beta1/)
        self.denied: set[tuple[str, str]] = set()  # (resource[/subresource], verb) a SelfSubjectAccessReview denies
        self.pvcs: dict[str, dict[str, Any]] = {}
        self.kueue: dict[str, dict[str, Any]] = {}
        self.log_cuts = 0  # follow streams still to cut after their first ``log_cut_after`` lines
        self.log_cut_after = 1
        self.on_log_cut: Callable[[str], None] | None = None  # called with the pod's name as a stream is cut
        #: how a stream is cut: "close" after whole chunks; "mid_chunk": half of the next chunk's bytes, then
        #: closed (the client reads an incomplete chunk); "reset": the same, then reset (TCP RST, not FIN)
        self.log_cut_how = "close"
        #: a slow link to the kubelet: each line of a follow stream comes this long after the one before
        self.log_line_delay_s = 0.0
        #: a proxy that keeps follow streams open after the container ended (they never end by themselves)
        self.log_held_open = False
        self.stopping = False
        server = self

        class Handler(_Handler):
            api = server

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> StandInApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    def fail(self, method: str, fragment: str, status: int, times: int = 1, after: bool = False) -> None:
        self.faults.append(Fault(method, fragment, status, times, after))

    def fault_for(self, method: str, path: str) -> Fault | None:
        with self.cond:
            for f in self.faults:
                if f.method == method and f.fragment in path and f.times > 0:
                    f.times -= 1
                    return f
        return None

    def core_v1(self) -> client.CoreV1Api:
        """The real client, configured against this server."""
        cfg = client.Configuration(host=self.url)
        return client.CoreV1Api(client.ApiClient(cfg))

    # -- state changes (hold no lock when calling) --------------------------------------
    def _emit(self, etype: str, pod: dict[str, Any]) -> None:
        pod["metadata"]["resourceVersion"] = str(next(self.rv))
        self.state.events.append((int(pod["metadata"]["resourceVersion"]), etype, copy.deepcopy(pod)))
        self.cond.notify_all()

    def schedule(self, pod: dict[str, Any]) -> str:
        """The first node the pod's ``nodeSelector`` and required node affinity allow ("" when none fits)."""
        return next((n["metadata"]["name"] for n in self.node_objects if fits(pod, n)), "")

    def create(self, ns: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body["metadata"]["name"]
        invalid = invalid_fields(body)
        if invalid:  # what a real 1.31 API server answers: the pod is never created, on any node
            return 422, _status(422, "Invalid", f'Pod "{name}" is invalid: ' + ", ".join(invalid))
        with self.cond:
            if name in self.state.pods:
                return 409, _status(409, "AlreadyExists", f'pods "{name}" already exists')
            self.created.append(copy.deepcopy(body))
            pod = copy.deepcopy(body)
            pod["metadata"].update(namespace=ns, uid=f"uid-{len(self.created)}", creationTimestamp=now())
            pod["status"] = {"phase": "Pending", "qosClass": qos_class(pod["spec"])}
            self.state.pods[name] = pod
            self.state.logs[name] = []
            self.state.stamps[name] = []
            self._emit("ADDED", pod)
            node = self.schedule(pod)
            steps = self.script(copy.deepcopy(pod), node)
            result = copy.deepcopy(pod)
        threading.Thread(target=self._drive, args=(name, steps), daemon=True).start()
        return 201, result

    def _drive(self, name: str, steps: list[Step]) -> None:
        for step in steps:
            time.sleep(step.delay_s)
            if step.work is not None:
                step = step.work()
            with self.cond:
                pod = self.state.pods.get(name)
                if pod is None or self.stopping:
                    return
                self.state.logs[name].extend(step.logs)
                self.state.stamps[name].extend(stamp() for _ in step.logs)
                if step.mutate:
                    step.mutate(pod)
                if step.delete:
                    self._remove(name)
                else:
                    self._emit("MODIFIED", pod)

    def _remove(self, name: str) -> dict[str, Any]:
        pod = self.state.pods.pop(name)
        pod["metadata"].setdefault("deletionTimestamp", now())
        self.state.ended.add(name)
        self._emit("DELETED", pod)
        return pod

    def rotate(self, name: str, first: int) -> None:
        """The kubelet rotated ``name``'s log: a stream opened from now on starts at line ``first``
        (0-based), as the logs endpoint reads only the newest file; one already open goes on."""
        with self.cond:
            self.state.log_start[name] = first

    def delete(self, name: str) -> tuple[int, dict[str, Any]]:
        with self.cond:
            self.deleted.append(name)
            if name not in self.state.pods:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            return 200, self._remove(name)


#: apimachinery's IsEnvVarName and label-value rules as Kubernetes 1.31 applies them
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def invalid_fields(pod: dict[str, Any]) -> list[str]:
    """The env names, label values and node field selectors of ``pod`` a real API server refuses (422),
    in its words."""
    out = []
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(pod.get("spec", {}).get(kind) or ()):
            for j, e in enumerate(c.get("env") or ()):
                if not _ENV_NAME.fullmatch(e.get("name", "")):
                    out.append(f'spec.{kind}[{i}].env[{j}].name: Invalid value: "{e.get("name")}": a valid environment '
                               "variable name must consist of alphabetic characters, digits, '_', '-', or '.', and "
                               "must not start with a digit")
    required = ((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for i, term in enumerate(required.get("nodeSelectorTerms") or ()):
        for j, f in enumerate(term.get("matchFields") or ()):
            where = f"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}].matchFields[{j}]"
            if f.get("key") != "metadata.name":
                out.append(f'{where}.key: Invalid value: "{f.get("key")}": not a valid field selector key')
            if f.get("operator") not in ("In", "NotIn"):
                out.append(f'{where}.operator: Invalid value: "{f.get("operator")}": not a valid selector operator')
            elif len(f.get("values") or ()) != 1:
                out.append(f"{where}.values: Required value: must be only one value when `operator` is 'In' or "
                           "'NotIn' for node field selector")
    for key, value in ((pod.get("spec") or {}).get("nodeSelector") or {}).items():  # ValidatePodSpec: labels
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            out.append(f'spec.nodeSelector: Invalid value: "{value}": a valid label must be an empty string or consist '
                       f"of alphanumeric characters, '-', '_' or '.' (key {key})")
    for value in (pod.get("metadata", {}).get("labels") or {}).values():
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            out.append(f'metadata.labels: Invalid value: "{value}": a valid label must be an empty string or consist '
                       "of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
                       "character (at most 63)")
    return out


def _requirement_holds(req: dict[str, Any], value: str | None) -> bool:
    """One NodeSelectorRequirement against a node's label (or field) value, None when it has none."""
    op, values = req["operator"], req.get("values") or []
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    try:  # Gt / Lt: integers
        have, want = int(value or ""), int(values[0])
    except (ValueError, IndexError):
        return False
    return have > want if op == "Gt" else have < want


def _term_holds(term: dict[str, Any], node: dict[str, Any]) -> bool:
    """A nodeSelectorTerm as kube-scheduler reads it: ``matchExpressions`` against the node's labels,
    ``matchFields`` against its fields (only ``metadata.name`` exists); all must hold; an empty
    term matches no node."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    labels = node["metadata"].get("labels") or {}
    node_fields = {"metadata.name": node["metadata"]["name"]}
    return (all(_requirement_holds(e, labels.get(e["key"])) for e in exprs)
            and all(_requirement_holds(f, node_fields.get(f["key"])) for f in fields))


def _taint_tolerated(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    """kube-scheduler's TaintToleration: an empty effect matches every effect, ``Exists`` the key (an
    empty key: every taint), ``Equal`` (the default) the key and the value."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t["key"] == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def fits(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether the scheduler may put ``pod`` on ``node``: every ``nodeSelector`` label equal, every
    NoSchedule/NoExecute taint tolerated (a lost node's ``node.kubernetes.io/unreachable``), and one of
    the required affinity's terms holding (resources are not modelled)."""
    labels = node["metadata"].get("labels") or {}
    spec = pod.get("spec") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    if any(t.get("effect") in ("NoSchedule", "NoExecute") and not _taint_tolerated(t, spec.get("tolerations") or [])
           for t in (node.get("spec") or {}).get("taints") or ()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    return any(_term_holds(t, node) for t in required.get("nodeSelectorTerms") or [])


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}


def _matches(pod: dict[str, Any], q: dict[str, str]) -> bool:
    fs = q.get("fieldSelector", "")
    if fs.startswith("metadata.name=") and pod["metadata"]["name"] != fs.split("=", 1)[1]:
        return False
    for term in filter(None, q.get("labelSelector", "").split(",")):
        k, _, v = term.partition("=")
        if (pod["metadata"].get("labels") or {}).get(k) != v:
            return False
    return True


class _Handler(BaseHTTPRequestHandler):
    api: StandInApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, code: int, obj: Any) -> None:
        f = getattr(self, "fault", None)
        if f is not None and f.after:  # the work is done; the answer is lost
            self.close_connection = True
            self.connection.shutdown(2)
            return
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _route(self) -> tuple[list[str], dict[str, str]]:
        u = urlparse(self.path)
        self.api.requests.append((self.command, u.path))
        self.fault = self.api.fault_for(self.command, u.path)
        return u.path.strip("/").split("/"), {k: v[-1] for k, v in parse_qs(u.query).items()}

    def _faulted(self) -> bool:
        """Answer with the fault instead of doing the work (True), unless it strikes after the work."""
        f = getattr(self, "fault", None)
        if f is None or f.after:
            return False
        if self.command in ("POST", "PATCH", "DELETE"):
            self._body()
        if f.status == 0:
            self.close_connection = True
            self.connection.shutdown(2)
        else:
            self.send_response(f.status)
            data = json.dumps(_status(f.status, "Stand-in fault", f"stand-in fault {f.status}")).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if f.status == 429:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(data)
        return True

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"null")

    def do_POST(self) -> None:
        parts, _ = self._route()
        if self._faulted():
            return
        if parts[:3] == ["apis", "authorization.k8s.io", "v1"] and parts[3:] == ["selfsubjectaccessreviews"]:
            review = self._body()
            attrs = review["spec"]["resourceAttributes"]
            resource = attrs["resource"] + (f"/{attrs['subresource']}" if attrs.get("subresource") else "")
            review["status"] = {"allowed": (resource, attrs["verb"]) not in self.api.denied}
            return self._send(201, review)
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and parts[4] == "pods":
            self._send(*self.api.create(parts[3], self._body()))
        else:
            self._send(404, _status(404, "NotFound", self.path))

    def do_DELETE(self) -> None:
        parts, _ = self._route()
        if self._faulted():
            return
        self._body()
        if len(parts) == 6 and parts[4] == "pods":
            self._send(*self.api.delete(parts[5]))
        else:
            self._send(404, _status(404, "NotFound", self.path))

    def do_PATCH(self) -> None:
        parts, _ = self._route()
        if self._faulted():
            return
        body, ctype = self._body(), self.headers.get("Content-Type", "")
        if parts[:3] != ["api", "v1", "nodes"] or len(parts) != 4:
            return self._send(404, _status(404, "NotFound", self.path))
        if ctype.startswith("application/json-patch+json") and not isinstance(body, list):
            # what a real API server answers when a merge patch is sent as a JSON Patch
            return self._send(422, _status(422, "Invalid", "json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp"))
        self.api.patches.append((parts[3], ctype, body))
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": parts[3]}, "spec": {}}
        node["spec"].update((body or {}).get("spec", {}))
        self._send(200, node)

    def do_GET(self) -> None:
        parts, q = self._route()
        if self._faulted():
            return
        if parts[:3] == ["api", "v1", "nodes"]:
            return self._nodes(parts, q)
        if len(parts) == 6 and parts[4] == "persistentvolumeclaims":
            pvc = self.api.pvcs.get(parts[5])
            return self._send(200, pvc) if pvc else self._send(404, _status(404, "NotFound", f'persistentvolumeclaims "{parts[5]}" not found'))
        if parts[:3] == ["apis", "kueue.x-k8s.io", "v1beta1"]:
            obj = self.api.kueue.get("/".join(parts[3:]))
            return self._send(200, obj) if obj else self._send(404, _status(404, "NotFound", "/".join(parts[3:]) + " not found"))
        if parts[:3] != ["api", "v1", "namespaces"] or len(parts) < 5 or parts[4] != "pods":
            return self._send(404, _status(404, "NotFound", self.path))
        if len(parts) == 5 and q.get("watch", "").lower() == "true":
            return self._watch(q)
        if len(parts) == 5:
            with self.api.cond:
                items = [copy.deepcopy(p) for p in self.api.state.pods.values() if _matches(p, q)]
                rv = str(next(self.api.rv))
            return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items})
        name = parts[5]
        if len(parts) == 7 and parts[6] == "log":
            return self._log(name, q.get("follow", "").lower() == "true", q.get("timestamps", "").lower() == "true")
        with self.api.cond:
            pod = copy.deepcopy(self.api.state.pods.get(name))
        self._send(200, pod) if pod else self._send(404, _status(404, "NotFound", f'pods "{name}" not found'))

    def _nodes(self, parts: list[str], q: dict[str, str]) -> None:
        for term in filter(None, q.get("labelSelector", "").split(",")):
            value = term.partition("=")[2]
            if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):  # what a real one answers
                key = term.partition("=")[0]
                return self._send(400, _status(400, "BadRequest", (
                    f'unable to parse requirement: values[0][{key}]: Invalid value: "{value}": a valid label must '
                    "be an empty string or consist of alphanumeric characters, '-', '_' or '.'")))
        nodes = [n for n in self.api.node_objects if _matches(n, q)]
        if len(parts) == 4:
            found = [n for n in nodes if n["metadata"]["name"] == parts[3]]
            return self._send(200, found[0]) if found else self._send(404, _status(404, "NotFound", f'nodes "{parts[3]}" not found'))
        self._send(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": nodes})

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True

    def _watch(self, q: dict[str, str]) -> None:
        api = self.api
        deadline = time.monotonic() + float(q.get("timeoutSeconds", "30"))
        self._start_stream()
        try:
            with api.cond:
                if "resourceVersion" in q:
                    sent = int(q["resourceVersion"])
                else:  # a watch from "now" starts with the current state as ADDED events
                    sent = api.state.events[-1][0] if api.state.events else 0
                    for p in api.state.pods.values():
                        if _matches(p, q):
                            self._chunk(json.dumps({"type": "ADDED", "object": p}) + "\n")
            while time.monotonic() < deadline:
                with api.cond:
                    if api.stopping:
                        break
                    new = [e for e in api.state.events if e[0] > sent]
                    if not new:
                        api.cond.wait(0.05)
                        continue
                    sent = new[-1][0]
                for _rv, etype, obj in new:
                    if _matches(obj, q):
                        self._chunk(json.dumps({"type": etype, "object": obj}) + "\n")
            self._chunk("")
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass

    def _cut_stream(self, after: str) -> None:
        """Cut a follow stream as :attr:`StandInApiServer.log_cut_how` says: after whole chunks, or in the
        middle of the next one (its size and half of ``after``, the line not sent yet, then a close or a
        reset); the line is sent whole by the next stream."""
        if self.api.log_cut_how != "close":
            data = after.encode() or b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data[:len(data) // 2])
            self.wfile.flush()
        if self.api.log_cut_how == "reset":  # SO_LINGER 0: close sends RST, the client's read fails with a reset
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
            return
        self.connection.shutdown(2)

    def _log(self, name: str, follow: bool, timestamps: bool = False) -> None:
        api = self.api
        with api.cond:
            if name not in api.state.logs:
                return self._send(404, _status(404, "NotFound", f'pods "{name}" not found'))
            sent = first = api.state.log_start.get(name, 0)
        self._start_stream()
        try:
            while True:
                with api.cond:
                    lines = api.state.logs[name][sent:]
                    stamps = api.state.stamps[name][sent:]
                    pod = api.state.pods.get(name) or {}
                    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
                    done = (api.stopping or name in api.state.ended or "terminated" in (statuses[0].get("state") or {}))
                    if not lines and not done and follow:
                        api.cond.wait(0.05)
                        continue
                cut = api.log_cuts > 0 and sent - first + len(lines) >= api.log_cut_after
                if cut:  # a proxy cuts the stream after ``log_cut_after`` lines
                    api.log_cuts -= 1
                    keep = api.log_cut_after - (sent - first)
                    after = "".join((f"{t} " if timestamps else "") + line + "\n"
                                    for t, line in zip(stamps[keep:keep + 1], lines[keep:keep + 1], strict=True))
                    lines, stamps = lines[:keep], stamps[:keep]
                sent += len(lines)
                if lines and api.log_line_delay_s:
                    for stamp, line in zip(stamps, lines, strict=True):
                        time.sleep(api.log_line_delay_s)
                        self._chunk((f"{stamp} " if timestamps else "") + line + "\n")
                elif lines:
                    self._chunk("".join((f"{stamp} " if timestamps else "") + line + "\n"
                                        for stamp, line in zip(stamps, lines, strict=True)))
                if cut:
                    if api.on_log_cut is not None:
                        api.on_log_cut(name)
                    self._cut_stream(after)
                    return
                if done and follow and api.log_held_open and not api.stopping:
                    with api.cond:
                        api.cond.wait(0.05)
                    continue
                if done or not follow:
                    if not api.state.logs[name][sent:]:
                        break
            self._chunk("")
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass


def stamp() -> str:
    """Now as the kubelet stamps a log line for the logs endpoint: RFC3339 with nanoseconds, fixed
    width since Kubernetes 1.19 (kubernetes#91207)."""
    ns = time.time_ns()
    return f"{datetime.fromtimestamp(ns // 10**9, UTC):%Y-%m-%dT%H:%M:%S}.{ns % 10**9:09d}Z"
