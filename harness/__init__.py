"""The one harness tests/ and bench/ share for real processes and models: child processes and
waits (processes), the gateway, its route server and tritonserver (gateway), the tiny CTR
ONNX model (onnx), Triton model directories (triton_models, packaging), packaged candidate
artifacts (artifacts) and a steady load (load). It imports nothing from tests/ (a contract
says so).
"""
