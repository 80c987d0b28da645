"""Triton model configurations, written and read with Triton's own protobuf
(model_config_pb2): the factory builds each variant's config.pbtxt (build_config,
to_text) and the tune stage its tuned copy (knobs_of, with_knobs); serving pools parse it
back and load it with the pool's queue limits as Triton's load-time config override
(with_pool_limits, override_json). config.pbtxt belongs to the artifact
(content-addressed, never edited)."""

from __future__ import annotations

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from registry.factory.gpu import serving as gpu_serving
from registry.names import base_variant

DTYPES = {
    "float32": mc.TYPE_FP32,
    "float16": mc.TYPE_FP16,
    "float64": mc.TYPE_FP64,
    "int64": mc.TYPE_INT64,
    "int32": mc.TYPE_INT32,
    "int8": mc.TYPE_INT8,
    "uint8": mc.TYPE_UINT8,
    "bool": mc.TYPE_BOOL,
}
PREFERRED_BATCH_SIZES = (8, 32, 128)
QUEUE_DELAY_US = 200


def _tensor(spec: dict, batched: bool, cls):
    if spec["dtype"] not in DTYPES:
        raise ValueError(f"tensor {spec['name']!r} has dtype {spec['dtype']!r}, which Triton configs here do not map")
    dims = list(spec["shape"][1:] if batched else spec["shape"])
    if not dims:
        # A [batch] tensor (a tree ensemble's label): Triton wants dims, so [1] outside with
        # an empty reshape for the model's own [batch] shape.
        tensor = cls(name=spec["name"], data_type=DTYPES[spec["dtype"]], dims=[1])
        tensor.reshape.SetInParent()
        return tensor
    return cls(name=spec["name"], data_type=DTYPES[spec["dtype"]], dims=[int(d) if d and d > 0 else -1 for d in dims])


def build_config(
    *,
    name: str,
    signature: dict,
    variant: str,
    max_batch_size: int = 512,
    cpu_threads: int = 1,
    instance_count: int = 1,
    gpu_plan: dict | None = None,
) -> mc.ModelConfig:
    """The ModelConfig for one packaged variant (see registry/factory/__init__.py for the layout).

    GPU variants: `gpu_plan` (registry/factory/gpu/serving.plan) decides max_batch_size, the
    preferred batch sizes and the execution accelerators; without one, serving.plan's
    stated defaults apply."""
    variant = base_variant(variant)
    if variant not in ("onnx-fp32", "onnx-int8") and gpu_plan is None:
        gpu_plan = gpu_serving.plan(variant, signature)
    preferred = PREFERRED_BATCH_SIZES
    if gpu_plan is not None:
        max_batch_size, preferred = gpu_plan["max_batch_size"], tuple(gpu_plan["preferred_batch_sizes"])
    batched = all(
        spec["shape"] and spec["shape"][0] in (-1, None) for spec in signature["inputs"] + signature["outputs"]
    )
    config = mc.ModelConfig(name=name, max_batch_size=max_batch_size if batched else 0)
    config.input.extend(_tensor(s, batched, mc.ModelInput) for s in signature["inputs"])
    config.output.extend(_tensor(s, batched, mc.ModelOutput) for s in signature["outputs"])
    if batched:
        config.dynamic_batching.preferred_batch_size.extend(b for b in preferred if b <= max_batch_size)
        config.dynamic_batching.max_queue_delay_microseconds = QUEUE_DELAY_US
    if variant in ("onnx-fp32", "onnx-int8"):
        # Local CPU pools: the python backend runs the ONNX through ONNX Runtime (platform/triton/).
        config.backend = "python"
        config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=instance_count)
        config.parameters["onnx_file"].string_value = "model.onnx"
        config.parameters["intra_op_threads"].string_value = str(cpu_threads)
        config.parameters["inter_op_threads"].string_value = "1"
    else:
        config.platform = "onnxruntime_onnx"
        config.backend = "onnxruntime"
        config.default_model_filename = "model.onnx"
        # No `gpus` list: `instance_count` instances on each GPU the replica sees.
        config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_GPU, count=instance_count)
        for accelerator_name, parameters in gpu_plan["accelerators"]:
            accel = config.optimization.execution_accelerators.gpu_execution_accelerator.add(name=accelerator_name)
            for key, value in parameters.items():
                accel.parameters[key] = value
    return config


# --- serving knobs the tune stage searches (registry/factory/tune/) ------------------------------
def knobs_of(config: mc.ModelConfig) -> dict:
    """The serving knobs a config sets, as the tune stage names them: instances (per device),
    the dynamic batcher's preferred sizes and queue delay (batched models), the python
    backend's ONNX Runtime threads (CPU variants)."""
    knobs = {"instances": int(config.instance_group[0].count) if config.instance_group else 1}
    if config.max_batch_size > 0:
        knobs["preferred_batch_sizes"] = [int(b) for b in config.dynamic_batching.preferred_batch_size]
        knobs["max_queue_delay_us"] = int(config.dynamic_batching.max_queue_delay_microseconds)
    if "intra_op_threads" in config.parameters:
        knobs["intra_op_threads"] = int(config.parameters["intra_op_threads"].string_value or 1)
    for accel in config.optimization.execution_accelerators.gpu_execution_accelerator:
        if accel.name == "tensorrt" and "precision_mode" in accel.parameters:
            knobs["trt_precision"] = accel.parameters["precision_mode"]
    return knobs


