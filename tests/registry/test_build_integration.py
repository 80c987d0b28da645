"""The artifact factory end to end with real processes: a Celery worker on the real
broker builds a registered version; a real tritonserver loads the packaged CPU variants
and answers like ONNX Runtime on the original; SIGKILL of the worker mid-build ends,
after lease expiry and reclaim, with exactly one published set of artifacts."""

import shutil
import time

import numpy as np
import pytest

from harness import factories
from registry import storage
from registry.models import Artifact, Build, BuildStatus, Event
from tests.registry.build_helpers import fast_build_env, upload_version

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _wait_for(predicate, *, timeout: float, what: str, worker_log=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    log = worker_log.read_text(errors="replace")[-3000:] if worker_log and worker_log.exists() else ""
    raise AssertionError(f"timed out waiting for {what}\n{log}")


def _feeds(rows: int, seed: int = 11) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "dense": rng.standard_normal((rows, 13)).astype(np.float32),
        "sparse": rng.integers(0, 1_000_000, size=(rows, 26), dtype=np.int64),
    }


def _triton_infer(url: str, name: str, feeds: dict) -> np.ndarray:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url=url)
    inputs = []
    for key, array in feeds.items():
        tensor = httpclient.InferInput(key, list(array.shape), "FP32" if array.dtype == np.float32 else "INT64")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return client.infer(name, inputs, outputs=[httpclient.InferRequestedOutput("ctr")]).as_numpy("ctr")


def test_worker_builds_and_tritonserver_serves_the_cpu_variants(
    celery_worker, subprocess_env, alice_api, alice, team_a, onnx_path, tmp_path
):
    from serving.tritonserver import TritonNotAvailable, TritonProcess, find_binary

    subprocess_env.update(fast_build_env())
    worker = celery_worker()
    version = upload_version(alice, factories.registered_model(team_a, name="ranker"), onnx_path)
    response = alice_api.post(
        f"/api/v1/versions/{version.pk}/builds/", {}, format="json", HTTP_IDEMPOTENCY_KEY="integration-1"
    )
    assert response.status_code == 201, response.json()
    build_id = response.json()["id"]
    build = _wait_for(
        lambda: (b := Build.objects.get(pk=build_id)).status in BuildStatus.terminal() and b,
        timeout=120,
        what="the build to finish",
        worker_log=worker.log_path,
    )
    assert build.status == BuildStatus.SUCCEEDED, build.error
    body = alice_api.get(f"/api/v1/builds/{build_id}/").json()
    assert body["progress"] == 100 and all(s["status"] == "succeeded" for s in body["stages"])
    artifacts = {a.variant: a for a in Artifact.objects.filter(build_id=build_id)}
    assert {v: a.status for v, a in artifacts.items()} == {"onnx-fp32": "servable", "onnx-int8": "servable"}
    assert all(a.validation["passed"] and a.benchmark["batches"] for a in artifacts.values())

    try:
        find_binary()
    except TritonNotAvailable as exc:
        pytest.skip(f"tritonserver: {exc}")
    repo = tmp_path / "repo"
    repo.mkdir()
    for artifact in artifacts.values():
        shutil.copytree(storage.absolute(artifact.path), repo / artifact.triton_model_name)
    server = TritonProcess(model_repository=repo, work_dir=tmp_path / "triton").start()
    try:
        server.wait_live(60)
        feeds = _feeds(16)
        import onnxruntime as ort

        original = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(["ctr"], feeds)[0]
        for variant, tolerance in (("onnx-fp32", 1e-5), ("onnx-int8", None)):
            artifact = artifacts[variant]
            server.load(artifact.triton_model_name)
            assert server.is_model_ready(artifact.triton_model_name)
            served = _triton_infer(f"127.0.0.1:{server.http_port}", artifact.triton_model_name, feeds)
            assert served.shape == original.shape
            # int8: as close as the build's validation measured on its seeded sample (plus slack for new rows).
            limit = tolerance if tolerance is not None else max(artifact.validation["max_abs_error"] * 2, 1e-3)
            assert np.max(np.abs(served - original)) <= limit, (variant, np.max(np.abs(served - original)))
    finally:
        server.stop()


def test_sigkill_mid_build_ends_with_exactly_one_published_set(
    celery_worker, subprocess_env, alice, team_a, onnx_path, tmp_path
):
    subprocess_env.update(fast_build_env())
    # A short lease, a quick reclaim tick, and a benchmark long enough to kill the worker inside it.
    subprocess_env.update(
        BUILD_LEASE_SECONDS="2",
        BUILD_RECLAIM_INTERVAL_S="1",
        BUILD_BENCH_SECONDS="0.6",
        BUILD_BENCH_MAX_ITERS="100000000",
        BUILD_BENCH_BATCHES="1,8,32,128",
    )
    first = celery_worker()
    version = upload_version(alice, factories.registered_model(team_a, name="ranker"), onnx_path)
    from registry.services import builds as build_services

    build, _ = build_services.build_start(user=alice, version=version)

    def in_benchmark():
        stages = {s["name"]: s["status"] for s in Build.objects.get(pk=build.pk).stages}
        return stages.get("benchmark") == "running"

    _wait_for(in_benchmark, timeout=90, what="the benchmark stage", worker_log=first.log_path)
    time.sleep(2.5)  # longer than the 2 s lease: only the heartbeat keeps it alive
    from django.utils import timezone

    assert Build.objects.get(pk=build.pk).lease_expires_at > timezone.now()
    first.kill()  # SIGKILL to the whole process group: no chance to clean up or ack
    killed = Build.objects.get(pk=build.pk)
    assert killed.status == BuildStatus.RUNNING and killed.attempt == 1 and not Artifact.objects.exists()

    # A new worker with embedded beat: registry.builds_reclaim requeues once the lease expires.
    second = celery_worker(extra=["-B", "-s", str(tmp_path / "beat-schedule")])
    done = _wait_for(
        lambda: (b := Build.objects.get(pk=build.pk)).status in BuildStatus.terminal() and b,
        timeout=150,
        what="the retried build",
        worker_log=second.log_path,
    )
    assert done.status == BuildStatus.SUCCEEDED, done.error
    assert done.attempt == 2
    artifacts = Artifact.objects.filter(version=version)
    assert sorted(a.variant for a in artifacts) == ["onnx-fp32", "onnx-int8"]
    assert all(a.build_id == build.pk and a.status == "servable" for a in artifacts)
    published = sorted(p.name for p in (storage.root() / "dirs").glob("*/*"))
    assert published == sorted(a.sha256 for a in artifacts)  # nothing else, nothing half-visible
    reasons = list(
        Event.objects.filter(object_type="registry.build", object_id=str(build.pk), to_state="queued").values_list(
            "reason", flat=True
        )
    )
    assert any("expired" in r and "requeued" in r for r in reasons)
