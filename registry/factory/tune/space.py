"""The search space of the tune stage: which serving knobs, which values, in which order.

Pure data (no protobuf, no processes). A config is a coordinate: one index per dimension,
and neighbouring indexes are neighbouring values, so a hill climb can step along them
(Model Analyzer's quick search works on the same kind of grid).

CPU variants (python backend over ONNX Runtime, what local pools serve):
- `instances`: model instances (one python stub process each), 1 .. 2 x cores;
- `intra_op_threads`: ONNX Runtime threads per instance, 1 .. cores;
- `preferred_batch_size`: the dynamic batcher's target batch; 1 = batching off (every
  batch is one request, the pool's queue still bounded as before);
- `max_queue_delay_us`: how long the batcher may hold a request to grow a batch.
Models without a batch dimension (max_batch_size 0) get instances and threads only.

GPU variants (Triton's onnxruntime backend, KIND_GPU): instances per GPU, preferred batch
sizes up to the variant's max batch, queue delay, and for `tensorrt` the precision the
factory's accelerator config sets (FP16 or FP32). Built here and tested on its CPU path;
the stage searches it only where a GPU serves the variant.

max_batch_size is not a dimension: it is the request contract the gateway enforces, and
a tuned config that lowered it would refuse batches its default accepts.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

CPU_DELAYS_US = (0, 100, 200, 500, 1000, 2000, 5000)
CPU_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
GPU_DELAYS_US = (0, 100, 500, 1000, 5000)
GPU_BATCHES = (1, 8, 32, 128, 512, 2048, 4096)
MAX_INSTANCES = 16
MAX_DELAY_US = 1_000_000
MAX_THREADS = 64

# What a user may narrow each dimension to (the API bounds every value with these).
OVERRIDABLE = {
    "instances": (1, MAX_INSTANCES),
    "intra_op_threads": (1, MAX_THREADS),
    "preferred_batch_size": (1, 1 << 16),
    "max_queue_delay_us": (0, MAX_DELAY_US),
}


@dataclass(frozen=True)
class Dimension:
    name: str
    values: tuple


@dataclass(frozen=True)
class Space:
    dimensions: tuple[Dimension, ...]
    kind: str  # "cpu" | "gpu"

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(len(d.values) for d in self.dimensions)

    @property
    def size(self) -> int:
        return math.prod(self.sizes)

    def knobs(self, coord: tuple[int, ...]) -> dict:
        """The knobs of a coordinate, named as registry.triton_config.with_knobs takes them."""
        knobs = {}
        for dim, index in zip(self.dimensions, coord):
            value = dim.values[index]
            if dim.name == "preferred_batch_size":
                knobs["preferred_batch_sizes"] = [value]
            else:
                knobs[dim.name] = value
        return knobs

    def nearest(self, knobs: dict) -> tuple[int, ...]:
        """The coordinate closest to `knobs` (a default config's, say) per dimension."""
        coord = []
        for dim in self.dimensions:
            if dim.name == "preferred_batch_size":
                wanted = (knobs.get("preferred_batch_sizes") or [dim.values[-1]])[0]
            else:
                wanted = knobs.get(dim.name, dim.values[0])
            coord.append(min(range(len(dim.values)), key=lambda i: (_distance(dim.values[i], wanted), i)))
        return tuple(coord)

    def all_coordinates(self):
        return itertools.product(*(range(n) for n in self.sizes))


def _distance(a, b) -> float:
    if isinstance(a, str) or isinstance(b, str):
        return 0.0 if a == b else 1.0
    return abs(math.log1p(float(a)) - math.log1p(float(b)))


def _narrow(name: str, values: tuple, overrides: dict | None) -> tuple:
    if not overrides or name not in overrides:
        return values
    return tuple(sorted({int(v) for v in overrides[name]}))


def cpu_space(*, batched: bool, max_batch_size: int, cores: int, overrides: dict | None = None) -> Space:
    cores = max(1, cores)
    dims = [
        Dimension("instances", _narrow("instances", tuple(range(1, min(MAX_INSTANCES, 2 * cores) + 1)), overrides)),
        Dimension("intra_op_threads", _narrow("intra_op_threads", tuple(range(1, cores + 1)), overrides)),
    ]
    if batched:
        batches = tuple(b for b in CPU_BATCHES if b <= max_batch_size) or (1,)
        dims.append(Dimension("preferred_batch_size", _narrow("preferred_batch_size", batches, overrides)))
        dims.append(Dimension("max_queue_delay_us", _narrow("max_queue_delay_us", CPU_DELAYS_US, overrides)))
    return Space(tuple(d for d in dims if d.values), "cpu")


def gpu_space(
    *, batched: bool, max_batch_size: int, tensorrt: bool, gpus: int = 1, overrides: dict | None = None
) -> Space:
    dims = [Dimension("instances", _narrow("instances", (1, 2, 3, 4), overrides))]
    if batched:
        batches = tuple(b for b in GPU_BATCHES if b <= max_batch_size) or (1,)
        dims.append(Dimension("preferred_batch_size", _narrow("preferred_batch_size", batches, overrides)))
        dims.append(Dimension("max_queue_delay_us", _narrow("max_queue_delay_us", GPU_DELAYS_US, overrides)))
    if tensorrt:
        dims.append(Dimension("trt_precision", ("FP16", "FP32")))
    return Space(tuple(d for d in dims if d.values), "gpu")


def check_overrides(overrides) -> dict:
    """Validate a user's narrowing of the space: {dimension: [values]}; raises ValueError
    naming the dimension and the problem."""
    if overrides in (None, {}):
        return {}
    if not isinstance(overrides, dict):
        raise ValueError("search_space: give an object {dimension: [values]}")
    clean = {}
    for name, values in overrides.items():
        if name not in OVERRIDABLE:
            raise ValueError(f"search_space.{name}: unknown dimension; choose from {', '.join(OVERRIDABLE)}")
        if not isinstance(values, list) or not 1 <= len(values) <= 32:
            raise ValueError(f"search_space.{name}: give a list of 1 to 32 integers")
        low, high = OVERRIDABLE[name]
        for value in values:
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"search_space.{name}: {value!r} is not an integer in [{low}, {high}]")
        clean[name] = sorted(set(values))
    return clean
