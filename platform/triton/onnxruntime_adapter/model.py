"""Triton python-backend adapter that serves an ONNX model through ONNX Runtime.

Copied into `<model dir>/1/model.py` by the artifact factory for local CPU pools (the
Triton build in the nvidia-pytriton wheel carries only the python backend). Requests
that Triton's dynamic batcher hands over together are concatenated and run as one
batch, then split back per request.

Config parameters (config.pbtxt `parameters`): `onnx_file` (default model.onnx),
`intra_op_threads` (default 1), `inter_op_threads` (default 1), `warmup_batch_sizes`
(default "1,8"): the session runs these batch sizes once while loading, so the first
live requests do not pay ONNX Runtime's first-run allocations and a model is warm by
the time Triton reports it READY (a cold candidate would look slow to the canary judge).
"""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


def _param(config: dict, key: str, default: str) -> str:
    return config.get("parameters", {}).get(key, {}).get("string_value", default)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(_param(config, "intra_op_threads", "1"))
        options.inter_op_num_threads = int(_param(config, "inter_op_threads", "1"))
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        path = os.path.join(version_dir, _param(config, "onnx_file", "model.onnx"))
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_specs = [(o["name"], pb_utils.triton_string_to_numpy(o["data_type"])) for o in config["output"]]
        self._warm_up(config, _param(config, "warmup_batch_sizes", "1,8"))

    def _warm_up(self, config: dict, batch_sizes: str) -> None:
        batched = int(config.get("max_batch_size", 0)) > 0
        for size in [int(b) for b in batch_sizes.split(",") if b.strip()]:
            feeds = {}
            for spec in config["input"]:
                dims = [d if d > 0 else 1 for d in (int(x) for x in spec["dims"])]
                shape = [size, *dims] if batched else dims
                feeds[spec["name"]] = np.zeros(shape, dtype=pb_utils.triton_string_to_numpy(spec["data_type"]))
            self._run(feeds)

    def _run(self, feeds: dict) -> list:
        names = [name for name, _ in self.output_specs]
        return self.session.run(names, feeds)

    def execute(self, requests):
        arrays = [
            {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.input_names}
            for request in requests
        ]
        if len(arrays) == 1:
            feeds = arrays[0]
            sizes = None
        else:
            feeds = {name: np.concatenate([a[name] for a in arrays], axis=0) for name in self.input_names}
            sizes = np.cumsum([a[self.input_names[0]].shape[0] for a in arrays])[:-1]
        try:
            outputs = self._run(feeds)
        except Exception as exc:  # a bad request gets Triton's error, the model keeps serving
            error = pb_utils.TritonError(f"onnxruntime: {exc}")
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
        parts = [outputs] if sizes is None else list(zip(*[np.split(out, sizes, axis=0) for out in outputs]))
        responses = []
        for part in parts:
            tensors = [
                pb_utils.Tensor(name, np.ascontiguousarray(value).astype(dtype, copy=False))
                for (name, dtype), value in zip(self.output_specs, part)
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses

    def finalize(self):
        self.session = None
