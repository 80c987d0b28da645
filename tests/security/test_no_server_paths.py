"""API replies carry no absolute server paths: every GET route of the OpenAPI schema is
called as a member of the owning team over a world with one object of each kind (a local
pool whose repository lies under VAR_DIR, replicas and models whose errors name files, an
uploaded version, an LLM directory, a build, an endpoint, a rollout, an experiment, an
alert, a training run), and no reply holds the server's VAR_DIR, artifact root, pools
directory, source tree or temporary directory. The create replies made while building the
world are scanned too. A GET route the scan cannot fill in fails the test, so a new route
is scanned from the day it exists."""

import io
import re
import tempfile
from pathlib import Path

import mlflow
import pytest
from django.conf import settings
from drf_spectacular.generators import SchemaGenerator

from deployments.models import PoolModel
from deployments.services.keys import inference_key_create
from deployments.services.pools import pools_root
from harness import factories
from kernel import mlflow as mlflow_config
from monitoring.services.alerts import alert_raise
from registry.models import Event, Role, Task
from tests.registry.build_helpers import upload_version
from tests.registry.llm_archives import hf_files, tar_gz

pytestmark = pytest.mark.django_db

# Query strings a route needs to answer 200 (its required parameters).
QUERIES = {
    "/api/v1/pools/{name}/log/": "?replica=r0",
    "/api/v1/versions/resolve/": "?uri=models:/scan-model@champion",
    "/api/v1/metrics/": "?endpoint=scan-endpoint&metric=latency_p99_ms",
    "/api/v1/rollout-forecast/": "?endpoint=scan-endpoint",
}
# Staff-only reads, and the gateway's (the rest are read as a member of the owning team).
STAFF_ONLY = {"/api/v1/metrics/"}
GATEWAY_ONLY = {"/api/v1/gateway/routes"}


def server_dirs(tmp_path: Path) -> list[str]:
    """Directories whose absolute path must never appear in a reply."""
    dirs = {
        Path(settings.VAR_DIR),
        Path(settings.ARTIFACT_ROOT),
        Path(settings.BASE_DIR),
        pools_root(),
        Path(tempfile.gettempdir()),
        tmp_path,
    }
    return sorted({str(d.resolve()) for d in dirs} | {str(d) for d in dirs}, key=len, reverse=True)


@pytest.fixture
def mlflow_run(settings, tmp_path):
    settings.MLFLOW_TRACKING_URI = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings.MLFLOW_ARTIFACT_ROOT = str(tmp_path / "mlruns")
    mlflow_config.configure.cache_clear()
    mlflow_config.configure()
    experiment = mlflow_config.experiment_id("scan-training", team="scan-team")
    with mlflow.start_run(experiment_id=experiment) as run:
        mlflow.log_param("epochs", 1)
        mlflow.log_metric("auc", 0.7)
        mlflow.log_text("notes", "notes.txt")
    yield experiment, run.info.run_id
    mlflow_config.configure.cache_clear()


