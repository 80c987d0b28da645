"""Kubernetes driver: rendered objects pass the Kubernetes OpenAPI schema, and the client
calls (server-side apply, pod listing, per-pod Triton repository API) do what they should.

No real cluster is reachable here, so the API server is the one fake: the recorded fake
API server of tests/deployments/fake_apiserver.py (a real HTTP server on a local port that
implements server-side apply with field managers; see its docstring for what it does and
does not do). Each "pod" points at a second recording HTTP server that answers Triton's
repository and readiness endpoints.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from urllib.parse import parse_qs, urlparse

import kubernetes_validate
import pytest
import yaml
from django.core.management import CommandError, call_command
from kubernetes import client

from deployments.drivers.base import LoadFailed, ModelDir, PoolSpec
from deployments.drivers.kubernetes import KubernetesDriver, object_name, render
from tests.deployments.fake_apiserver import FakeApiServer

K8S_VERSION = "1.31"


def spec(**overrides) -> PoolSpec:
    base = dict(
        name="ctr-gpu",
        replicas=2,
        model_repository="pvc://models/ctr",
        team="team-a",
        device_kind="nvidia-a100",
        gpus_per_replica=1,
        resources={"cpu": "4", "memory": "16Gi"},
        namespace="serving",
        min_replicas=2,
        max_replicas=6,
        admin_key="ctr-gpu-admin-key",
    )
    base.update(overrides)
    return PoolSpec(**base)


@pytest.fixture(autouse=True)
def serving_namespace(settings):
    """The operator gave team-a the namespace `serving` (deployments/pool_policy.py)."""
    settings.POOL_TEAM_NAMESPACES = {"team-a": ["serving"]}


@pytest.mark.parametrize(
    "pool",
    [
        spec(),
        spec(
            name="ctr-cpu",
            device_kind="cpu",
            gpus_per_replica=0,
            resources={"cpu": "1"},
            model_repository="s3://bucket/repo",
        ),
        spec(name="scaled-down", replicas=0, model_repository="gs://bucket/repo"),
    ],
    ids=["gpu-pvc", "cpu-s3", "zero-replicas"],
)
def test_every_rendered_object_passes_the_kubernetes_schema(pool):
    objects = render(pool)
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    kinds = [o["kind"] for o in objects]
    assert kinds[:2] == ["Deployment", "Service"] and kinds[-2:] == ["NetworkPolicy", "Secret"]
    assert ("HorizontalPodAutoscaler" in kinds) == (pool.replicas > 0)
    assert ("PodDisruptionBudget" in kinds) == (pool.replicas > 0)  # min_replicas 2: a floor worth protecting


def test_schema_validation_catches_a_broken_object():
    deployment = render(spec())[0]
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_deployment_runs_triton_with_gpu_readiness_probe_and_repository_volume():
    deployment = render(spec())[0]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert "--model-control-mode=explicit" in container["args"] and "--strict-readiness=true" in container["args"]
    assert "--model-repository=/models/ctr" in container["args"]
    assert container["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"  # leave the Service before SIGTERM
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}} in pod["volumes"]
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu" and pod["nodeSelector"] == {
        "modelplane.io/device-kind": "nvidia-a100"
    }
    assert (
        deployment["spec"]["selector"]["matchLabels"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    cpu = render(spec(device_kind="cpu", gpus_per_replica=0, model_repository="s3://b/r", resources={}))[0]
    cpu_container = cpu["spec"]["template"]["spec"]["containers"][0]
    assert "--model-repository=s3://b/r" in cpu_container["args"]
    assert "nvidia.com/gpu" not in json.dumps(cpu_container)


def test_a_gpu_pool_asks_for_gpus_tolerates_their_taint_and_keeps_tensorrt_engines():
    from registry.names import TENSORRT_CACHE_DIR

    deployment = render(spec(gpus_per_replica=2))[0]
    kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert (
        container["resources"]["requests"]["nvidia.com/gpu"]
        == container["resources"]["limits"]["nvidia.com/gpu"]
        == "2"
    )
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert container["image"].startswith("nvcr.io/nvidia/tritonserver:") and container["image"].endswith(
        "-py3"
    )  # the GPU build
    assert "--allow-gpu-metrics=true" in container["args"]
    # The directory the GPU variants' configs name for TensorRT engine and timing caches is writable.
    assert {"name": "tensorrt-cache", "mountPath": TENSORRT_CACHE_DIR} in container["volumeMounts"]
    assert {"name": "tensorrt-cache", "emptyDir": {"sizeLimit": "8Gi"}} in pod["volumes"]
    cpu_pod = render(spec(device_kind="cpu", gpus_per_replica=0, model_repository="s3://b/r"))[0]["spec"]["template"][
        "spec"
    ]
    assert "tensorrt-cache" not in json.dumps(cpu_pod) and not cpu_pod.get("tolerations")


@pytest.mark.django_db
def test_render_pool_command_prints_valid_yaml(deployer, team_a):
    from deployments.services import pools

    pools.pool_create(
        user=deployer,
        name="k8s-a",
        team=team_a,
        driver="kubernetes",
        replicas=3,
        model_repository="s3://bucket/models",
        device_kind="nvidia-t4",
    )
    out = StringIO()
    call_command("render_pool", "k8s-a", stdout=out)
    documents = list(yaml.safe_load_all(out.getvalue()))
    assert [d["kind"] for d in documents] == [
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
        "Secret",
    ]
    for document in documents:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)
    assert {d["metadata"]["namespace"] for d in documents} == {"serving"}  # the team's, assigned
    secret = documents[-1]
    assert secret["metadata"]["name"] == "modelplane-triton-admin-k8s-a"
    assert secret["stringData"] == {"admin-key": "(the pool's own key: not shown)"}
    assert "replicas" not in documents[0]["spec"]  # the HPA's (min 1 .. max 4)
    assert documents[2]["spec"]["metrics"][0]["pods"]["metric"]["name"] == "triton_queue_time_ms"  # a GPU pool
    pools.pool_create(user=deployer, name="local-a", team=team_a)
    with pytest.raises(CommandError, match="local driver"):
        call_command("render_pool", "local-a", stdout=StringIO())


# --- the fake pods (the fake API server is tests/deployments/fake_apiserver.py) -----------------
class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler):
        super().__init__(("127.0.0.1", 0), handler)
        self.requests = []
        self.state = {}
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _reply(self, status, body, content_type="application/json"):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        url = urlparse(self.path)
        entry = {
            "method": self.command,
            "path": url.path,
            "query": parse_qs(url.query),
            "content_type": self.headers.get("Content-Type", ""),
            "body": body,
            "headers": dict(self.headers),
        }
        self.server.requests.append(entry)
        return entry

    def do_GET(self):
        self.handle_request(self._record())

    def do_POST(self):
        self.handle_request(self._record())


class FakeTriton(Handler):
    def handle_request(self, req):
        loaded = self.server.state.setdefault("loaded", set())
        parts = req["path"].strip("/").split("/")
        if req["path"].startswith("/v2/repository/models/") and parts[-1] == "load":
            if parts[3] == "broken":
                return self._reply(400, {"error": "load failed for model 'broken': version 1 is at UNAVAILABLE state"})
            loaded.add(parts[3])
            return self._reply(200, "")
        if req["path"].startswith("/v2/repository/models/") and parts[-1] == "unload":
            loaded.discard(parts[3])
            return self._reply(200, "")
        if req["path"].startswith("/v2/models/") and parts[-1] == "ready":
            return self._reply(200 if parts[2] in loaded else 400, "")
        if req["path"].endswith("/stats"):
            return self._reply(200, {"model_stats": []})
        if req["path"] == "/metrics":
            return self._reply(200, "", "text/plain")
        return self._reply(404, {"error": "not found"})


def pod(name, ready, ip="127.0.0.1"):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "serving", "labels": {"modelplane.io/pool": "ctr-gpu"}},
        "spec": {"containers": [{"name": "tritonserver", "image": "triton"}]},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "startTime": "2026-01-01T00:00:00Z",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [
                {
                    "name": "tritonserver",
                    "ready": ready,
                    "restartCount": 1,
                    "image": "triton",
                    "imageID": "x",
                    "started": True,
                }
            ],
        },
    }


@pytest.fixture
def cluster():
    api = FakeApiServer()
    triton = Recorder(FakeTriton)
    api.pods["items"] = [pod("triton-ctr-gpu-a", True), pod("triton-ctr-gpu-b", False)]
    configuration = client.Configuration(host=api.url)
    # The fake pod speaks Triton's HTTP only, so the driver controls it over HTTP (pod_grpc_port=None);
    # the gRPC control path is tested against a real tritonserver in test_local_pool.py.
    driver = KubernetesDriver(
        spec(),
        api_client=client.ApiClient(configuration),
        pod_http_port=triton.server_address[1],
        pod_metrics_port=triton.server_address[1],
        pod_grpc_port=None,
        admin_key="pool-admin-key",
    )
    yield driver, api, triton
    api.close()
    triton.shutdown()


def test_ensure_applies_every_object_server_side(cluster):
    driver, api, _ = cluster
    replicas = driver.ensure()
    patches = [r for r in api.requests if r["method"] == "PATCH"]
    deployment_path = "/apis/apps/v1/namespaces/serving/deployments/triton-ctr-gpu"
    assert [(p["path"], p["query"]["fieldManager"][0]) for p in patches] == [
        ("/api/v1/namespaces/serving/secrets/modelplane-triton-admin-ctr-gpu", "modelplane"),  # before the pods
        (deployment_path, "modelplane"),
        (deployment_path, "modelplane-handover"),  # a new Deployment: replicas seeded for the HPA
        ("/api/v1/namespaces/serving/services/triton-ctr-gpu", "modelplane"),
        ("/apis/autoscaling/v2/namespaces/serving/horizontalpodautoscalers/triton-ctr-gpu", "modelplane"),
        ("/apis/policy/v1/namespaces/serving/poddisruptionbudgets/triton-ctr-gpu", "modelplane"),
        ("/apis/networking.k8s.io/v1/namespaces/serving/networkpolicies/triton-ctr-gpu", "modelplane"),
    ]
    for patch in patches:
        assert patch["content_type"] == "application/apply-patch+yaml"
        if patch["query"]["fieldManager"] == ["modelplane"]:
            assert patch["query"]["force"] == ["true"]
            kubernetes_validate.validate(json.loads(patch["body"]), K8S_VERSION, strict=True)
        else:
            assert json.loads(patch["body"])["spec"] == {"replicas": 2}
    assert api.get(deployment_path)["spec"]["replicas"] == 2
    listing = [r for r in api.requests if r["method"] == "GET" and r["path"].endswith("/pods")][0]
    assert listing["query"]["labelSelector"] == [
        f"app.kubernetes.io/instance={object_name(driver.spec)},modelplane.io/pool=ctr-gpu"
    ]
    assert [(r.name, r.status, r.restarts) for r in replicas] == [
        ("triton-ctr-gpu-a", "ready", 1),
        ("triton-ctr-gpu-b", "starting", 1),
    ]


def test_scale_to_zero_applies_replicas_and_removes_the_autoscaler(cluster):
    driver, api, _ = cluster
    driver.scale(0)
    deployment = json.loads(
        next(r for r in api.requests if r["method"] == "PATCH" and "/deployments/" in r["path"])["body"]
    )
    assert deployment["spec"]["replicas"] == 0
    assert api.get("/apis/apps/v1/namespaces/serving/deployments/triton-ctr-gpu")["spec"]["replicas"] == 0
    assert not any("horizontalpodautoscalers" in r["path"] for r in api.requests if r["method"] == "PATCH")
    assert any("horizontalpodautoscalers" in r["path"] for r in api.requests if r["method"] == "DELETE")


def test_load_and_unload_go_to_each_ready_pod_only(cluster):
    driver, _, triton = cluster
    ready = driver.load(ModelDir(name="ctr__v1__onnx-fp16", config_json='{"max_batch_size": 8}'))
    assert ready == {"triton-ctr-gpu-a": True}
    loads = [r for r in triton.requests if r["path"].endswith("/load")]
    assert len(loads) == 1  # the pod that is not ready got nothing
    assert json.loads(loads[0]["body"]) == {"parameters": {"config": '{"max_batch_size": 8}'}}
    driver.unload("ctr__v1__onnx-fp16", drain_timeout=2, quiet_s=0.1)
    assert any(r["path"].endswith("/unload") for r in triton.requests)
    assert "ctr__v1__onnx-fp16" not in triton.state["loaded"]


def test_failed_load_reports_tritons_message(cluster):
    driver, _, _ = cluster
    with pytest.raises(LoadFailed) as failure:
        driver.load(ModelDir(name="broken"))
    assert "UNAVAILABLE" in failure.value.errors["triton-ctr-gpu-a"]


def test_delete_removes_objects_and_tolerates_missing_ones(cluster):
    driver, api, _ = cluster
    driver.delete()
    deleted = {r["path"].split("/")[-2] for r in api.requests if r["method"] == "DELETE"}
    assert deleted == {
        "deployments",
        "services",
        "horizontalpodautoscalers",
        "poddisruptionbudgets",
        "networkpolicies",
        "secrets",
    }


def test_unreachable_api_server_is_a_driver_error():
    from deployments.drivers.base import DriverError

    driver = KubernetesDriver(spec(), api_client=client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
    with pytest.raises(DriverError, match="(read Deployment|apply Secret .*): Kubernetes API unreachable"):
        driver.ensure()


def _granted(role: dict) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _calls(requests: list[dict]) -> set[tuple[str, str, str]]:
    """(api group, resource, verb) of each request the fake API server recorded."""
    verbs = {"PATCH": "patch", "DELETE": "delete", "GET": "get"}
    calls = set()
    for request in requests:
        parts = request["path"].strip("/").split("/")
        group = "" if parts[0] == "api" else parts[1]
        rest = parts[4:] if parts[0] == "api" else parts[5:]  # after namespaces/<ns>: <resource>[/<name>[/<sub>]]
        resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
        calls.add(
            (group, resource, "list" if request["method"] == "GET" and len(rest) == 1 else verbs[request["method"]])
        )
    return calls


def test_rbac_manifest_is_valid_and_grants_every_call_the_driver_makes(cluster):
    """platform/kubernetes/base/rbac.yaml: the controller's ClusterRole allows what ensure,
    replicas, log_tail and delete send; web's reader allows what the pool pages send (the
    pod list and a log tail) and nothing that writes."""
    from django.conf import settings

    documents = list(
        yaml.safe_load_all((settings.BASE_DIR / "platform" / "kubernetes" / "base" / "rbac.yaml").read_text())
    )
    for document in documents:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)
    roles = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ClusterRole"}
    controller, reader = _granted(roles["modelplane-pool-controller"]), _granted(roles["modelplane-pool-reader"])
    driver, api, _ = cluster
    driver.ensure()
    assert driver.log_tail("triton-ctr-gpu-a", lines=3).splitlines() == ["I line 97", "I line 98", "I line 99"]
    driver.delete()
    assert _calls(api.requests) <= controller, _calls(api.requests) - controller
    api.requests.clear()
    driver.replicas()  # what web does for a pool page
    driver.log_tail("triton-ctr-gpu-a", lines=3)
    assert _calls(api.requests) <= reader and {verb for _, _, verb in reader} <= {"get", "list", "watch"}


@pytest.mark.django_db
def test_reconcile_of_a_kubernetes_pool_applies_and_records_its_pods(cluster, deployer, team_a, tmp_path, monkeypatch):
    """The service path: the driver finds the fake API server through a kubeconfig file."""
    from deployments.models import PoolStatus
    from deployments.services import pools, reconcile

    _, api, _ = cluster
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
                "users": [{"name": "nobody", "user": {}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "nobody"}}],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    pool = pools.pool_create(
        user=deployer,
        name="ctr-gpu",
        team=team_a,
        driver="kubernetes",
        replicas=2,
        model_repository="pvc://models/ctr",
        device_kind="nvidia-a100",
        namespace="serving",
    )
    pool = reconcile.pool_reconcile(pool_id=pool.pk)
    assert pool.status != PoolStatus.FAILED, pool.status_reason
    assert {r["path"].rsplit("/", 2)[-2] for r in api.requests if r["method"] == "PATCH"} == {
        "deployments",
        "services",
        "horizontalpodautoscalers",  # a GPU pool between 1 and 4 replicas, on Triton's queue time
        "networkpolicies",
        "secrets",  # its own Triton admin key
    }
    assert sorted(pool.replica_set.values_list("name", "status")) == [
        ("triton-ctr-gpu-a", "ready"),
        ("triton-ctr-gpu-b", "starting"),
    ]
    assert pool.status == PoolStatus.PENDING and pool.status_reason == "1/2 replicas ready"


@pytest.mark.django_db
def test_kubernetes_pool_without_a_cluster_is_a_failed_state_with_the_reason(deployer, team_a, tmp_path, monkeypatch):
    from deployments.models import PoolStatus
    from deployments.services import pools, reconcile

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    pool = pools.pool_create(
        user=deployer, name="nowhere", team=team_a, driver="kubernetes", model_repository="s3://b/r"
    )
    pool = reconcile.pool_reconcile(pool_id=pool.pk)
    assert pool.status == PoolStatus.FAILED
    assert "no Kubernetes configuration" in pool.status_reason
