"""The one harness tests/ and bench/ share for real processes and models: child processes and
waits (processes), the gateway, its route server and tritonserver (gateway), the tiny CTR
ONNX model (onnx), Triton model directories (triton_models, packaging), packaged candidate
artifacts (artifacts), a steady load (load) and the platform's open-loop load generator
(loadgen, `python -m harness.loadgen`, which the factory's tune stage runs too). It imports nothing from tests/ (a contract
says so).
"""
