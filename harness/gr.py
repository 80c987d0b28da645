"""Generative recommenders for tests and benchmarks, the one way they make and serve one:

- `tiny_gr()`: the reference recommender at its tiny size (experiments/gr/train.py TINY),
  trained once per machine and code version under GR_CACHE or VAR_DIR/gr-cache/ (seconds the
  first time): `bundle/` (a version's bundle) and `catalog.npz` (item_id, semantic_id,
  embedding), with `holdout.npz` (the world's true next-item distribution for the holdout).
- `register(...)`: the item catalog, its version and the model version, through the services.
- `TritonGR`: a real tritonserver serving stored GR artifacts; `infer` one KServe v2 request.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from serving.tritonserver import TritonProcess

ROOT = Path(__file__).resolve().parents[1]
MAKERS = (
    "experiments/gr/world.py",
    "experiments/gr/model.py",
    "experiments/gr/train.py",
    "experiments/gr/export.py",
    "registry/gr/runtime.py",
    "registry/gr/semantic_ids.py",
    "registry/gr/bundle.py",
)


def _cache_root() -> Path:
    return Path(os.environ.get("GR_CACHE") or Path(os.environ.get("VAR_DIR", ROOT / "var")) / "gr-cache")


def tiny_gr(*, seed: int = 0, cache: Path | None = None) -> Path:
    """The tiny recommender's directory (see the module docstring), made on first use; keyed by
    the making code's hash and written aside then renamed, so concurrent workers share one."""
    from experiments.gr import train as recipe

    digest = hashlib.sha256(b"".join((ROOT / name).read_bytes() for name in MAKERS)).hexdigest()[:12]
    cache = cache or _cache_root()
    path = cache / f"tiny-s{seed}-{digest}"
    if (path / "catalog.npz").is_file():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".tiny-gr-", dir=cache))
    try:
        preset = recipe.TINY
        result = recipe.train(
            preset["world"],
            preset["model"],
            users=preset["users"],
            epochs=preset["epochs"],
            holdout_users=preset["holdout_users"],
            seed=seed,
        )
        recipe.write_bundle(result, scratch / "bundle")
        np.savez(scratch / "holdout.npz", **result.holdout)
        np.savez(scratch / "catalog.npz", **recipe.catalog_arrays(result))  # last: marks it complete
        os.rename(scratch, path)
    except OSError:
        if not (path / "catalog.npz").is_file():
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return path


