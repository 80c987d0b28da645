"""GPU variants without a GPU: the graphs they are made of, the provider assertion, the
skipped-with-reason path, the measurement code on the CPU, and the serving plan their
config.pbtxt gets (parsed back with Triton's protobuf)."""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from registry import triton_config
from registry.factory import numerics, recipes, stages
from registry.factory.gpu import graphs as gpu_graphs
from registry.factory.gpu import measure, providers, serving
from registry.factory.gpu.checks import validate_variant
from registry.factory.graphs import GraphError, seeded_inputs

SIGNATURE = {
    "inputs": [
        {"name": "dense", "dtype": "float32", "shape": [-1, 13]},
        {"name": "sparse", "dtype": "int64", "shape": [-1, 26]},
    ],
    "outputs": [{"name": "ctr", "dtype": "float32", "shape": [-1, 1]}],
}
REAL_SESSION = ort.InferenceSession
# The onnx-fp16 on an H100 (CUDA graph + I/O binding): rows/s = batch / p50.
H100_FP16 = {1: 1 / 0.046e-3, 32: 32 / 0.057e-3, 512: 512 / 0.069e-3, 4096: 4096 / 0.163e-3}


@pytest.fixture(scope="module")
def factory_graphs(onnx_path, tmp_path_factory):
    """The factory's own graph steps over the tiny CTR model: canonical, fused, CPU-optimized."""
    work = tmp_path_factory.mktemp("factory")
    canonical, _, _ = recipes.canonical_graph(onnx.load(str(onnx_path)), work, opset=17)
    fused, optimized, _ = recipes.optimized_graphs(canonical, work)
    return {"canonical": canonical, "fused": fused, "optimized": optimized, "work": work}


def _make(target: str, graphs_: dict, tmp_path: Path) -> Path:
    dest = tmp_path / f"{target}.onnx"
    recipes.make_variant(target, fused=graphs_["fused"], optimized=graphs_["optimized"], dest=dest)
    return dest


# --- graphs ------------------------------------------------------------------------------------
def test_the_cpu_graph_has_cpu_only_fusions_and_the_gpu_graphs_have_none(factory_graphs, tmp_path):
    cpu_graph = onnx.load(str(factory_graphs["optimized"]))
    assert any("FusedGemm" in op for op in gpu_graphs.cpu_only_ops(cpu_graph))  # what onnx-fp32 ships for CPU pools
    for target in ("onnx-fp32-gpu", "tensorrt", "onnx-fp16"):
        model = onnx.load(str(_make(target, factory_graphs, tmp_path)))
        assert gpu_graphs.cpu_only_ops(model) == [] and {n.domain for n in model.graph.node} <= {"", "ai.onnx"}
    with pytest.raises(GraphError) as refused:
        gpu_graphs.make_gpu_fp32(factory_graphs["optimized"], tmp_path / "bad.onnx")
    assert refused.value.code == "cpu_only_ops" and "com.microsoft::FusedGemm" in str(refused.value)
    with pytest.raises(recipes.VariantRefused, match="FusedGemm"):  # a user graph saved by ORT's CPU optimizer
        recipes.make_variant(
            "onnx-fp16",
            fused=factory_graphs["optimized"],
            optimized=factory_graphs["optimized"],
            dest=tmp_path / "x.onnx",
        )


def test_fp16_keeps_fp32_inputs_and_outputs_and_halves_the_weights(factory_graphs, tmp_path):
    fp16 = onnx.load(str(_make("onnx-fp16", factory_graphs, tmp_path)))
    io_types = {v.name: v.type.tensor_type.elem_type for v in list(fp16.graph.input) + list(fp16.graph.output)}
    assert io_types == {
        "dense": onnx.TensorProto.FLOAT,
        "sparse": onnx.TensorProto.INT64,
        "ctr": onnx.TensorProto.FLOAT,
    }
    table = next(i for i in fp16.graph.initializer if i.name == "table")
    assert table.data_type == onnx.TensorProto.FLOAT16


# --- providers ---------------------------------------------------------------------------------
class _FellBack:
    """Stand-in for onnxruntime.InferenceSession on a GPU host (there is no GPU here): a
    real CPU session over the same graph that reports the providers `got(asked)` returns,
    as ONNX Runtime's GPU build does when it silently falls back."""

    def __init__(self, got):
        self.got = got

    def __call__(self, path, options=None, providers=None, **kwargs):
        asked = [p[0] if isinstance(p, tuple) else p for p in providers]
        session = REAL_SESSION(path, options, providers=["CPUExecutionProvider"])
        if asked == ["CPUExecutionProvider"]:
            return session
        reported = self.got(asked)
        session.get_providers = lambda: reported
        return session


