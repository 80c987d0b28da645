"""The artifact factory's pipeline run in-process against the real database and store:
what a build yields, and how bad input fails it with nothing published."""

import datetime as dt
import filecmp

import pytest
from django.utils import timezone
from tritonclient.grpc import model_config_pb2 as mc

from harness import factories
from registry import storage, triton_config
from registry.factory import runner
from registry.factory.stages import ADAPTER
from registry.models import Artifact, Build, BuildStatus, Event, VersionStatus
from registry.services import builds as build_services
from tests.registry.build_helpers import (
    custom_op_onnx,
    fast_build_settings,
    nan_variant_onnx,
    raw_version,
    upload_version,
)

# transaction=True: the runner's heartbeat thread has its own connection and must see the rows.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fast(settings):
    fast_build_settings(settings)


@pytest.fixture
def ranker(team_a):
    return factories.registered_model(team_a, name="ranker")


def _build(user, version, **kwargs) -> Build:
    build, created = build_services.build_start(user=user, version=version, **kwargs)
    assert created
    assert runner.run(build.pk, owner="test-worker:1") in {"published", "failed"}
    build.refresh_from_db()
    return build


def _published_dirs() -> list:
    root = storage.root() / "dirs"
    return [p for p in root.glob("*/*")] if root.exists() else []


def test_build_of_uploaded_onnx_yields_servable_fp32_and_int8(alice, ranker, onnx_path):
    version = upload_version(alice, ranker, onnx_path)
    build = _build(alice, version)

    assert build.status == BuildStatus.SUCCEEDED, build.error
    assert build.progress == 100 and build.attempt == 1 and not build.lease_owner
    assert [s["name"] for s in build.stages] == [
        "canonicalize",
        "optimize",
        "variants",
        "validate",
        "benchmark",
        "package",
    ]
    assert all(s["status"] == "succeeded" and s["duration_s"] is not None for s in build.stages)
    assert "fused 26 embedding lookups" not in build.stages[1]["log"]  # the tiny graph has one table
    artifacts = {a.variant: a for a in Artifact.objects.filter(build=build)}
    assert set(artifacts) == {"onnx-fp32", "onnx-int8"}
    for variant, artifact in artifacts.items():
        assert artifact.status == "servable", artifact.status_reason
        assert artifact.triton_model_name == f"ranker__v1__{variant}"
        directory = storage.absolute(artifact.path)
        assert directory.name == artifact.sha256 == storage.tree_sha256(directory)
        config = triton_config.parse((directory / "config.pbtxt").read_text())
        assert config.name == artifact.triton_model_name and config.backend == "python"
        assert [(i.name, list(i.dims), i.data_type) for i in config.input] == [
            ("dense", [13], mc.TYPE_FP32),
            ("sparse", [26], mc.TYPE_INT64),
        ]
        assert config.max_batch_size == 512 and config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
        assert config.parameters["onnx_file"].string_value == "model.onnx"
        assert filecmp.cmp(directory / "1" / "model.py", ADAPTER, shallow=False)
        assert (directory / "1" / "model.onnx").stat().st_size > 0
        assert set(artifact.benchmark["batches"]) == {"1", "8"}
        assert artifact.benchmark["batches"]["8"]["throughput_rps"] > 0 and artifact.benchmark["threads"] == 1
        assert artifact.validation["rows"] == 512 and artifact.validation["nan_count"] == 0
    fp32, int8 = artifacts["onnx-fp32"], artifacts["onnx-int8"]
    assert fp32.validation["max_abs_error"] <= 1e-5
    assert abs(int8.validation["auc_delta"]) <= 0.001 and int8.validation["max_abs_error"] > 0  # really quantized
    assert int8.size_bytes < fp32.size_bytes
    version.refresh_from_db()
    assert version.status == VersionStatus.READY
    transitions = list(
        Event.objects.filter(object_type="registry.build", object_id=str(build.pk)).values_list("to_state", flat=True)
    )
    assert set(transitions) >= {"queued", "running", "succeeded"}


def test_on_a_worker_without_a_gpu_gpu_targets_are_skipped_with_the_reason_and_not_servable(alice, ranker, onnx_path):
    version = upload_version(alice, ranker, onnx_path)
    build = _build(alice, version, targets=["onnx-fp32", "onnx-fp32-gpu", "onnx-fp16", "tensorrt"])
    assert build.status == BuildStatus.SUCCEEDED, build.error  # onnx-fp32 is servable
    artifacts = {a.variant: a for a in build.artifacts.all()}
    assert artifacts["onnx-fp32"].status == "servable"
    for variant, provider in (
        ("onnx-fp32-gpu", "CUDAExecutionProvider"),
        ("onnx-fp16", "CUDAExecutionProvider"),
        ("tensorrt", "TensorrtExecutionProvider"),
    ):
        artifact = artifacts[variant]
        assert artifact.status == "skipped" and artifact.status_reason.startswith(f"not validated on {provider}")
        assert "the CPU build has no GPU providers" in artifact.status_reason
        assert "passed" not in artifact.validation and artifact.benchmark == {"skipped": artifact.status_reason}
        config = triton_config.parse((storage.absolute(artifact.path) / "config.pbtxt").read_text())
        assert config.platform == "onnxruntime_onnx" and config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
        assert config.max_batch_size == 4096 and list(config.dynamic_batching.preferred_batch_size) == [
            32,
            512,
            4096,
        ]  # stated default
        assert not (storage.absolute(artifact.path) / "1" / "model.py").exists()
    # Evidence a CPU can give (does the graph run, how far are its outputs), not a validation.
    assert artifacts["onnx-fp16"].validation["cpu_check"]["max_abs_error"] < 1e-2
    accelerator = triton_config.parse(
        (storage.absolute(artifacts["tensorrt"].path) / "config.pbtxt").read_text()
    ).optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert accelerator.name == "tensorrt" and accelerator.parameters["precision_mode"] == "FP16"
    assert accelerator.parameters["trt_engine_cache_enable"] == "1"
    assert "onnx-fp32-gpu: skipped (not validated on CUDAExecutionProvider" in build.stages[3]["log"]