@pytest.fixture
def world(api_for, onnx_path, tmp_path, mlflow_run, settings):
    settings.POOLS_DIR = tmp_path / "pools"
    team = factories.team("scan-team")
    owner = factories.user("scan-owner")
    factories.member(owner, team, Role.ADMIN)
    api = api_for(owner)
    created = []  # create replies, scanned as well

    model = factories.registered_model(team, name="scan-model")
    version = upload_version(owner, model, onnx_path)
    stable = factories.artifact(team, onnx_path, tmp_path, model_name="scan-model")
    candidate = factories.artifact(team, onnx_path, tmp_path, model_name="scan-model", variant="onnx-int8")
    created.append(api.put("/api/v1/models/scan-model/aliases/champion/", {"version": version.version}, format="json"))

    llm = factories.registered_model(team, name="scan-chat", task=Task.LLM)
    archive = io.BytesIO(tar_gz(hf_files(), prefix="tiny/"))
    archive.name = "tiny.tar.gz"
    created.append(api.post(f"/api/v1/models/{llm.name}/llm-versions/", {"archive": archive}, format="multipart"))

    made = api.post("/api/v1/pools/", {"name": "scan-pool", "team": team.name, "driver": "local"}, format="json")
    created.append(made)
    from deployments.models import ServingPool

    pool = ServingPool.objects.get(name="scan-pool")
    assert str(pools_root()) in pool.model_repository  # what the reply must not show
    # What the drivers record when things fail: Triton's and the launcher's messages name files.
    log_path = pools_root() / "scan-pool" / "replicas" / "r0" / "tritonserver.log"
    pool.status_reason = f"r0 down: tritonserver exited with 1; log: {log_path}"
    pool.save()
    factories.replica(
        pool, "r0", http_url="http://127.0.0.1:18000", last_error=f"exited; see {log_path}", log_path=str(log_path)
    )
    PoolModel.objects.create(
        pool=pool,
        artifact=stable,
        triton_model_name=stable.triton_model_name,
        state="failed",
        error=f"failed to load '{stable.triton_model_name}': {pools_root() / 'scan-pool' / 'models'} has no version",
    )

    endpoint = factories.endpoint(pool, stable, name="scan-endpoint")
    release = api.post("/api/v1/releases/", {"version": version.pk, "endpoint": endpoint.name}, format="json")
    created.append(release)
    rollout = factories.rollout(endpoint, candidate)
    alert, _ = alert_raise(
        kind="canary_rollback", reason="p99 over SLO", endpoint=endpoint.name, rollout_id=rollout.pk, team=team
    )
    key, _ = inference_key_create(user=owner, team=team, name="scan-key")
    made = api.post(
        "/api/v1/experiments/",
        {
            "endpoint": endpoint.name,
            "name": "scan-exp",
            "hypothesis": "int8 is as good",
            "candidates": [candidate.pk],
            "baseline_rate": 0.2,
            "exposures_per_unit": 4,
            "mde": 0.05,
        },
        format="json",
    )
    created.append(made)
    secret = api.post(
        "/api/v1/secrets/",
        {"team": team.name, "name": "scan-secret", "value": "sk-" + "x" * 20, "origins": ["https://api.example.com"]},
        format="json",
    )
    created.append(secret)
    silence = api.post(
        "/api/v1/silences/",
        {"team": team.name, "endpoint": endpoint.name, "duration_s": 1800, "comment": "maintenance"},
        format="json",
    )
    created.append(silence)
    channel = api.post(
        "/api/v1/notification-channels/",
        {"team": team.name, "kind": "email", "target": "ops@example.com"},
        format="json",
    )
    created.append(channel)
    from django.utils import timezone

    from monitoring.models import Verdict

    verdict = Verdict.objects.create(
        rollout_id=rollout.pk,
        endpoint=endpoint.name,
        stable_variant="onnx-fp32",
        candidate_variant="onnx-int8",
        outcome="pass",
        window_start=timezone.now(),
        window_end=timezone.now(),
        team=team,
    )

    from deployments.services.pool_secrets import pool_secret_bind

    binding = pool_secret_bind(
        user=factories.user("scan-admin", staff=True), team=team, namespace="", secret_name="scan-s3"
    )
    import numpy as np

    from registry.services.item_catalogs import item_catalog_create, item_catalog_version_create

    catalog = item_catalog_create(user=owner, team=team, name="scan-items", levels=2, codes_per_level=4)
    catalog_version = item_catalog_version_create(
        user=owner,
        catalog=catalog,
        item_id=np.arange(1, 5, dtype=np.int64),
        semantic_id=np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.int64),
    )
    import datetime as dt

    from django.utils import timezone

    from experiments.models import Dataset

    now = timezone.now()
    dataset = Dataset.objects.create(  # as a build leaves it: its Parquet folder under VAR_DIR
        team=team,
        endpoint=endpoint,
        name="scan-data",
        version=1,
        window_start=now - dt.timedelta(hours=3),
        window_end=now - dt.timedelta(hours=2),
        split_at=now - dt.timedelta(hours=2, minutes=20),
        attribution_window_s=600,
        path=str(tmp_path / "var" / "datasets" / "scan-data" / "1"),
        schema={"inputs": {"dense": {"datatype": "FP32", "shape": [13]}}},
        statistics={"rows": 10, "label_rate": 0.3},
        lineage={"endpoint": endpoint.name, "experiment": None, "serving_versions": ["v1-onnx-fp32"]},
    )
    experiment_id, run_id = mlflow_run
    ids = {
        "datasets": dataset.public_id,
        "alerts": alert.pk,
        "artifacts": stable.pk,
        "builds": stable.build.pk,
        "endpoints": endpoint.name,
        "events": Event.objects.filter(team=team).latest("pk").pk,
        "experiments": made.json().get("id"),
        "inference-keys": key.pk,
        "item-catalogs": catalog.name,
        "item-catalogs/versions": catalog_version.version,
        "models": model.name,
        "aliases": "champion",
        "pools": pool.name,
        "pool-secret-bindings": binding.pk,
        "releases": release.json().get("id"),
        "rollouts": rollout.pk,
        "secrets": secret.json().get("id"),
        "silences": silence.json().get("id"),
        "training-experiments": experiment_id,
        "runs": run_id,
        "verdicts": verdict.pk,
        "versions": version.pk,
    }
    return api, ids, created