def with_knobs(config: mc.ModelConfig, knobs: dict) -> mc.ModelConfig:
    """A copy with `knobs` (see knobs_of) applied. The request contract stays: names,
    shapes and max_batch_size are the artifact's (the gateway checks requests against
    them), so a tuned config never refuses a request the default accepts. Preferred batch
    sizes above max_batch_size are dropped; [1] means every batch is one request."""
    out = mc.ModelConfig()
    out.CopyFrom(config)
    if "instances" in knobs:
        for group in out.instance_group:
            group.count = int(knobs["instances"])
    if out.max_batch_size > 0:
        if "preferred_batch_sizes" in knobs:
            del out.dynamic_batching.preferred_batch_size[:]
            out.dynamic_batching.preferred_batch_size.extend(
                int(b) for b in knobs["preferred_batch_sizes"] if 0 < int(b) <= out.max_batch_size
            )
        if "max_queue_delay_us" in knobs:
            out.dynamic_batching.max_queue_delay_microseconds = int(knobs["max_queue_delay_us"])
    if "intra_op_threads" in knobs and out.backend == "python":
        out.parameters["intra_op_threads"].string_value = str(int(knobs["intra_op_threads"]))
    if "trt_precision" in knobs:
        for accel in out.optimization.execution_accelerators.gpu_execution_accelerator:
            if accel.name == "tensorrt":
                accel.parameters["precision_mode"] = str(knobs["trt_precision"])
    return out


def to_text(config: mc.ModelConfig) -> str:
    return text_format.MessageToString(config)


class ConfigError(ValueError):
    pass


def parse(config_text: str) -> mc.ModelConfig:
    """Parse config.pbtxt text back into a ModelConfig (raises ConfigError)."""
    config = mc.ModelConfig()
    try:
        text_format.Parse(config_text, config)
    except text_format.ParseError as exc:
        raise ConfigError(f"config.pbtxt does not parse: {exc}") from None
    return config


def with_pool_limits(
    config: mc.ModelConfig, *, name: str, max_queue_size: int, queue_timeout_ms: int
) -> mc.ModelConfig:
    """A copy under `name` whose queue is bounded: past `max_queue_size` waiting requests,
    or after `queue_timeout_ms` in the queue, Triton rejects instead of queueing on.

    Both 0 (the pools' default): no queue policy at all. Any policy turns off the dynamic
    batcher's payload prefetching in Triton 2.51, and without it the batcher can miss the
    wake-up of a model instance that just finished and sleep its fixed 500 ms
    (docs/pools.md, "The 500 ms stall"). Models without batching (max_batch_size 0)
    cannot have a dynamic batcher, hence no queue policy; they are returned unchanged
    apart from the name."""
    out = mc.ModelConfig()
    out.CopyFrom(config)
    out.name = name
    if out.max_batch_size > 0 and (max_queue_size or queue_timeout_ms):
        policy = out.dynamic_batching.default_queue_policy
        policy.max_queue_size = max_queue_size
        policy.default_timeout_microseconds = queue_timeout_ms * 1000
        policy.timeout_action = mc.ModelQueuePolicy.REJECT
    return out


def override_json(config_text: str, *, name: str, max_queue_size: int, queue_timeout_ms: int) -> str:
    """The load-time override a pool sends Triton: `{"parameters": {"config": <this JSON>}}`."""
    config = with_pool_limits(
        parse(config_text), name=name, max_queue_size=max_queue_size, queue_timeout_ms=queue_timeout_ms
    )
    return json_format.MessageToJson(config, preserving_proto_field_name=True, indent=None)


# Triton's TYPE_* (model_config.proto) -> KServe v2 datatypes
_KSERVE_DATATYPES = {
    "TYPE_BOOL": "BOOL",
    "TYPE_UINT8": "UINT8",
    "TYPE_UINT16": "UINT16",
    "TYPE_UINT32": "UINT32",
    "TYPE_UINT64": "UINT64",
    "TYPE_INT8": "INT8",
    "TYPE_INT16": "INT16",
    "TYPE_INT32": "INT32",
    "TYPE_INT64": "INT64",
    "TYPE_FP16": "FP16",
    "TYPE_FP32": "FP32",
    "TYPE_FP64": "FP64",
    "TYPE_STRING": "BYTES",
    "TYPE_BF16": "BF16",
}


def kserve_signature(config: mc.ModelConfig) -> dict | None:
    """The request contract a ModelConfig sets, as the gateway's route table carries it:
    {"max_batch_size", "inputs", "outputs"} with KServe datatypes and the batch dimension
    as -1 when the model batches. None when a datatype has no KServe name."""
    batch = [-1] if config.max_batch_size > 0 else []

    def tensors(items):
        out = []
        for t in items:
            datatype = _KSERVE_DATATYPES.get(mc.DataType.Name(t.data_type))
            if datatype is None:
                return None
            spec = {"name": t.name, "datatype": datatype, "shape": batch + [int(d) for d in t.dims]}
            if getattr(t, "optional", False):
                spec["optional"] = True
            out.append(spec)
        return out

    inputs, outputs = tensors(config.input), tensors(config.output)
    if not inputs or outputs is None:
        return None
    return {"max_batch_size": int(config.max_batch_size), "inputs": inputs, "outputs": outputs}