def _validate_ctx(tmp_path, factory_graphs, targets):
    ctx = stages.BuildContext(
        work_dir=tmp_path,
        model_name="ranker",
        version=1,
        task="ctr",
        source="upload",
        framework="onnx",
        source_path=None,
        source_uri="",
        expected_signature={},
        targets=targets,
        log=lambda line: None,
    )
    ctx.canonical, ctx.fused, ctx.optimized, ctx.signature = (
        factory_graphs["canonical"],
        factory_graphs["fused"],
        factory_graphs["optimized"],
        SIGNATURE,
    )
    stages.variants(ctx)
    return ctx


@pytest.fixture
def gpu_host(monkeypatch, settings):
    """ONNX Runtime's GPU build as it lists itself (TensorRT, CUDA, CPU); sessions are stand-ins."""
    settings.BUILD_VALIDATION_ROWS = 256
    monkeypatch.setattr(providers, "available", lambda: [providers.TENSORRT, providers.CUDA, providers.CPU])

    def install(got=None, *, session=None):
        monkeypatch.setattr(ort, "InferenceSession", session or _FellBack(got))

    return install


def test_a_session_that_fell_back_from_tensorrt_to_cuda_fails_the_tensorrt_check(gpu_host, factory_graphs, tmp_path):
    """ORT's GPU build without TensorRT turns [TensorRT, CUDA] into [CUDA, CPU] without an
    error: the tensorrt variant must be skipped with that reason, never passed on CUDA."""
    gpu_host(lambda asked: [p for p in asked if p != providers.TENSORRT] + [providers.CPU])
    ctx = _validate_ctx(tmp_path, factory_graphs, ["tensorrt", "onnx-fp16"])
    stages.validate(ctx)
    trt, fp16 = ctx.variants["tensorrt"], ctx.variants["onnx-fp16"]
    assert trt.status == "skipped" and "passed" not in trt.validation and "max_abs_error" not in trt.validation
    assert "asked ONNX Runtime for TensorrtExecutionProvider > CUDAExecutionProvider" in trt.reason
    assert (
        "the session got CUDAExecutionProvider > CPUExecutionProvider" in trt.reason
        and "TensorRT is not installed" in trt.reason
    )
    options = trt.validation["provider_options"][providers.TENSORRT]
    assert options["trt_fp16_enable"] == "1" and options["trt_engine_cache_enable"] == "1"
    assert options["trt_profile_max_shapes"] == "dense:4096x13,sparse:4096x26"
    # The CUDA variant got CUDA (as reported), so it was judged, with the fp16 tolerance.
    assert fp16.status == "validated" and fp16.validation["providers"] == [providers.CUDA, providers.CPU]
    assert fp16.validation["threshold"] == {
        "auc_loss": numerics.FP16_MAX_AUC_LOSS,
        "max_abs_error": numerics.FP16_MAX_ABS,
    }
    assert fp16.validation["placement"]["nodes_per_provider"]  # where the nodes ran, from ORT's profile


def test_a_cuda_session_that_fell_back_to_the_cpu_is_skipped_not_passed(gpu_host, factory_graphs, tmp_path):
    gpu_host(lambda asked: [providers.CPU])
    ctx = _validate_ctx(tmp_path, factory_graphs, ["onnx-fp32-gpu"])
    stages.validate(ctx)
    result = ctx.variants["onnx-fp32-gpu"]
    assert result.status == "skipped" and "the session got CPUExecutionProvider: no usable GPU" in result.reason
    assert result.validation["provider_options"] == {providers.CUDA: {"use_tf32": "0"}}  # TF32 off, as served
    assert result.validation["cpu_check"]["ran"] and result.validation["cpu_check"]["max_abs_error"] <= 1e-5


def test_without_onnxruntime_gpu_every_gpu_variant_is_skipped_with_the_reason(factory_graphs, tmp_path):
    """The real CPU build of ONNX Runtime, no stand-in: no GPU provider to ask for."""
    feeds = seeded_inputs(SIGNATURE, 256)
    reference = stages._run(factory_graphs["canonical"], feeds).astype(np.float64)
    labels = numerics.labels_from_reference(reference)
    for variant in ("onnx-fp32-gpu", "onnx-fp16", "tensorrt"):
        check = validate_variant(
            variant,
            _make(variant, factory_graphs, tmp_path),
            feeds,
            reference,
            labels,
            tolerance=numerics.tolerance_for("fp16"),
            signature=SIGNATURE,
            work_dir=tmp_path,
        )
        provider = providers.VARIANT_PROVIDER[variant]
        assert check.status == "skipped" and check.reason.startswith(
            f"not validated on {provider}: {provider} is not in this ONNX Runtime"
        )
        assert "the CPU build has no GPU providers" in check.reason and check.evidence["skipped"]
        assert check.evidence["cpu_check"]["ran"] and check.evidence["cpu_check"]["max_abs_error"] < 1e-2


