"""Talking to any Triton (a local process or a pod): health, model readiness, repository
load/unload, statistics and metrics over Triton's HTTP/REST API, with model control over
gRPC when the replica has a gRPC URL. Plain Python with no Django import, beside its launcher
(serving/tritonserver.py); the pools and the factory's tune stage share both."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass


def http_status(url: str, timeout: float = 2.0) -> int:
    """The HTTP status of a GET (0 when nothing answered)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0


def health_probe(url: str, timeout: float) -> str:
    """GET `url` with a deadline: "" when it answered 200 in time, else why not
    ("timeout after 2.0 s", "HTTP 503", "connection refused")."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except TimeoutError:
        return f"timeout after {timeout:.1f} s"
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            return f"timeout after {timeout:.1f} s"
        reason = exc.reason
        return (getattr(reason, "strerror", None) or str(reason)).lower()
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()
    return "" if status == 200 else f"HTTP {status}"


# Triton's restricted model-repository API (--http-restricted-api / --grpc-restricted-protocol
# model-repository:<key>=<value>): only a caller with the pool's admin key may load or unload.
# Over gRPC Triton expects the key as metadata "triton-grpc-protocol-<key>".
ADMIN_KEY_HEADER = "modelplane-admin-key"
ADMIN_KEY_GRPC_HEADER = f"triton-grpc-protocol-{ADMIN_KEY_HEADER}"


def http_post(url: str, body: bytes, timeout: float, headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class TritonError(RuntimeError):
    """Triton answered with an error; `message` is Triton's own text."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.message = message
        self.status = status


def _error_text(body: bytes) -> str:
    import json

    text = body.decode(errors="replace")
    try:
        return json.loads(text).get("error", text)
    except (ValueError, AttributeError):
        return text


_GRPC_HTTP_STATUS = {
    "StatusCode.INVALID_ARGUMENT": 400,
    "StatusCode.NOT_FOUND": 404,
    "StatusCode.ALREADY_EXISTS": 409,
    "StatusCode.UNAVAILABLE": 503,
    "StatusCode.DEADLINE_EXCEEDED": 504,
}


def _grpc_control(grpc_url: str, call: str, name: str, timeout: float, admin_key: str = "", **kwargs) -> None:
    """Repository load/unload over gRPC: over HTTP, Triton's handler blocks HTTP inference
    on every other model for the whole load (triton-inference-server/server#8958; what it
    cost here is in docs/pools.md)."""
    import tritonclient.grpc as triton_grpc
    from tritonclient.utils import InferenceServerException

    client = triton_grpc.InferenceServerClient(grpc_url)
    try:
        headers = {ADMIN_KEY_GRPC_HEADER: admin_key} if admin_key else None
        getattr(client, call)(name, client_timeout=timeout, headers=headers, **kwargs)
    except InferenceServerException as exc:
        status = _GRPC_HTTP_STATUS.get(str(exc.status()), 500)
        if status == 503:  # nothing answered: like a refused HTTP connection
            raise ConnectionError(f"{call} {name}: Triton at {grpc_url} is unreachable: {exc.message()}") from None
        raise TritonError(exc.message() or f"{call} {name} failed ({exc.status()})", status) from None
    finally:
        client.close()


@dataclass
class TritonHTTP:
    """Triton's HTTP/REST endpoints: repository, readiness, statistics and metrics; with
    `grpc_url`, model load and unload go through gRPC instead (see `_grpc_control`)."""

    http_url: str
    metrics_url: str = ""
    timeout: float = 5.0
    grpc_url: str = ""
    admin_key: str = ""  # the pool's model-repository key, when its Triton restricts that API

    def _admin_headers(self) -> dict:
        return {ADMIN_KEY_HEADER: self.admin_key} if self.admin_key else {}

    def is_live(self) -> bool:
        return http_status(f"{self.http_url}/v2/health/live", timeout=self.timeout) == 200

    def load(self, name: str, *, timeout: float = 120.0, config: str | None = None) -> None:
        import json

        if self.grpc_url:
            return _grpc_control(self.grpc_url, "load_model", name, timeout, admin_key=self.admin_key, config=config)
        body = json.dumps({"parameters": {"config": config}}).encode() if config else b""
        status, reply = http_post(
            f"{self.http_url}/v2/repository/models/{name}/load", body, timeout=timeout, headers=self._admin_headers()
        )
        if status != 200:
            raise TritonError(_error_text(reply) or f"load {name} failed with HTTP {status}", status)

    def unload(self, name: str, *, timeout: float = 60.0) -> None:
        if self.grpc_url:
            return _grpc_control(self.grpc_url, "unload_model", name, timeout, admin_key=self.admin_key)
        status, reply = http_post(
            f"{self.http_url}/v2/repository/models/{name}/unload", b"", timeout=timeout, headers=self._admin_headers()
        )
        if status != 200:
            raise TritonError(_error_text(reply) or f"unload {name} failed with HTTP {status}", status)

    def is_model_ready(self, name: str, version: str = "") -> bool:
        suffix = f"/versions/{version}" if version else ""
        return http_status(f"{self.http_url}/v2/models/{name}{suffix}/ready", timeout=self.timeout) == 200

    def statistics(self, name: str = "") -> list[dict]:
        """Triton's per-model statistics (`model_stats`), all models when `name` is empty."""
        import json

        path = f"/v2/models/{name}/stats" if name else "/v2/models/stats"
        try:
            with urllib.request.urlopen(f"{self.http_url}{path}", timeout=self.timeout) as response:
                return json.loads(response.read()).get("model_stats", [])
        except urllib.error.HTTPError as exc:
            raise TritonError(_error_text(exc.read()), exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            raise TritonError(f"{self.http_url} unreachable: {exc}") from None

    def metric_samples(self, metric: str) -> dict[tuple[str, str], float]:
        """{(model, version): value} of one Triton metric family from /metrics."""
        from prometheus_client.parser import text_string_to_metric_families

        if not self.metrics_url:
            return {}
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=self.timeout) as response:
                text = response.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            raise TritonError(f"{self.metrics_url} unreachable: {exc}") from None
        out = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == metric:
                    out[(sample.labels.get("model", ""), sample.labels.get("version", ""))] = sample.value
        return out
