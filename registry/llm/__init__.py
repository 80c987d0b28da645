"""Generative models (LLM versions): what a model directory holds and how Triton serves one.

- `tiny`: the project's own tiny generative model, trained in seconds on a synthetic corpus
  and saved as a Hugging Face model directory (the LLM counterpart of the reference CTR model).
- `model_dir`: the layout an uploaded LLM model directory must have, checked before it is stored.
- `triton`: the Triton model directory (decoupled python backend, generate extension) that serves
  a model directory in a pool.

Plain Python with no Django import: the harness, the benchmarks and the control plane use it.
torch and transformers are imported where a model is made or served, not at import time.
"""
