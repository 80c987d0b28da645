"""The config a pool loads a model with: the artifact's config.pbtxt plus the pool's limits.

config.pbtxt belongs to the artifact (content-addressed, never edited); the pool's queue
policy travels as Triton's load-time config override (`{"parameters": {"config": JSON}}`).
"""

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc


class ConfigError(ValueError):
    pass


def parse(config_text: str) -> mc.ModelConfig:
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
    config = with_pool_limits(parse(config_text), name=name, max_queue_size=max_queue_size, queue_timeout_ms=queue_timeout_ms)
    return json_format.MessageToJson(config, preserving_proto_field_name=True, indent=None)