def test_a_build_of_gpu_targets_alone_on_a_cpu_worker_fails_with_the_reason(alice, ranker, onnx_path):
    version = upload_version(alice, ranker, onnx_path)
    build = _build(alice, version, targets=["onnx-fp16"])
    assert build.status == BuildStatus.FAILED
    assert build.error.startswith("no variant passed validation: onnx-fp16: not validated on CUDAExecutionProvider")
    version.refresh_from_db()
    assert version.status != VersionStatus.READY


def test_truncated_source_fails_the_build_and_publishes_nothing(alice, ranker, onnx_path):
    version = upload_version(alice, ranker, onnx_path)
    stored = storage.absolute(version.file_path)
    stored.write_bytes(stored.read_bytes()[: stored.stat().st_size // 3])
    build = _build(alice, version)
    assert build.status == BuildStatus.FAILED
    assert build.error.startswith("canonicalize: the ONNX file does not parse (truncated or corrupt)")
    assert build.stages[0]["status"] == "failed" and "FAILED" in build.stages[0]["log"]
    assert not Artifact.objects.exists() and not _published_dirs()
    version.refresh_from_db()
    assert version.status == VersionStatus.FAILED
    event = Event.objects.filter(object_type="registry.build", to_state="failed").get()
    assert event.data["code"] == "corrupt_onnx"


def test_unsupported_operator_fails_with_its_name(alice, ranker, tmp_path):
    version = raw_version(ranker, custom_op_onnx(tmp_path / "custom.onnx"))
    build = _build(alice, version)
    assert build.status == BuildStatus.FAILED
    assert "unsupported operator" in build.error and "com.example.ops::FancyScore" in build.error
    assert not Artifact.objects.exists() and not _published_dirs()


def test_variant_that_outputs_nan_is_rejected_with_evidence(onnx_path, tmp_path):
    """The validate stage with real ONNX Runtime sessions: the original is the tiny CTR
    graph, one variant outputs NaN, one is fine. (ONNX Runtime's CPU provider upcasts fp16
    arithmetic, so a real NaN-producing fp16/int8 variant cannot be made on this machine.)"""
    import shutil

    from registry.factory import stages

    canonical = tmp_path / "canonical.onnx"
    shutil.copyfile(onnx_path, canonical)
    lines = []
    ctx = stages.BuildContext(
        work_dir=tmp_path,
        model_name="ranker",
        version=1,
        task="ctr",
        source="upload",
        framework="onnx",
        source_path=canonical,
        source_uri="",
        expected_signature={},
        targets=["onnx-fp32", "onnx-int8"],
        log=lines.append,
    )
    ctx.canonical = canonical
    ctx.signature = {
        "inputs": [
            {"name": "dense", "dtype": "float32", "shape": [-1, 13]},
            {"name": "sparse", "dtype": "int64", "shape": [-1, 26]},
        ],
        "outputs": [{"name": "ctr", "dtype": "float32", "shape": [-1, 1]}],
    }
    ctx.variants = {
        "onnx-fp32": stages.VariantResult("onnx-fp32", onnx_path=canonical),
        "onnx-int8": stages.VariantResult("onnx-int8", onnx_path=nan_variant_onnx(tmp_path / "nan.onnx")),
    }
    stages.validate(ctx)
    bad, good = ctx.variants["onnx-int8"], ctx.variants["onnx-fp32"]
    assert bad.status == "rejected" and "outputs NaN/Inf on 512 of 512 values" in bad.reason
    assert bad.validation["nan_count"] == 512 and bad.validation["passed"] is False
    assert good.status == "validated" and good.validation["max_abs_error"] == 0
    assert any("onnx-int8: rejected" in line for line in lines)
    stages.package(ctx)
    assert bad.package_dir is None and good.package_dir is not None  # never packaged, never published


def test_signature_mismatch_fails(alice, ranker, onnx_path):
    version = raw_version(
        ranker,
        onnx_path,
        signature={"inputs": [{"name": "features", "dtype": "float32", "shape": [-1, 39]}], "outputs": []},
    )
    build = _build(alice, version)
    assert build.status == BuildStatus.FAILED and "signature mismatch" in build.error and "features" in build.error


# --- lease, attempts, reclaim ------------------------------------------------------------------
def test_a_live_lease_keeps_other_workers_out_and_an_expired_one_is_reclaimed(alice, ranker, onnx_path):
    version = upload_version(alice, ranker, onnx_path)
    build, _ = build_services.build_start(user=alice, version=version)
    assert build_services.build_claim(build_id=build.pk, owner="w1") is not None
    assert build_services.build_claim(build_id=build.pk, owner="w2") is None  # w1 holds a live lease
    assert runner.run(build.pk, owner="w2") == "nothing-to-do"

    Build.objects.filter(pk=build.pk).update(lease_expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert build_services.builds_reclaim() == [build.pk]
    build.refresh_from_db()
    assert build.status == BuildStatus.QUEUED and build.lease_owner == ""
    assert Event.objects.filter(
        object_id=str(build.pk), to_state="queued", reason__contains="lease of w1 expired"
    ).exists()

    # The worker that lost its lease can no longer write; the new owner publishes once.
    assert runner.run(build.pk, owner="w3") == "published"
    with pytest.raises(build_services.LeaseLost):
        build_services.build_publish(build_id=build.pk, owner="w1", artifacts=[])
    build.refresh_from_db()
    assert build.status == BuildStatus.SUCCEEDED and build.attempt == 2
    assert "previous attempt's worker was lost" in build.stages[0]["log"]
    assert Artifact.objects.filter(build=build).count() == 2


def test_a_queued_build_nobody_claimed_is_sent_again(alice, ranker, onnx_path):
    version = upload_version(alice, ranker, onnx_path)
    build, _ = build_services.build_start(user=alice, version=version)
    assert build_services.builds_reclaim() == []  # freshly queued: its message is presumably on the way
    Build.objects.filter(pk=build.pk).update(lease_expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert build_services.builds_reclaim() == [build.pk]
    build.refresh_from_db()
    assert build.status == BuildStatus.QUEUED and build.lease_expires_at > timezone.now()
    assert Event.objects.filter(object_id=str(build.pk), action="redispatched").count() == 1
    assert runner.run(build.pk, owner="w1") == "published"


def test_past_max_attempts_the_build_fails_with_the_reason(alice, ranker, onnx_path):
    version = upload_version(alice, ranker, onnx_path)
    build, _ = build_services.build_start(user=alice, version=version)
    Build.objects.filter(pk=build.pk).update(attempt=build.max_attempts, status=BuildStatus.QUEUED)
    assert runner.run(build.pk, owner="w9") == "nothing-to-do"
    build.refresh_from_db()
    assert build.status == BuildStatus.FAILED and f"gave up after {build.max_attempts} attempt(s)" in build.error


def test_cancel_stops_a_running_build(alice, ranker, onnx_path):
    version = upload_version(alice, ranker, onnx_path)
    build, _ = build_services.build_start(user=alice, version=version)
    build_services.build_claim(build_id=build.pk, owner="w1")
    build_services.build_cancel(user=alice, build=build, reason="wrong file")
    with pytest.raises(build_services.LeaseLost):
        build_services.build_stage_update(build_id=build.pk, owner="w1", stage="optimize", status="running")
    build.refresh_from_db()
    assert build.status == BuildStatus.CANCELLED and build.error == "wrong file"


def test_tasks_are_named_late_acked_and_routed_by_target():
    from config.celery import app
    from registry.factory import queue_for
    from registry.tasks import build_run, builds_reclaim

    assert build_run.name == "registry.build_run" and build_run.acks_late and build_run.reject_on_worker_lost
    assert build_run.soft_time_limit < build_run.time_limit
    assert queue_for(["onnx-fp32", "onnx-int8"]) == "build-cpu" and queue_for(["onnx-fp32", "tensorrt"]) == "build-gpu"
    entry = next(e for e in app.conf.beat_schedule.values() if e["task"] == builds_reclaim.name)
    assert entry["options"]["queue"] == "control"


def test_build_log_and_variants_table_give_the_same_sizes(alice, ranker, onnx_path, client):
    """One formatter (registry/sizes.py): the package stage's log line and the build page's
    variants table write each artifact's size identically."""
    from registry.sizes import human_size

    build = _build(alice, upload_version(alice, ranker, onnx_path))
    package_log = next(s["log"] for s in build.stages if s["name"] == "package")
    client.force_login(alice)
    page = client.get(f"/models/builds/{build.pk}/").content.decode()
    for artifact in Artifact.objects.filter(build=build):
        shown = human_size(artifact.size_bytes)
        assert f"packaged {artifact.triton_model_name} ({shown})" in package_log, package_log
        assert f"<td>{shown}</td>" in page


def test_sizes_are_written_in_iec_units():
    from registry.sizes import human_size

    assert [human_size(n) for n in (None, 1, 1000, 1024, 1536, 10 * 1024**2 + 1, 300 * 1024**3)] == [
        "—",
        "1 byte",
        "1000 bytes",
        "1.00 KiB",
        "1.50 KiB",
        "10 MiB",
        "300 GiB",
    ]