def catalog_arrays(source: Path) -> dict:
    with np.load(Path(source) / "catalog.npz", allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def register(*, user, team, model_name: str, source: Path, catalog_name: str = "", catalog=None):
    """The model (task generative_rec), its catalog and catalog version and the version from
    `source` (tiny_gr()'s layout), through the services; returns the version."""
    from registry.models import RegisteredModel, Task
    from registry.services.catalog import model_create
    from registry.services.gr_versions import gr_version_create
    from registry.services.item_catalogs import item_catalog_create, item_catalog_version_create

    arrays = catalog_arrays(source)
    levels = arrays["semantic_id"].shape[1]
    codes = json.loads((Path(source) / "bundle" / "manifest.json").read_text())["codes_per_level"]
    model = RegisteredModel.objects.filter(name=model_name).first() or model_create(
        user=user, name=model_name, team=team, task=Task.GENERATIVE_REC
    )
    if catalog is None:
        catalog = item_catalog_create(
            user=user, team=team, name=catalog_name or f"{model_name}-items", levels=levels, codes_per_level=codes
        )
        catalog = item_catalog_version_create(
            user=user, catalog=catalog, item_id=arrays["item_id"], semantic_id=arrays["semantic_id"]
        )
    return gr_version_create(user=user, model=model, bundle_dir=Path(source) / "bundle", catalog_version=catalog)


class TritonGR:
    """tritonserver over a repository of stored GR artifacts (linked in under their Triton names)."""

    def __init__(self, work: Path):
        self.work = Path(work)
        self.repo = self.work / "repo"
        self.triton: TritonProcess | None = None

    def start(self) -> TritonGR:
        self.repo.mkdir(parents=True, exist_ok=True)
        self.triton = TritonProcess(model_repository=self.repo, work_dir=self.work / "server").start()
        self.triton.wait_live(120)
        return self

    def add(self, artifact, *, timeout: float = 120.0) -> str:
        from registry import storage
        from registry.names import triton_name

        name = triton_name(artifact)
        link = self.repo / name
        if not link.exists():
            link.symlink_to(storage.artifact_model_dir(artifact), target_is_directory=True)
        self.triton.load(name, timeout=timeout)
        return name

    def infer(self, name: str, body: dict, *, timeout: float = 30.0) -> tuple[int, dict]:
        return infer(self.triton.http_url, name, body, timeout=timeout)

    def metrics(self) -> str:
        with urllib.request.urlopen(self.triton.metrics_url, timeout=10) as reply:
            return reply.read().decode()

    def stop(self) -> None:
        if self.triton is not None:
            self.triton.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def infer(base_url: str, name: str, body: dict, *, timeout: float = 30.0) -> tuple[int, dict]:
    """POST a KServe v2 request; (status, the JSON reply: outputs by name, or {"error": ...})."""
    request = urllib.request.Request(
        f"{base_url}/v2/models/{name}/infer",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            payload = json.loads(reply.read())
            return reply.status, {o["name"]: o["data"] for o in payload.get("outputs", [])}
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        try:
            return error.code, json.loads(text)
        except json.JSONDecodeError:
            return error.code, {"error": text}


def metric_value(text: str, name: str, **labels) -> float:
    """The sum of `name`'s samples in Prometheus text whose labels include `labels`."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def outlier_bundle(source_bundle: Path, dest: Path, *, scale: float = 1000.0, channel: int = 0) -> Path:
    """A copy of a bundle whose graphs compute the same function with one outlier input channel
    in every layer's first projection: the channel's LayerNorm gain and bias are divided by
    `scale` and the projection weight's matching input column multiplied by it. fp32 keeps its
    beams; per-tensor INT8 weights, whose scale the outlier sets, lose nearly every other weight
    (the outlier-feature failure of LLM.int8()): an int8 variant the overlap gate must stop."""
    import onnx
    from onnx import numpy_helper

    dest = Path(dest)
    shutil.copytree(source_bundle, dest)
    for path in dest.glob("*.onnx"):
        model = onnx.load(str(path))
        inits = {init.name: init for init in model.graph.initializer}
        consumers = {}
        for node in model.graph.node:
            for name in node.input:
                consumers.setdefault(name, []).append(node)
        for norm in [n for n in model.graph.node if n.op_type == "LayerNormalization"]:
            projections = [
                n for n in consumers.get(norm.output[0], []) if n.op_type in ("Gemm", "MatMul") and n.input[1] in inits
            ]
            if not projections or len(norm.input) < 3 or norm.input[1] not in inits:
                continue
            for name in norm.input[1:3]:
                values = numpy_helper.to_array(inits[name]).copy()
                values[channel] /= scale
                inits[name].CopyFrom(numpy_helper.from_array(values, name))
            for node in projections:
                weight = numpy_helper.to_array(inits[node.input[1]]).copy()
                trans_b = node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
                if trans_b:
                    weight[:, channel] *= scale  # [out, in]
                else:
                    weight[channel, :] *= scale  # [in, out]
                inits[node.input[1]].CopyFrom(numpy_helper.from_array(weight, node.input[1]))
        onnx.save(model, str(path))
    return dest


def package(source: Path, repo: Path, name: str, **parameters) -> Path:
    """The fp32 Triton model directory of `source` (tiny_gr()'s layout) at `repo/name`, made
    the factory's way (registry/gr/triton.py) but without a build: for gateway tests and
    benchmarks that need a served GR model and no database."""
    from registry.gr import catalog_files
    from registry.gr.runtime import GRAPH_FILES
    from registry.gr.triton import write_gr_model

    arrays = catalog_arrays(source)
    manifest = json.loads((Path(source) / "bundle" / "manifest.json").read_text())
    with tempfile.TemporaryDirectory(prefix="gr-catalog-") as tmp:
        catalog = catalog_files.write_catalog(
            Path(tmp), arrays["item_id"], arrays["semantic_id"], codes_per_level=manifest["codes_per_level"]
        )
        return write_gr_model(
            repo,
            name,
            graphs={role: Path(source) / "bundle" / filename for role, filename in GRAPH_FILES.items()},
            catalog_dir=catalog,
            serving={**manifest, "catalog": {"name": "tiny-items", "version": 1}, "variant": "gr-fp32-c1"},
            **parameters,
        )


def kserve_signature(name: str = "gr") -> dict:
    """The gateway's route-table signature of a GR model (what the route builder derives from its config)."""
    from registry.gr.triton import gr_config
    from registry.triton_config import kserve_signature as from_config

    return from_config(gr_config(name))
