"""A release's build finished by hand (no factory run): its artifacts, packaged, and the
tune's evidence, so the reconcile moves the release on as after a real build."""

from harness.packaging import write_model_dir
from registry import storage
from registry.models import Artifact, ArtifactStatus, Build, BuildStatus
from registry.names import triton_model_name


def packaged(build, variant: str, onnx_path, tmp_path) -> dict:
    name = triton_model_name(build.version.model.name, build.version.version, variant)
    rel, sha = storage.put_dir(write_model_dir(tmp_path / f"staging-{variant}", name, onnx_path))
    return {"path": rel, "sha256": sha, "triton_model_name": name}


def finish_build(release, *, tuned: bool, failed: bool = False, onnx_path=None, tmp_path=None):
    build = Build.objects.get(pk=release.build_id)
    if failed:
        build.status, build.error = BuildStatus.FAILED, "validate: the model outputs NaN"
        build.save()
        return None
    base = Artifact.objects.create(
        version=build.version,
        build=build,
        variant="onnx-int8",
        status=ArtifactStatus.SERVABLE,
        **packaged(build, "onnx-int8", onnx_path, tmp_path),
    )
    evidence = {
        "trials": [{"trial": 0, "knobs": {"instances": 1}, "throughput_rps": 100.0}],
        "default": {"throughput_rps": 100.0, "p50_ms": 2.0, "p99_ms": 9.0},
        "best": {"trial": 1, "knobs": {"instances": 2}, "throughput_rps": 310.0, "p50_ms": 1.0, "p99_ms": 6.0},
        "gain": 3.1,
        "slo_p99_ms": 40.0,
    }
    tuned_row = Artifact.objects.create(
        version=build.version,
        build=build,
        variant="onnx-int8-tuned",
        status=ArtifactStatus.SERVABLE if tuned else ArtifactStatus.SKIPPED,
        status_reason="" if tuned else "no config beat the factory's default by more than 5 %",
        benchmark={"tune": evidence},
        **(packaged(build, "onnx-int8-tuned", onnx_path, tmp_path) if tuned else {}),
    )
    build.status = BuildStatus.SUCCEEDED
    build.save()
    return tuned_row if tuned else base
