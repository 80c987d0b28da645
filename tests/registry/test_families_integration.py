"""Model families the factory was not written around, end to end with real processes:
each model (generated in tests/registry/model_families.py) is uploaded
through the API of a live server, built by a real Celery worker on build-cpu with no data
attached (synthetic inputs derived from the graph), loaded into a local pool's real
tritonserver replica by `manage.py run_pools`, put behind an endpoint made through the
API, and asked through the gateway (`python -m gateway`, route table over HTTP). Every
output the gateway returns must match ONNX Runtime on the original uploaded file.
"""

import sys

import numpy as np
import onnxruntime as ort
import pytest
import requests
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token

from deployments.models import PoolModel, PoolModelState
from deployments.services import pools as pool_services
from harness import factories
from harness.gateway import GatewayProcess
from harness.processes import CeleryWorker, spawn, stop, wait_for
from registry.models import Artifact, Build, BuildStatus
from tests.conftest import require_service
from tests.deployments.conftest import pools_dir  # noqa: F401 (the pools' directory, servers killed at the end)
from tests.gateway.conftest import require_triton
from tests.registry.build_helpers import fast_build_env
from tests.registry.model_families import FAMILIES

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
KSERVE = {np.dtype("float32"): "FP32", np.dtype("int64"): "INT64"}


def requests_for(family: str) -> list[dict[str, np.ndarray]]:
    """Two requests per model, ids inside their tables; the sequence model at two lengths."""
    rng = np.random.default_rng(17)
    if family == "two-tower":
        return [
            {
                "user_id": rng.integers(0, 1000, (n, 1)),
                "item_id": rng.integers(0, 50, (n, 1)),
                "item_tags": rng.integers(0, 7, (n, 3)),
                "user_dense": rng.standard_normal((n, 4)).astype(np.float32),
            }
            for n in (1, 6)
        ]
    if family == "gbt":
        return [{"features": rng.standard_normal((n, 6)).astype(np.float32)} for n in (1, 9)]
    return [{"seq": rng.standard_normal((n, steps, 4)).astype(np.float32)} for n, steps in ((2, 5), (3, 2))]


def kserve_body(feeds: dict[str, np.ndarray]) -> dict:
    return {
        "inputs": [
            {"name": k, "shape": list(v.shape), "datatype": KSERVE[v.dtype], "data": v.reshape(-1).tolist()}
            for k, v in feeds.items()
        ]
    }


def test_three_model_families_build_serve_and_answer_like_onnx_runtime(
    live_server,
    subprocess_env,
    tmp_path,
    pools_dir,  # noqa: F811 - the imported fixture
    team_a,
    deployer,
):
    require_service("postgres", "redis")
    require_triton()
    base = f"{live_server.url}/api/v1"
    api = requests.Session()
    api.headers["Authorization"] = f"Token {Token.objects.create(user=deployer).key}"
    gateway_user = factories.user("gateway-svc")
    gateway_user.user_permissions.add(Permission.objects.get(codename="read_routes"))
    gateway = GatewayProcess(
        tmp_path,
        {
            "GATEWAY_ROUTES_URL": f"{base}/gateway/routes",
            "GATEWAY_TOKEN": Token.objects.create(user=gateway_user).key,
            "GATEWAY_POLL_INTERVAL_MS": "300",
        },
    )
    env = {**subprocess_env, **fast_build_env(), "POOLS_DIR": str(pools_dir)}
    pools = spawn(
        [sys.executable, "manage.py", "run_pools", "--interval", "0.3", "--stop-replicas-on-exit"],
        env,
        tmp_path / "pools.log",
    )
    worker = CeleryWorker(env, tmp_path / "worker.log", queues="control,build-cpu").start()
    files = {family: make(tmp_path / f"{family}.onnx") for family, make in FAMILIES.items()}
    try:
        builds = {}
        for family, path in files.items():
            assert (
                api.post(
                    f"{base}/models/", json={"name": family, "team": team_a.name, "task": "ctr"}, timeout=30
                ).status_code
                == 201
            )
            with open(path, "rb") as fh:
                created = api.post(f"{base}/models/{family}/versions/", files={"file": (path.name, fh)}, timeout=60)
            assert created.status_code == 201, created.text
            started = api.post(
                f"{base}/versions/{created.json()['id']}/builds/",
                json={"targets": ["onnx-fp32", "onnx-int8"]},
                timeout=30,
            )
            assert started.status_code == 201, started.text
            builds[family] = started.json()["id"]
        wait_for(
            lambda: all(Build.objects.get(pk=b).status in BuildStatus.terminal() for b in builds.values()),
            timeout=300,
            what="the three builds finished",
        )
        artifacts = {}
        for family, build_id in builds.items():
            build = Build.objects.get(pk=build_id)
            assert build.status == BuildStatus.SUCCEEDED, (family, build.error)
            validate = next(s for s in build.stages if s["name"] == "validate")
            assert "synthetic inputs derived from the graph" in validate["log"], validate["log"]
            artifacts[family] = Artifact.objects.get(build=build, variant="onnx-fp32", status="servable")
        int8 = Artifact.objects.get(build_id=builds["gbt"], variant="onnx-int8")
        assert int8.status == "skipped" and "ai.onnx.ml" in int8.status_reason

        pool_services.pool_create(user=deployer, name="families", team=team_a, replicas=1)
        for family, artifact in artifacts.items():
            made = api.post(
                f"{base}/endpoints/",
                json={"name": family, "pool": "families", "stable_artifact": artifact.pk, "public": True},
                timeout=30,
            )
            assert made.status_code == 201, made.text
        wait_for(
            lambda: PoolModel.objects.filter(artifact__in=artifacts.values(), state=PoolModelState.READY).count() == 3,
            timeout=180,
            what="three models READY in the pool",
        )
        gateway.start(timeout=30)

        for family, path in files.items():
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            names = [o.name for o in session.get_outputs()]
            for feeds in requests_for(family):
                expected = dict(zip(names, session.run(names, feeds)))
                answer = wait_for(
                    lambda: (
                        (
                            r := requests.post(
                                f"{gateway.url}/v2/models/{family}/infer", json=kserve_body(feeds), timeout=10
                            )
                        ).status_code
                        == 200
                        and r
                    ),
                    timeout=10,
                    what=f"{family} answers through the gateway",
                    interval=0.1,
                )
                got = {o["name"]: o for o in answer.json()["outputs"]}
                assert set(got) == set(names), (family, got.keys())
                for name, want in expected.items():
                    values = np.asarray(got[name]["data"]).reshape(
                        want.shape
                    )  # a [batch] output comes back as [batch, 1]
                    assert got[name]["shape"][0] == want.shape[0]
                    if want.dtype.kind == "f":
                        np.testing.assert_allclose(values, want, rtol=1e-5, atol=1e-6, err_msg=f"{family}.{name}")
                    else:
                        assert values.tolist() == want.tolist(), f"{family}.{name}"
            # the gateway checks the signature: a wrong input name is a 400 naming it, not a Triton error
            wrong = {"inputs": [{"name": "nope", "shape": [1, 1], "datatype": "FP32", "data": [0.0]}]}
            refused = requests.post(f"{gateway.url}/v2/models/{family}/infer", json=wrong, timeout=10)
            assert refused.status_code == 400 and "nope" in refused.text, refused.text
    finally:
        gateway.stop()
        worker.stop()
        stop(pools)
