"""No name oracle at the gateway: a request that may not call a closed endpoint
gets exactly what a name the route table lacks gets — 404 `unknown_endpoint`, the same
body (but for the name), the same headers, no WWW-Authenticate, in about the same time —
over HTTP (infer, versioned infer, metadata, ready, config, stats, feedback) and gRPC
(ModelInfer, ModelMetadata, ModelConfig, ModelStatistics as NOT_FOUND; ModelReady as
ready: false). Only a valid key of the endpoint's own team that is not scoped to it gets
403. A real gateway process on a route file; its replica address has nothing listening
(an admitted request then gets 503 no_ready_backend: it got past the door)."""

import json
import statistics
import time
from hashlib import sha256

import grpc
import pytest
import requests
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from gateway.keys.tenants import compile_auth
from harness.gateway import GatewayProcess
from harness.triton_models import SIGNATURE, infer_body
from serving.tritonserver import free_port

pytestmark = pytest.mark.integration

METRICS_TOKEN = "oracle-metrics-token"
SCOPED = "mpk_ads_scoped_8Yb3kR0qLw2vZt9x"  # ads, may call "closed"
ELSEWHERE = "mpk_ads_elsewhere_Q4mT7nV1cX6p"  # ads, scoped to another endpoint
FOREIGN = "mpk_search_Hf5sD8gK3lP0aZWn2e"  # another team's
UNKNOWN_KEY = "mpk_never_issued_R7tY4uI9oBzz"
KEYS = {
    SCOPED: {"id": "ads-1", "team": "ads"},
    ELSEWHERE: {"id": "ads-2", "team": "ads"},
    FOREIGN: {"id": "search-1", "team": "search"},
}
# who knocks: (label, headers); none of them may call "closed"
REFUSED = [
    ("no key", {}),
    ("malformed", {"Authorization": "Basic dXNlcjpwYXNz"}),
    ("unknown key", {"Authorization": f"Bearer {UNKNOWN_KEY}"}),
    ("over-long key", {"X-API-Key": "x" * 600}),
    ("another team's key", {"Authorization": f"Bearer {FOREIGN}"}),
]


def _table(dead: str) -> dict:
    def variant():
        return {
            "name": "v1",
            "model_version": "1",
            "triton_model": "ctr__v1__onnx",
            "role": "stable",
            "weight_bp": 10000,
            "replicas": [dead],
            "grpc_replicas": [dead.removeprefix("http://")],
            "signature": SIGNATURE,
        }

    return {
        "version": "oracle-1",
        "keys": [{"prefix": s[:8], "sha256": sha256(s.encode()).hexdigest(), **e} for s, e in KEYS.items()],
        "endpoints": [
            {"name": "closed", "team": "ads", "auth": {"keys": ["ads-1"]}, "variants": [variant()]},
            {"name": "other", "team": "ads", "auth": {"keys": ["ads-2"]}, "variants": [variant()]},
            {"name": "open", "auth": {"public": True}, "variants": [variant()]},
        ],
    }


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    work = tmp_path_factory.mktemp("oracle")
    routes = work / "routes.json"
    routes.write_text(json.dumps(_table(f"http://127.0.0.1:{free_port()}")))
    process = GatewayProcess(
        work,
        {
            "GATEWAY_ROUTES_FILE": str(routes),
            "GATEWAY_METRICS_TOKEN": METRICS_TOKEN,
            "GATEWAY_BREAKER_COOLDOWN_MS": "60000",
        },
    ).start()
    yield process
    process.stop()


BODY = infer_body()
HTTP_CALLS = [
    ("POST", "/v2/models/{}/infer", BODY),
    ("POST", "/v2/models/{}/versions/1/infer", BODY),
    ("GET", "/v2/models/{}", None),
    ("GET", "/v2/models/{}/versions/1", None),
    ("GET", "/v2/models/{}/ready", None),
    ("GET", "/v2/models/{}/config", None),
    ("GET", "/v2/models/{}/stats", None),
]


def _answer(session, gateway, method, path, body, name, headers):
    """What a client can compare: status, headers but the request id, the body with the name blanked."""
    r = session.request(method, gateway.url + path.format(name), data=body, headers=headers, timeout=10)
    shown = {k.lower(): v for k, v in r.headers.items() if k.lower() not in {"x-request-id", "date"}}
    return r.status_code, shown, r.content.replace(repr(name).encode(), b"'<name>'")


@pytest.mark.parametrize("method, path, body", HTTP_CALLS)
def test_http_a_closed_endpoint_refused_reads_as_an_unknown_one(gateway, method, path, body):
    with requests.Session() as session:
        for who, headers in REFUSED:
            unknown = _answer(session, gateway, method, path, body, "absent", headers)
            closed = _answer(session, gateway, method, path, body, "closed", headers)
            assert unknown == closed, who
            status, shown, content = closed
            assert status == 404 and json.loads(content)["code"] == "unknown_endpoint", who
            assert "www-authenticate" not in shown
        # a valid key of the team that may not call it: 403, saying so
        status, _, content = _answer(
            session, gateway, method, path, body, "closed", {"Authorization": f"Bearer {ELSEWHERE}"}
        )
        assert status == 403 and json.loads(content)["code"] == "forbidden"
        assert "may not call endpoint" in json.loads(content)["error"]
        # the scoped key gets past the door (nothing serves behind it here)
        status, _, _ = _answer(session, gateway, method, path, body, "closed", {"X-API-Key": SCOPED})
        assert status not in (401, 403, 404)


