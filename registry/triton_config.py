"""Triton model configurations, written and read with Triton's own protobuf
(model_config_pb2): the factory builds each variant's config.pbtxt (build_config,
to_text); serving pools parse it back and load it with the pool's queue limits as
Triton's load-time config override (with_pool_limits, override_json). config.pbtxt
belongs to the artifact (content-addressed, never edited)."""

from __future__ import annotations

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from registry.factory.gpu import serving as gpu_serving

DTYPES = {
    "float32": mc.TYPE_FP32, "float16": mc.TYPE_FP16, "float64": mc.TYPE_FP64, "int64": mc.TYPE_INT64,
    "int32": mc.TYPE_INT32, "int8": mc.TYPE_INT8, "uint8": mc.TYPE_UINT8, "bool": mc.TYPE_BOOL,
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


def build_config(*, name: str, signature: dict, variant: str, max_batch_size: int = 512, cpu_threads: int = 1,
                 instance_count: int = 1, gpu_plan: dict | None = None) -> mc.ModelConfig:
    """The ModelConfig for one packaged variant (see registry/factory/__init__.py for the layout).

    GPU variants: `gpu_plan` (registry/factory/gpu/serving.plan) decides max_batch_size, the
    preferred batch sizes and the execution accelerators; without one, serving.plan's
    stated defaults apply."""
    if variant not in ("onnx-fp32", "onnx-int8") and gpu_plan is None:
        gpu_plan = gpu_serving.plan(variant, signature)
    preferred = PREFERRED_BATCH_SIZES
    if gpu_plan is not None:
        max_batch_size, preferred = gpu_plan["max_batch_size"], tuple(gpu_plan["preferred_batch_sizes"])
    batched = all(spec["shape"] and spec["shape"][0] in (-1, None) for spec in signature["inputs"] + signature["outputs"])
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


def with_pool_limits(config: mc.ModelConfig, *, name: str, max_queue_size: int, queue_timeout_ms: int) -> mc.ModelConfig:
    """A copy under `name` whose queue is bounded: past `max_queue_size` waiting requests,
    or after `queue_timeout_ms` in the queue, Triton rejects instead of queueing on.

    Models without batching (max_batch_size 0) cannot have a dynamic batcher, hence no
    queue policy; they are returned unchanged apart from the name."""
    out = mc.ModelConfig()
    out.CopyFrom(config)
    out.name = name
    if out.max_batch_size > 0:
        policy = out.dynamic_batching.default_queue_policy
        policy.max_queue_size = max_queue_size
        policy.default_timeout_microseconds = queue_timeout_ms * 1000
        policy.timeout_action = mc.ModelQueuePolicy.REJECT
    return out


def override_json(config_text: str, *, name: str, max_queue_size: int, queue_timeout_ms: int) -> str:
    """The load-time override a pool sends Triton: `{"parameters": {"config": <this JSON>}}`."""
    config = with_pool_limits(parse(config_text), name=name, max_queue_size=max_queue_size, queue_timeout_ms=queue_timeout_ms)
    return json_format.MessageToJson(config, preserving_proto_field_name=True, indent=None)


# Triton's TYPE_* (model_config.proto) -> KServe v2 datatypes
_KSERVE_DATATYPES = {"TYPE_BOOL": "BOOL", "TYPE_UINT8": "UINT8", "TYPE_UINT16": "UINT16", "TYPE_UINT32": "UINT32",
                     "TYPE_UINT64": "UINT64", "TYPE_INT8": "INT8", "TYPE_INT16": "INT16", "TYPE_INT32": "INT32",
                     "TYPE_INT64": "INT64", "TYPE_FP16": "FP16", "TYPE_FP32": "FP32", "TYPE_FP64": "FP64",
                     "TYPE_STRING": "BYTES", "TYPE_BF16": "BF16"}


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
