"""A recorded fake Kubernetes API server that implements server-side apply with field
managers well enough to show who owns `spec.replicas`.

A fake, and only because no API server can run here (no cluster, no etcd, no
kube-apiserver binary on these machines). It is a real HTTP server on a local port that
the real `kubernetes` client talks to. It records every request and keeps objects with
`metadata.managedFields` the way the API server does for what the driver uses:

* apply (PATCH `application/apply-patch+yaml`, `fieldManager`, `force`): the manager's
  field set is the set of leaf paths it sent (lists are atomic, as for `args`); a field
  another manager owns with a different value is a 409 Conflict unless `force`, which
  takes it; a field the manager applied before and leaves out now is removed when no
  other manager owns it, and defaulting runs again (a Deployment's `spec.replicas`
  becomes 1, which is why handing it to an HPA needs care);
* update (PATCH merge-patch / PUT of `deployments/{name}/scale`, as the HPA controller
  does with manager `kube-controller-manager`): the value changes and the updater takes
  the field from every other manager, no conflict;
* GET returns the object with its managedFields in FieldsV1 form; DELETE removes it.

What it does not do: validation beyond a missing template on create, list-map merge
keys, resourceVersion conflicts, watches.
"""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

DEFAULTS = {"Deployment": {("spec", "replicas"): 1}}
NOT_OWNED = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}


def leaves(obj, prefix=()) -> dict[tuple, object]:
    """{path: value} of every leaf; dicts are descended, lists and scalars are leaves."""
    if isinstance(obj, dict) and obj:
        out = {}
        for key, value in obj.items():
            out.update(leaves(value, (*prefix, key)))
        return out
    return {prefix: obj}


def get_path(obj, path):
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def set_path(obj, path, value):
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = copy.deepcopy(value)


def del_path(obj, path):
    parents = []
    for key in path[:-1]:
        if not isinstance(obj, dict) or key not in obj:
            return
        parents.append((obj, key))
        obj = obj[key]
    obj.pop(path[-1], None)
    for parent, key in reversed(parents):  # drop parents the removal left empty
        if parent[key] == {}:
            del parent[key]


def fields_v1(paths) -> dict:
    out: dict = {}
    for path in sorted(paths):
        node = out
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return out


class FakeApiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict] = []
        self.objects: dict[str, dict] = {}  # path of the object -> object
        self.managers: dict[str, dict[str, tuple[str, set]]] = {}  # path -> manager -> (operation, paths)
        self.pods: dict = {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []}
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self):
        self.shutdown()
        self.server_close()

    # --- what a test reads ---------------------------------------------------------------
    def get(self, path: str) -> dict | None:
        obj = self.objects.get(path)
        return self._with_managed_fields(path, obj) if obj is not None else None

    def owner_of(self, path: str, field: tuple) -> list[str]:
        return sorted(m for m, (_, paths) in self.managers.get(path, {}).items() if field in paths)

    def controller_scales(self, path: str, replicas: int, manager: str = "kube-controller-manager") -> None:
        """What the HPA controller does: an update of the scale subresource."""
        with self.lock:
            self._update(path, {("spec", "replicas"): replicas}, manager)

    # --- semantics ----------------------------------------------------------------------------
    def _with_managed_fields(self, path, obj) -> dict:
        out = copy.deepcopy(obj)
        out.setdefault("metadata", {})["managedFields"] = [
            {
                "manager": manager,
                "operation": operation,
                "apiVersion": obj.get("apiVersion", "v1"),
                "fieldsType": "FieldsV1",
                "fieldsV1": fields_v1(paths),
            }
            for manager, (operation, paths) in sorted(self.managers.get(path, {}).items())
            if paths
        ]
        return out

    def _update(self, path, values: dict, manager: str) -> None:
        obj = self.objects[path]
        owners = self.managers.setdefault(path, {})
        for field, value in values.items():
            set_path(obj, field, value)
            for other, (_, paths) in owners.items():
                if other != manager:
                    paths.discard(field)
        operation, paths = owners.get(manager, ("Update", set()))
        owners[manager] = ("Update", paths | set(values))

    def apply(self, path: str, body: dict, manager: str, force: bool) -> tuple[int, dict]:
        applied = {
            p: v for p, v in leaves(body).items() if p not in NOT_OWNED and p[:2] != ("metadata", "managedFields")
        }
        obj = self.objects.get(path)
        if obj is None:
            if body.get("kind") == "Deployment" and get_path(body, ("spec", "template")) is None:
                return 422, _status(422, "Invalid", "spec.template: Required value (a create needs the whole object)")
            obj = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": {}}
            obj["metadata"].update({k: body["metadata"][k] for k in ("name", "namespace") if k in body["metadata"]})
        owners = self.managers.setdefault(path, {})
        conflicts = [
            (field, other)
            for field, value in applied.items()
            for other, (_, paths) in owners.items()
            if other != manager and field in paths and get_path(obj, field) != value
        ]
        if conflicts and not force:
            detail = "; ".join(f'conflict with "{other}": .{".".join(field)}' for field, other in conflicts)
            return 409, _status(409, "Conflict", f"Apply failed with {len(conflicts)} conflict(s): {detail}")
        for field, other in conflicts:  # force: the applier takes them
            owners[other][1].discard(field)
        previous = owners.get(manager, ("Apply", set()))[1]
        for field in previous - set(applied):
            if not any(field in paths for other, (_, paths) in owners.items() if other != manager):
                del_path(obj, field)
        for field, value in applied.items():
            set_path(obj, field, value)
        for field, value in DEFAULTS.get(obj.get("kind"), {}).items():
            if get_path(obj, field) is None:
                set_path(obj, field, value)
        owners[manager] = ("Apply", set(applied))
        self.objects[path] = obj
        return 200, self._with_managed_fields(path, obj)


def _status(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _reply(self, status, body, content_type="application/json"):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        url = urlparse(self.path)
        query = parse_qs(url.query)
        request = {
            "method": self.command,
            "path": url.path,
            "query": query,
            "content_type": self.headers.get("Content-Type", ""),
            "body": raw,
        }
        server: FakeApiServer = self.server
        server.requests.append(request)
        with server.lock:
            status, body = self._route(server, request, url.path, query, raw)
        self._reply(status, body, "text/plain" if isinstance(body, str) else "application/json")

    def _route(self, server, request, path, query, raw):
        method = request["method"]
        if method == "GET" and path.endswith("/pods"):
            return 200, server.pods
        if method == "GET" and path.endswith("/log"):
            lines = int(query.get("tailLines", ["10"])[0])
            return 200, "\n".join([f"I line {i}" for i in range(100)][-lines:])
        if path.endswith("/scale") and method in ("PUT", "PATCH"):
            target = path.removesuffix("/scale")
            if target not in server.objects:
                return 404, _status(404, "NotFound", "not found")
            manager = query.get("fieldManager", ["kube-controller-manager"])[0]
            server._update(target, {("spec", "replicas"): json.loads(raw)["spec"]["replicas"]}, manager)
            return 200, server.get(target)
        if method == "PATCH" and request["content_type"].startswith("application/apply-patch"):
            manager = query.get("fieldManager", [""])[0]
            if not manager:
                return 400, _status(400, "BadRequest", "fieldManager is required for apply")
            return server.apply(path, json.loads(raw), manager, query.get("force", ["false"])[0] == "true")
        if method == "GET":
            obj = server.get(path)
            return (200, obj) if obj is not None else (404, _status(404, "NotFound", f"{path} not found"))
        if method == "DELETE":
            if server.objects.pop(path, None) is None:
                return 404, _status(404, "NotFound", f"{path} not found")
            server.managers.pop(path, None)
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        return 404, _status(404, "NotFound", f"no route for {method} {path}")

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle
