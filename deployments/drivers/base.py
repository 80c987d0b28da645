"""The pool driver interface: one shape for local processes and Kubernetes pods.

Drivers import no Django: they take a PoolSpec (plain data copied from a ServingPool)
and talk to processes, pods and Triton. Services record what they report. Every call is
idempotent: `ensure` twice starts nothing new, `load` of a READY model loads nothing,
`unload` of a model that is not there succeeds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from serving.triton import TritonError, TritonHTTP

PENDING_METRIC = "nv_inference_pending_request_count"


class DriverError(RuntimeError):
    """The driver cannot do what was asked (no binary, API server refused, ...)."""


class LoadFailed(DriverError):
    """A model did not become READY on every replica; `errors` maps replica -> Triton's message."""

    def __init__(self, name: str, errors: dict[str, str]):
        self.name = name
        self.errors = errors
        first = next(iter(errors.values()), "unknown error")
        super().__init__(f"{name} did not load: {first}")


class NoReadyReplica(LoadFailed):
    """No replica is ready yet (a pool still starting, or all restarting): the load waits
    for one (deployments.services.reconcile) instead of failing."""

    def __init__(self, name: str):
        super().__init__(name, {"pool": "no ready replica to load on"})


class DrainTimeout(DriverError):
    """Requests kept arriving or stayed in flight past the drain timeout."""

    def __init__(self, name: str, report: dict):
        self.name = name
        self.report = report
        super().__init__(
            f"{name} still had traffic after {report['waited_s']:.1f}s "
            f"(pending {report['pending']}, last new requests {report['since_last_request_s']:.1f}s ago)"
        )


@dataclass(frozen=True)
class PoolSpec:
    """What a driver needs to know about a pool (copied from a ServingPool row)."""

    name: str
    replicas: int
    model_repository: str
    team: str = ""
    device_kind: str = "cpu"
    gpus_per_replica: int = 0
    resources: dict = field(default_factory=dict)
    namespace: str = "modelplane"
    image: str = "nvcr.io/nvidia/tritonserver:24.10-py3"
    min_replicas: int = 1
    max_replicas: int = 4
    max_queue_size: int = 0
    queue_timeout_ms: int = 0
    autoscale_metric: str = ""  # "" = the device's default (deployments/pool_fields.py)
    autoscale_target: float = 0.0
    repository_secret: str = ""
    # Kubernetes: the Secrets an admin bound to the team in this namespace (what
    # repository_secret may name) and the pool's own Triton admin key.
    bound_secrets: frozenset = frozenset()
    admin_key: str = field(default="", repr=False)

    @classmethod
    def from_pool(cls, pool, *, bound_secrets=frozenset(), admin_key: str = "") -> PoolSpec:
        return cls(
            name=pool.name,
            replicas=pool.replicas,
            model_repository=pool.model_repository,
            team=pool.team.name if pool.team_id else "",
            device_kind=pool.device_kind,
            gpus_per_replica=pool.gpus_per_replica,
            resources=dict(pool.resources or {}),
            namespace=pool.namespace,
            image=pool.image,
            min_replicas=pool.min_replicas,
            max_replicas=pool.max_replicas,
            max_queue_size=pool.max_queue_size,
            queue_timeout_ms=pool.queue_timeout_ms,
            autoscale_metric=pool.autoscale_metric,
            autoscale_target=pool.autoscale_target,
            repository_secret=pool.repository_secret,
            bound_secrets=frozenset(bound_secrets),
            admin_key=admin_key,
        )


@dataclass
class ReplicaInfo:
    name: str
    status: str  # a deployments.models.ReplicaStatus value
    http_url: str = ""
    grpc_url: str = ""
    metrics_url: str = ""
    pid: int | None = None
    log_path: str = ""
    restarts: int = 0
    started_at: float | None = None  # epoch seconds
    error: str = ""
    admin_key: str = ""  # Triton's model-repository key (Kubernetes pools restrict load/unload to it)

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    def triton(self, timeout: float = 5.0) -> TritonHTTP:
        return TritonHTTP(
            self.http_url, self.metrics_url, timeout=timeout, grpc_url=self.grpc_url, admin_key=self.admin_key
        )


