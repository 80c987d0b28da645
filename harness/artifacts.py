"""Packaged candidate artifacts for the closed-loop tests and benchmark: healthy, failing a
share of requests, or slower (an injected wrapper around the served model)."""

from __future__ import annotations

import shutil
from pathlib import Path

INJECT = """

# --- injected: behave like a bad model version (errors and/or extra latency) ---
import random as _random
import time as _time

_serve = TritonPythonModel.execute


def _injected_execute(self, requests):
    if {delay_s} > 0:
        _time.sleep({delay_s})
    responses = _serve(self, requests)
    return [pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError("injected failure"))
            if _random.random() < {error_rate} else r for r in responses]


TritonPythonModel.execute = _injected_execute
"""


def package_artifact(
    team,
    onnx_path: Path,
    work: Path,
    *,
    model_name: str = "ctr",
    error_rate: float = 0.0,
    delay_s: float = 0.0,
    write_dir=None,
):
    """A servable Artifact over a Triton model dir in the artifact factory's layout, whose
    model optionally fails `error_rate` of requests or sleeps `delay_s` per batch.
    `write_dir(parent, name, onnx_path)`: how to write the directory (default: the demo
    model's, harness/packaging.py)."""
    from harness.packaging import write_model_dir
    from registry import storage
    from registry.models import (
        Artifact,
        ArtifactStatus,
        Build,
        BuildStatus,
        ModelVersion,
        RegisteredModel,
        VersionSource,
    )
    from registry.names import triton_model_name

    model = RegisteredModel.objects.filter(name=model_name).first() or RegisteredModel.objects.create(
        name=model_name, team=team
    )
    version = ModelVersion.objects.create(
        model=model,
        version=model.versions.count() + 1,
        source=VersionSource.UPLOAD,
        file_sha256="0" * 64,
        file_path="x.onnx",
    )
    build = Build.objects.create(version=version, targets=["onnx-fp32"], status=BuildStatus.SUCCEEDED)
    name = triton_model_name(model_name, version.version, "onnx-fp32")
    staged = (write_dir or write_model_dir)(work / "staging", name, onnx_path)
    if error_rate or delay_s:
        with open(staged / "1" / "model.py", "a") as fh:
            fh.write(INJECT.replace("{error_rate}", repr(float(error_rate))).replace("{delay_s}", repr(float(delay_s))))
    rel, sha = storage.put_dir(staged)
    shutil.rmtree(work / "staging", ignore_errors=True)
    return Artifact.objects.create(
        version=version,
        build=build,
        variant="onnx-fp32",
        status=ArtifactStatus.SERVABLE,
        triton_model_name=name,
        path=rel,
        sha256=sha,
    )
