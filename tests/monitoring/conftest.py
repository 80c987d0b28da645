"""Fixtures of the monitoring tests: a real HTTP server that serves prometheus_client
text shaped like the gateway's, a real local webhook receiver, a real tritonserver."""

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from serving.tritonserver import TritonNotAvailable, TritonProcess

ROOT = Path(__file__).resolve().parents[2]
# The gateway's buckets (gateway/telemetry/metrics.py), repeated so this registry is independent of its module.
BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.00075,
    0.001,
    0.0015,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class GatewayMetrics:
    """A private prometheus_client registry with the gateway's metric names and labels."""

    def __init__(self, prefix: str = "gateway_"):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(f"{prefix}requests", "requests", ["endpoint", "variant", "status"], registry=r)
        self.latency = Histogram(
            f"{prefix}request_duration_seconds", "latency", ["endpoint", "variant"], buckets=BUCKETS, registry=r
        )
        self.upstream = Histogram(
            f"{prefix}upstream_duration_seconds", "upstream", ["endpoint", "variant"], buckets=BUCKETS, registry=r
        )
        self.retries = Counter(f"{prefix}retries", "retries", ["endpoint", "variant"], registry=r)
        self.failovers = Counter(
            f"{prefix}failovers", "failovers", ["endpoint", "from_variant", "to_variant", "reason"], registry=r
        )
        self.shadow_dropped = Counter(f"{prefix}shadow_dropped", "dropped", ["endpoint", "variant"], registry=r)
        self.in_flight = Gauge(f"{prefix}in_flight_requests", "in flight", ["endpoint"], registry=r)

    def serve(self, endpoint: str, variant: str, latencies_s, statuses, upstream_s=None) -> None:
        for latency, status in zip(latencies_s, statuses):
            self.requests.labels(endpoint, variant, str(status)).inc()
            self.latency.labels(endpoint, variant).observe(latency)
            self.upstream.labels(endpoint, variant).observe(upstream_s if upstream_s is not None else latency * 0.8)

    def text(self) -> str:
        return generate_latest(self.registry).decode()


# gateway/llm/metrics.py: ITL has fine buckets 0.0005..2 s; TTFT the gateway's request buckets.
ITL_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


class LLMGatewayMetrics:
    """A private prometheus_client registry with the gateway's LLM families exactly as
    gateway/llm/metrics.py names them (counters without "_total": prometheus_client adds it)."""

    def __init__(self, prefix: str = "gateway_"):
        self.registry = r = CollectorRegistry()
        ev = ["endpoint", "variant"]
        self.requests = Counter(f"{prefix}llm_requests", "LLM requests", [*ev, "status", "fault"], registry=r)
        self.ttft = Histogram(f"{prefix}llm_ttft_seconds", "TTFT", ev, buckets=BUCKETS, registry=r)
        self.itl = Histogram(f"{prefix}llm_itl_seconds", "ITL", ev, buckets=ITL_BUCKETS, registry=r)
        self.queue = Histogram(f"{prefix}llm_queue_seconds", "queue", ev, buckets=BUCKETS, registry=r)
        self.tokens = Counter(f"{prefix}llm_tokens", "tokens", [*ev, "team", "key", "kind"], registry=r)
        self.cost = Counter(f"{prefix}llm_cost", "cost", [*ev, "team", "key"], registry=r)
        self.fallbacks = Counter(f"{prefix}llm_fallbacks", "fallbacks", ["endpoint", "backend", "reason"], registry=r)
        self.streams = Gauge(f"{prefix}llm_streams_in_flight", "streams", ["endpoint"], registry=r)

    def stream(
        self,
        endpoint: str,
        variant: str,
        *,
        ttft_s: float,
        itl_s=(),
        status: int = 200,
        fault: str = "none",
        prompt: int = 0,
        completion: int = 0,
        team: str = "",
        key: str = "",
        cost: float = 0.0,
        queue_s: float = 0.0005,
    ) -> None:
        """One request as the gateway records it."""
        self.requests.labels(endpoint, variant, str(status), fault).inc()
        if fault == "client":
            return
        self.queue.labels(endpoint, variant).observe(queue_s)
        if status == 200:
            self.ttft.labels(endpoint, variant).observe(ttft_s)
        for gap in itl_s:
            self.itl.labels(endpoint, variant).observe(gap)
        if prompt or completion:
            self.tokens.labels(endpoint, variant, team, key, "prompt").inc(prompt)
            self.tokens.labels(endpoint, variant, team, key, "completion").inc(completion)
        if cost:
            self.cost.labels(endpoint, variant, team, key).inc(cost)

    def text(self) -> str:
        return generate_latest(self.registry).decode()