def test_http_feedback_to_a_closed_endpoint_reads_as_an_unknown_one(gateway):
    event = {"event_id": "e1", "request_id": "r1", "type": "click"}
    with requests.Session() as session:
        for who, headers in REFUSED:
            answers = []
            for name in ("absent", "closed"):
                body = json.dumps({"endpoint": name, "events": [event]}).encode()
                answers.append(_answer(session, gateway, "POST", "/v2/feedback", body, name, headers))
            assert answers[0] == answers[1], who
            assert answers[0][0] == 404


def test_the_metric_still_names_the_reason(gateway):
    text = requests.get(f"{gateway.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=5).text
    lines = [line for line in text.splitlines() if line.startswith("gateway_auth_rejections_total{")]
    reasons = {line.split('reason="')[1].split('"')[0] for line in lines if 'endpoint="closed"' in line}
    assert {"missing_key", "invalid_key", "forbidden"} <= reasons


def _grpc(gateway, call, request, headers):
    metadata = [(k.lower(), v) for k, v in headers.items()]
    with grpc.insecure_channel(gateway.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            reply = getattr(stub, call)(request, metadata=metadata, timeout=10)
        except grpc.RpcError as exc:
            return exc.code(), exc.details()
        return "ok", reply


def _infer_request(name):
    request = pb.ModelInferRequest(model_name=name)
    tensor = request.inputs.add(name="dense", datatype="FP32", shape=[1, 13])
    tensor.contents.fp32_contents.extend([0.5] * 13)
    tensor = request.inputs.add(name="sparse", datatype="INT64", shape=[1, 26])
    tensor.contents.int64_contents.extend(range(26))
    return request


GRPC_CALLS = [
    ("ModelInfer", _infer_request),
    ("ModelMetadata", lambda name: pb.ModelMetadataRequest(name=name)),
    ("ModelConfig", lambda name: pb.ModelConfigRequest(name=name)),
    ("ModelStatistics", lambda name: pb.ModelStatisticsRequest(name=name)),
]


@pytest.mark.parametrize("call, make", GRPC_CALLS)
def test_grpc_a_closed_endpoint_refused_reads_as_an_unknown_one(gateway, call, make):
    for who, headers in REFUSED:
        code, details = _grpc(gateway, call, make("absent"), headers)
        closed_code, closed_details = _grpc(gateway, call, make("closed"), headers)
        assert (code, details.replace("'absent'", "'<name>'")) == (
            closed_code,
            closed_details.replace("'closed'", "'<name>'"),
        ), who
        assert code == grpc.StatusCode.NOT_FOUND, who
    code, details = _grpc(gateway, call, make("closed"), {"authorization": f"Bearer {ELSEWHERE}"})
    assert code == grpc.StatusCode.PERMISSION_DENIED and "may not call" in details
    code, _ = _grpc(gateway, call, make("closed"), {"x-api-key": SCOPED})
    assert code not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED)


def test_grpc_model_ready_is_false_alike(gateway):
    for who, headers in REFUSED:
        for name in ("absent", "closed"):
            answer = _grpc(gateway, "ModelReady", pb.ModelReadyRequest(name=name), headers)
            assert answer[0] == "ok" and answer[1].ready is False, (who, name)
    # the scoped key reads the real state (not ready: nothing serves it), and an open endpoint needs no key
    assert _grpc(gateway, "ModelReady", pb.ModelReadyRequest(name="closed"), {"x-api-key": SCOPED})[0] == "ok"
    assert _grpc(gateway, "ModelReady", pb.ModelReadyRequest(name="open"), {})[0] == "ok"


def test_time_does_not_tell_a_closed_endpoint_from_an_unknown_one(gateway):
    """Interleaved rounds on one kept-alive connection; the medians of each kind of call
    differ by far less than the spread of any one of them."""
    url = gateway.url + "/v2/models/{}/infer"
    kinds = {
        "unknown": ("absent", {}),
        "closed, no key": ("closed", {}),
        "closed, another team's key": ("closed", {"Authorization": f"Bearer {FOREIGN}"}),
        "unknown, another team's key": ("absent", {"Authorization": f"Bearer {FOREIGN}"}),
    }
    times = {kind: [] for kind in kinds}
    with requests.Session() as session:
        for _ in range(20):  # warm up
            session.post(url.format("absent"), data=BODY, timeout=5)
        for _ in range(300):
            for kind, (name, headers) in kinds.items():
                started = time.perf_counter()
                session.post(url.format(name), data=BODY, headers=headers, timeout=5)
                times[kind].append(time.perf_counter() - started)
    medians = {kind: statistics.median(t) * 1e6 for kind, t in times.items()}
    spread = min(statistics.quantiles(t, n=10)[8] - statistics.quantiles(t, n=10)[0] for t in times.values()) * 1e6
    print("median µs:", {k: round(v, 1) for k, v in medians.items()}, "p10-p90 spread µs:", round(spread, 1))
    assert max(medians.values()) - min(medians.values()) < max(50.0, spread / 2), medians


def test_compile_auth_owner_teams():
    keys = {"k1": "ads", "k2": "search"}
    assert compile_auth({"keys": ["k1"]}, None, keys).teams == {"ads"}  # from its keys
    assert compile_auth({"keys": ["k1"]}, "ads", keys).teams == {"ads"}
    assert compile_auth({"keys": []}, "ads", keys).teams == {"ads"}  # no key scoped, the entry says whose
    assert compile_auth(None, None, keys).teams == frozenset()