def test_a_provider_whose_libraries_do_not_load_is_missing_not_the_variants_fault(gpu_host, factory_graphs, tmp_path):
    """Stand-in for ORT's GPU build raising while it loads TensorRT (no GPU here)."""

    def failing(path, options=None, providers=None, **kwargs):
        if providers and providers != ["CPUExecutionProvider"]:
            raise RuntimeError(
                "[ONNXRuntimeError] : 1 : FAIL : Failed to load library libonnxruntime_providers_tensorrt.so with error: "
                "libnvinfer.so.10: cannot open shared object file: No such file or directory"
            )
        return REAL_SESSION(path, options, providers=providers)

    gpu_host(session=failing)
    ctx = _validate_ctx(tmp_path, factory_graphs, ["tensorrt"])
    stages.validate(ctx)
    result = ctx.variants["tensorrt"]
    assert result.status == "skipped" and "TensorrtExecutionProvider cannot be loaded on this host" in result.reason
    assert "libnvinfer.so.10" in result.reason


def test_a_session_that_lost_the_options_asked_for_is_refused():
    """After a failed session creation ORT's Python API can retry with default options
    (CUDA graphs or TF32 quietly gone): a stand-in session reporting what such a retry
    reports must not count as the session asked for."""

    class Retried:
        def get_providers(self):
            return [providers.CUDA, providers.CPU]

        def get_provider_options(self):
            return {providers.CUDA: {"enable_cuda_graph": "0", "use_tf32": "1", "device_id": "0"}}

    with pytest.raises(providers.ProviderMissing, match="runs with .*enable_cuda_graph.*not the enable_cuda_graph=1"):
        providers.check_options(Retried(), providers.CUDA, {"use_tf32": "1", "enable_cuda_graph": "1"})
    with pytest.raises(providers.ProviderMissing, match="use_tf32"):
        providers.check_options(Retried(), providers.CUDA, {"use_tf32": "0"})
    providers.check_options(Retried(), providers.CUDA, {"use_tf32": "true", "some_unreported_key": "x"})


# --- measurement -------------------------------------------------------------------------------
def test_measurement_runs_host_io_and_io_binding_and_says_why_there_is_no_cuda_graph(factory_graphs):
    feeds = seeded_inputs(SIGNATURE, 8)
    result = measure.measure_variant(factory_graphs["fused"], [(providers.CPU, {})], feeds, [1, 8], seconds=0.01)
    assert set(result["modes"]) == {"host-io", "iobinding"} and result["providers"] == [providers.CPU]
    for per_batch in result["modes"].values():
        assert set(per_batch) == {"1", "8"} and all(
            s["p50_ms"] > 0 and s["throughput_p50_rps"] > 0 for s in per_batch.values()
        )
    assert "CUDA graphs are measured on the CUDA EP only" in result["notes"]["cuda-graph"]
    assert measure.best_mode(result) == "iobinding" and set(measure.curve(result)) == {1, 8}


def test_cuda_graph_measurement_binds_each_batch_and_checks_replayed_outputs(factory_graphs, monkeypatch):
    """The CUDA-graph path with a CPU session standing in for the graph-enabled CUDA one
    (no GPU here; ORT ignores gpu_graph_id on the CPU): one binding and graph id per batch,
    outputs read back and compared with a plain run; a wrong output drops the mode."""
    monkeypatch.setattr(
        measure,
        "open_session",
        lambda path, providers_, **kw: REAL_SESSION(str(path), providers=["CPUExecutionProvider"]),
    )
    session = REAL_SESSION(str(factory_graphs["fused"]), providers=["CPUExecutionProvider"])
    feeds = seeded_inputs(SIGNATURE, 8)
    reference = {
        b: (part := {k: v[:b] for k, v in feeds.items()}, {"ctr": session.run(["ctr"], part)[0]}) for b in (1, 8)
    }
    result = {"modes": {}, "notes": {}}
    measure._measure_graphs(factory_graphs["fused"], [], reference, [1, 8], 0.01, 1000, result, device="cpu")
    assert set(result["modes"]["cuda-graph"]) == {"1", "8"} and result["cuda_graph_max_abs_diff"] == 0.0
    wrong = {b: (part, {"ctr": out["ctr"] + 0.5}) for b, (part, out) in reference.items()}
    result = {"modes": {}, "notes": {}}
    measure._measure_graphs(factory_graphs["fused"], [], wrong, [1, 8], 0.01, 1000, result, device="cpu")
    assert (
        "cuda-graph" not in result["modes"]
        and "replayed outputs differ from a plain run at batch [1, 8]" in result["notes"]["cuda-graph"]
    )


