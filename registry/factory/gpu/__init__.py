"""GPU variants, checked with the execution provider they will be served with.

No Django here (nor tritonclient): only numpy, onnx and onnxruntime(-gpu), so that the
build's validate/benchmark stages on a `build-gpu` worker and `python -m bench gpu` on
any GPU host run the same code.

- providers.py  which ONNX Runtime execution provider each GPU variant is served with,
                sessions that assert they got it (`session.get_providers()`), where the
                nodes actually ran.
- graphs.py     the GPU graphs: fp32 without CPU-only fusions, fp16 keeping fp32 I/O.
- measure.py    latency/throughput per batch size: host I/O, I/O binding on the device,
                CUDA graphs with I/O binding where the graph allows it.
- checks.py     validate_variant / benchmark_variant: what the stages and the CLI call.
- serving.py    what the Triton config of a GPU variant says (batching from the measured
                throughput curve, TensorRT engine cache and profiles, TF32).

Nothing is imported here: serving.py (plain data) is read by the Kubernetes driver too.

Policies:
- A GPU variant is validated and benchmarked only on the provider its Triton config
  names. If the session does not get that provider (no GPU, ONNX Runtime's CPU build,
  TensorRT not installed so ONNX Runtime fell back to CUDA), the variant is *skipped*
  with that reason, never passed on another provider.
- TF32: `onnx-fp32-gpu` is the exact variant: validated and served with TF32 off
  (`use_tf32=0` on the CUDA EP), held to the fp32 tolerance against CPU fp32. Speed comes
  from `onnx-fp16`/`tensorrt`, validated with the fp16 tolerance.
"""