class _Server:
    def __init__(self, handler_cls):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
        self.httpd.owner = self
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class _MetricsHandler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = self.server.owner.metrics.text().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def gateway_server():
    """A real HTTP server on a free port answering GET /metrics with GatewayMetrics text."""
    server = _Server(_MetricsHandler)
    server.metrics = GatewayMetrics()
    server.url = f"{server.base_url}/metrics"
    yield server
    server.close()


class _WebhookHandler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        owner = self.server.owner
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with owner.lock:
            owner.received.append(json.loads(body))
            status = owner.statuses.pop(0) if owner.statuses else 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"ok": %s}' % (b"true" if status < 300 else b"false"))

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook_receiver():
    """A real local webhook receiver; `statuses` lists the HTTP statuses of the next replies
    (then 200); `received` holds every JSON body posted."""
    server = _Server(_WebhookHandler)
    server.lock = threading.Lock()
    server.received = []
    server.statuses = []
    server.url = f"{server.base_url}/hook"
    yield server
    server.close()


# --- a real tritonserver with the tiny CTR model -------------------------------------------------
def package_model(repo: Path, onnx_path: Path, name: str, dense_dims: int = 13) -> Path:
    """A Triton model dir {name}/config.pbtxt + 1/model.py (ONNX Runtime adapter) + 1/model.onnx,
    config written from Triton's protobuf. A `dense_dims` other than the ONNX's 13 makes a
    model that loads but fails every request in its backend (ONNX Runtime rejects the shape)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    config = mc.ModelConfig(name=name, backend="python", max_batch_size=64)
    config.input.add(name="dense", data_type=mc.TYPE_FP32, dims=[dense_dims])
    config.input.add(name="sparse", data_type=mc.TYPE_INT64, dims=[26])
    config.output.add(name="ctr", data_type=mc.TYPE_FP32, dims=[1])
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    config.parameters["onnx_file"].string_value = "model.onnx"
    if dense_dims != 13:  # no load-time warm-up run: the broken model must load and fail per request
        config.parameters["warmup_batch_sizes"].string_value = " "
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))
    shutil.copy(ROOT / "platform/triton/onnxruntime_adapter/model.py", model_dir / "1" / "model.py")
    shutil.copy(onnx_path, model_dir / "1" / "model.onnx")
    return model_dir


TRITON_MODELS = {"ctr__v1__onnx-fp32": ("ctr", "stable"), "ctr__v2__onnx-fp32": ("ctr", "canary")}
BROKEN_MODEL = "ctr__v3__onnx-fp32"  # config says 14 dense features, the ONNX takes 13
SLOW_MODEL = "ctr__v4__slow"  # same inputs, answers after 5 ms: a canary that a 1-ms client deadline always beats


@pytest.fixture(scope="module")
def triton(tmp_path_factory, onnx_path):
    """One real tritonserver for the module, serving the tiny CTR model as two variants."""
    work = tmp_path_factory.mktemp("triton")
    for name in TRITON_MODELS:
        package_model(work / "repo", onnx_path, name)
    package_model(work / "repo", onnx_path, BROKEN_MODEL, dense_dims=14)
    from harness.triton_models import behaviour_model

    behaviour_model(work / "repo", SLOW_MODEL, sleep_ms=5, instances=2)
    server = TritonProcess(model_repository=work / "repo", work_dir=work)
    try:
        server.start()
    except TritonNotAvailable as exc:
        pytest.skip(f"tritonserver not available: {exc}")
    try:
        server.wait_live(60)
        for name in (*TRITON_MODELS, BROKEN_MODEL, SLOW_MODEL):
            server.load(name)
        yield server
    finally:
        server.stop()


def infer(server: TritonProcess, model: str, batch: int = 1, *, bad: bool = False, dense_dims: int = 13) -> int:
    """One KServe v2 inference over HTTP; returns the HTTP status."""
    import urllib.error
    import urllib.request

    import numpy as np

    rng = np.random.default_rng(batch)
    dense = rng.normal(size=(batch, dense_dims)).astype("float32")
    sparse = rng.integers(0, 1000, size=(batch, 26))
    inputs = [
        {"name": "dense", "shape": [batch, dense_dims], "datatype": "FP32", "data": dense.ravel().tolist()},
        {"name": "sparse", "shape": [batch, 26], "datatype": "INT64", "data": sparse.ravel().tolist()},
    ]
    if bad:  # a body Triton's frontend rejects before the model (not counted by Triton)
        inputs[0] = {"name": "dense", "shape": [batch, dense_dims], "datatype": "FP32", "data": [0.0]}
    body = json.dumps({"inputs": inputs}).encode()
    request = urllib.request.Request(
        f"{server.http_url}/v2/models/{model}/infer",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