@dataclass(frozen=True)
class ModelDir:
    """A model to load: its Triton name, its directory (local pools) and the config
    override (JSON ModelConfig with the pool's queue policy)."""

    name: str
    path: Path | None = None
    config_json: str | None = None


class PoolDriver:
    """Base: what both drivers do through Triton's HTTP API on ready replicas."""

    kind = ""

    def __init__(self, spec: PoolSpec):
        self.spec = spec

    # --- replicas (driver-specific) -------------------------------------------------------------
    def ensure(self, on_down: Callable[[ReplicaInfo], None] | None = None) -> list[ReplicaInfo]:
        """Create or reconcile replicas to `spec.replicas`; returns every replica.
        `on_down(replica)`: called with the reason when a replica is found dead or hung,
        before it is restarted (a driver whose platform restarts pods itself never calls it)."""
        raise NotImplementedError

    def replicas(self) -> list[ReplicaInfo]:
        raise NotImplementedError

    def scale(self, replicas: int) -> list[ReplicaInfo]:
        raise NotImplementedError

    def delete(self) -> None:
        raise NotImplementedError

    def log_tail(self, replica: str, lines: int = 60) -> str:
        return ""

    @contextmanager
    def models_locked(self):
        """Held while models are reloaded on replicas or unloaded from them, so a
        supervisor's reload cannot race an unload (local: a file lock; else nothing)."""
        yield

    # --- models ---------------------------------------------------------------------------------
    def publish(self, model: ModelDir) -> None:
        """Make the model visible to the replicas' repository (local: a link)."""

    def retract(self, name: str) -> None:
        """Undo publish (after an unload or a failed first load)."""

    def is_model_ready(self, replica: ReplicaInfo, name: str) -> bool:
        return replica.ready and replica.triton().is_model_ready(name)

    def load(self, model: ModelDir, *, timeout: float = 120.0) -> dict[str, bool]:
        """Load on every ready replica; READY everywhere or LoadFailed (then replicas that
        did not serve it before are unloaded again, so the pool serves what it did)."""
        replicas = [r for r in self.replicas() if r.ready]
        if not replicas:
            raise NoReadyReplica(model.name)
        self.publish(model)
        was_ready = {r.name: self.is_model_ready(r, model.name) for r in replicas}
        errors = {}

        def load_one(replica: ReplicaInfo) -> None:
            try:
                self.load_on(replica, model, timeout=timeout)
            except TritonError as exc:
                errors[replica.name] = exc.message

        todo = [r for r in replicas if not was_ready[r.name]]
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(todo)))) as pool:
            list(pool.map(load_one, todo))  # replicas load in parallel
        ready = {r.name: self.is_model_ready(r, model.name) for r in replicas}
        for name, ok in ready.items():
            if not ok and name not in errors:
                errors[name] = "loaded but not READY"
        if errors:
            for replica in replicas:
                if not was_ready[replica.name]:
                    try:
                        replica.triton().unload(model.name)
                    except TritonError:
                        pass
            if not any(was_ready.values()):
                self.retract(model.name)
            raise LoadFailed(model.name, errors)
        return ready

    def load_on(self, replica: ReplicaInfo, model: ModelDir, *, timeout: float = 120.0) -> None:
        replica.triton(timeout=timeout).load(model.name, timeout=timeout, config=model.config_json)

    def traffic(self, name: str) -> tuple[float, float]:
        """(pending requests, requests finished so far) for a model over ready replicas."""
        pending = finished = 0.0
        for replica in self.replicas():
            if not replica.ready:
                continue
            triton = replica.triton()
            try:
                pending += sum(v for (model, _), v in triton.metric_samples(PENDING_METRIC).items() if model == name)
                for stats in triton.statistics(name):
                    infer = stats.get("inference_stats", {})
                    finished += infer.get("success", {}).get("count", 0) + infer.get("fail", {}).get("count", 0)
            except TritonError:
                continue  # not loaded there, or the replica went away: nothing in flight on it
        return pending, finished

    def drain(self, name: str, *, timeout: float = 30.0, quiet_s: float = 1.0, poll_s: float = 0.1) -> dict:
        """Wait until no request is pending and none has arrived for `quiet_s`."""
        start = time.monotonic()
        pending, finished = self.traffic(name)
        last_change = start
        while True:
            now = time.monotonic()
            if pending == 0 and now - last_change >= quiet_s:
                return {"waited_s": round(now - start, 3), "pending": 0, "requests_seen": finished}
            if now - start >= timeout:
                report = {"waited_s": now - start, "pending": pending, "since_last_request_s": now - last_change}
                raise DrainTimeout(name, report)
            time.sleep(poll_s)
            new_pending, new_finished = self.traffic(name)
            if new_finished != finished or new_pending:
                last_change = time.monotonic()
            pending, finished = new_pending, new_finished

    def unload(self, name: str, *, drain_timeout: float = 30.0, quiet_s: float = 1.0, force: bool = False) -> dict:
        """Drain, then unload from every replica and wait until no replica serves it."""
        try:
            report = self.drain(name, timeout=drain_timeout, quiet_s=quiet_s)
        except DrainTimeout as exc:
            if not force:
                raise
            report = {**exc.report, "forced": True}
        with self.models_locked():
            replicas = [r for r in self.replicas() if r.ready]
            errors = {}
            for replica in replicas:
                try:
                    replica.triton().unload(name)
                except TritonError as exc:
                    if "not found" not in exc.message.lower() and "unknown model" not in exc.message.lower():
                        errors[replica.name] = exc.message
            deadline = time.monotonic() + max(drain_timeout, 10.0)
            while any(self.is_model_ready(r, name) for r in replicas):
                if time.monotonic() > deadline:
                    raise DriverError(f"{name} still READY after unload")
                time.sleep(0.05)
            if errors:
                raise DriverError(f"unload {name}: " + "; ".join(f"{k}: {v}" for k, v in errors.items()))
            self.retract(name)
        return report

    def statistics(self) -> dict:
        """Per replica and per model: requests, failures, average queue and compute time."""
        per_replica, per_model = {}, {}
        for replica in self.replicas():
            if not replica.ready:
                continue
            try:
                stats = replica.triton().statistics()
                pending = replica.triton().metric_samples(PENDING_METRIC)
            except TritonError as exc:
                per_replica[replica.name] = {"error": exc.message}
                continue
            rows = {}
            for entry in stats:
                infer = entry.get("inference_stats", {})
                row = {
                    "success": infer.get("success", {}).get("count", 0),
                    "failure": infer.get("fail", {}).get("count", 0),
                    "inference_count": entry.get("inference_count", 0),
                    "execution_count": entry.get("execution_count", 0),
                    "queue_ns": infer.get("queue", {}).get("ns", 0),
                    "compute_ns": sum(
                        infer.get(k, {}).get("ns", 0) for k in ("compute_input", "compute_infer", "compute_output")
                    ),
                    "pending": sum(v for (m, _), v in pending.items() if m == entry["name"]),
                }
                rows[entry["name"]] = row
                total = per_model.setdefault(entry["name"], dict.fromkeys(row, 0))
                for key, value in row.items():
                    total[key] += value
            per_replica[replica.name] = rows
        for row in per_model.values():
            done = row["success"] + row["failure"]
            row["queue_us_avg"] = round(row["queue_ns"] / done / 1000, 1) if done else None
            row["compute_us_avg"] = round(row["compute_ns"] / done / 1000, 1) if done else None
        return {"models": per_model, "replicas": per_replica}
