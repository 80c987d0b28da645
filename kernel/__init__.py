"""The shared kernel every app builds on: one error hierarchy and its JSON shape, the API's
base viewset, strict parsers and serializers, the OpenAPI schema class, the settings
resolver, the outbound-HTTP guard and MLflow's team scope.

It imports no app (an import-linter contract says so); `config/` keeps what wires the
process together (settings, URLs, Celery, `run_platform`, health).
"""
