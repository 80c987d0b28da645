"""The reference generative recommender the project makes (as experiments/reference/ makes the
CTR ranker and registry/llm/tiny.py the tiny LLM):

- `world`: a synthetic catalog and user sequences from a process whose next-item
  distribution is known, so the oracle's HR@10 is exact;
- `model`: a small HSTU-style sequential model (PyTorch) over semantic ids;
- `export`: its prefix-encode and decode-step graphs as ONNX (registry/gr/runtime.py's contract);
- `train`: the whole recipe (semantic ids, catalog, training, export, holdout, the bundle);
- `baseline`: a SASRec-style next-item model over item ids (the benchmark's comparison).
"""