# --- serving plan ------------------------------------------------------------------------------
def test_batching_follows_the_measured_curve():
    rising = serving.choose_batching(H100_FP16, SIGNATURE)
    assert rising["max_batch_size"] == 4096 and rising["preferred_batch_sizes"] == [512, 4096]
    plateau = serving.choose_batching({1: 2e4, 32: 6e5, 512: 9.5e6, 4096: 1e7}, SIGNATURE)
    assert (
        plateau["max_batch_size"] == 512
        and plateau["preferred_batch_sizes"] == [512]
        and plateau["basis"].startswith("measured")
    )
    unmeasured = serving.choose_batching(None, SIGNATURE)
    assert unmeasured["max_batch_size"] == 4096 and unmeasured["preferred_batch_sizes"] == [32, 512, 4096]
    assert unmeasured["basis"].startswith("default (no GPU measurement)")
    wide = {"inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 1 << 20]}], "outputs": []}  # 4 MiB rows
    assert serving.choose_batching(None, wide)["max_batch_size"] == 64
    ragged = {"inputs": [{"name": "tokens", "dtype": "int64", "shape": [-1, -1]}], "outputs": []}
    assert serving.profile_shapes(ragged, min_batch=1, opt_batch=8, max_batch=64) == {}


def test_gpu_configs_carry_the_plan_and_parse_back_with_tritons_protobuf():
    configs = {}
    for variant in ("onnx-fp32-gpu", "onnx-fp16", "tensorrt"):
        config = triton_config.build_config(
            name=f"ranker__v1__{variant}",
            signature=SIGNATURE,
            variant=variant,
            gpu_plan=serving.plan(variant, SIGNATURE, curve=H100_FP16),
        )
        configs[variant] = triton_config.parse(triton_config.to_text(config))
        assert configs[variant] == config
    for config in configs.values():
        assert config.platform == "onnxruntime_onnx" and config.max_batch_size == 4096
        assert list(config.dynamic_batching.preferred_batch_size) == [512, 4096]
        group = config.instance_group[0]
        assert group.kind == mc.ModelInstanceGroup.KIND_GPU and group.count == 1 and not group.gpus  # on each GPU
    accelerators = {
        v: {a.name: dict(a.parameters) for a in c.optimization.execution_accelerators.gpu_execution_accelerator}
        for v, c in configs.items()
    }
    assert accelerators["onnx-fp32-gpu"] == {"cuda": {"use_tf32": "0"}}
    assert accelerators["onnx-fp16"] == {}
    trt = accelerators["tensorrt"]["tensorrt"]
    assert trt["precision_mode"] == "FP16" and trt["trt_engine_cache_enable"] == "1"
    assert trt["trt_engine_cache_path"] == trt["trt_timing_cache_path"] == serving.TENSORRT_CACHE_DIR
    assert trt["trt_profile_min_shapes"] == "dense:1x13,sparse:1x26"
    assert trt["trt_profile_opt_shapes"] == trt["trt_profile_max_shapes"] == "dense:4096x13,sparse:4096x26"
    # ORT gets the same options in the validating session (the backend's own key mapping).
    assert serving.ort_tensorrt_options(trt)[
        "trt_fp16_enable"
    ] == "1" and "precision_mode" not in serving.ort_tensorrt_options(trt)


def test_the_package_stage_sizes_batching_from_each_gpu_variants_own_measured_curve(factory_graphs, tmp_path):
    def measured(curve):
        return {
            "modes": {
                "iobinding": {str(b): {"p50_ms": b / rps * 1e3, "throughput_p50_rps": rps} for b, rps in curve.items()}
            }
        }

    ctx = _validate_ctx(tmp_path, factory_graphs, ["onnx-fp16", "tensorrt"])
    ctx.variants["onnx-fp16"].status, ctx.variants["onnx-fp16"].benchmark = "validated", measured(H100_FP16)
    ctx.variants["tensorrt"].status = "validated"
    ctx.variants["tensorrt"].benchmark = measured({1: 2e4, 32: 6e5, 512: 9.5e6, 4096: 1e7})
    stages.package(ctx)
    fp16 = triton_config.parse((ctx.variants["onnx-fp16"].package_dir / "config.pbtxt").read_text())
    trt = triton_config.parse((ctx.variants["tensorrt"].package_dir / "config.pbtxt").read_text())
    assert fp16.max_batch_size == 4096 and list(fp16.dynamic_batching.preferred_batch_size) == [512, 4096]
    assert trt.max_batch_size == 512 and list(trt.dynamic_batching.preferred_batch_size) == [512]
    parameters = trt.optimization.execution_accelerators.gpu_execution_accelerator[0].parameters
    assert parameters["trt_profile_max_shapes"] == parameters["trt_profile_opt_shapes"] == "dense:512x13,sparse:512x26"
    assert ctx.variants["onnx-fp16"].status == "servable"