def _get_routes() -> list[str]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return sorted(path for path, ops in schema["paths"].items() if "get" in ops)


def _fill(template: str, ids: dict) -> str | None:
    """The template with each parameter replaced by the world's object of the resource
    named just before it (a nested one by "outer/inner"); None when the world has none."""
    parts = template.strip("/").split("/")
    out = []
    for index, part in enumerate(parts):
        if part.startswith("{"):
            nested = f"{parts[index - 3]}/{parts[index - 1]}" if index >= 3 else None
            value = ids.get(nested) if nested in ids else ids.get(parts[index - 1])
            if value is None:
                return None
            out.append(str(value))
        else:
            out.append(part)
    return "/" + "/".join(out) + ("/" if template.endswith("/") else "")


def test_no_api_reply_shows_a_server_path(world, api_for, tmp_path):
    api, ids, created = world
    staff = api_for(factories.user("scan-staff", staff=True))
    from django.contrib.auth.models import Permission

    reader = factories.user("scan-gateway")
    reader.user_permissions.add(Permission.objects.get(codename="read_routes", content_type__app_label="deployments"))
    gateway = api_for(reader)
    dirs = server_dirs(tmp_path)
    leaks, unfilled, failed = [], [], []

    def scan(label: str, body: str) -> None:
        for directory in dirs:
            if directory in body:
                at = body.index(directory)
                leaks.append(f"{label}: {directory} in …{body[max(0, at - 80) : at + 120]}…")
                return

    for response in created:
        assert response.status_code in (200, 201), (response.request["PATH_INFO"], response.content[:400])
        scan(f"{response.request['REQUEST_METHOD']} {response.request['PATH_INFO']}", response.content.decode())
    for template in _get_routes():
        path = _fill(template, ids)
        if path is None:
            unfilled.append(template)
            continue
        client = staff if template in STAFF_ONLY else gateway if template in GATEWAY_ONLY else api
        response = client.get(path + QUERIES.get(template, ""))
        if response.status_code != 200:
            failed.append(f"GET {path}: {response.status_code} {response.content[:200]!r}")
            continue
        raw = b"".join(response.streaming_content) if response.streaming else response.content
        scan(f"GET {path}", raw.decode(errors="replace"))
    assert not unfilled, f"GET routes the scan has no object for (add one to the world): {unfilled}"
    assert not failed, "\n".join(failed)
    assert not leaks, "\n".join(leaks)


def test_a_local_pools_repository_is_not_in_its_reply_but_a_kubernetes_pools_is(world):
    api, ids, _ = world
    body = api.get(f"/api/v1/pools/{ids['pools']}/").json()
    assert body["driver"] == "local" and body["model_repository"] == ""
    assert not re.search(r"(^|[\s'\"(])/[\w.-]+/", body["status_reason"])  # the log's path cut to its name
    assert "tritonserver.log" in body["status_reason"]
