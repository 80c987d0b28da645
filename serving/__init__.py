"""Triton as a library, no Django: the `tritonserver` launcher (tritonserver.py: binary, python
backend, environment, ports, the servers we started found and reaped) and the client of any
running Triton (triton.py: health, readiness, repository load/unload, statistics, metrics).

Below every app: the pool drivers (deployments), the factory's tune stage (registry), the
harness, the benchmarks and the tests use it. It imports no app, not the kernel and not Django
(pyproject.toml, contract serving-alone)."""
