"""Pool drivers: `local` (tritonserver processes here) and `kubernetes` (a Deployment).

`driver_for(pool)` is the one place that picks a driver for a ServingPool row, and
`spec_for(pool)` the one that turns a row into what a driver reads.
"""

from deployments.drivers.base import (
    DrainTimeout,
    DriverError,
    LoadFailed,
    ModelDir,
    NoReadyReplica,
    PoolDriver,
    PoolSpec,
    ReplicaInfo,
)

__all__ = [
    "DriverError",
    "DrainTimeout",
    "LoadFailed",
    "ModelDir",
    "NoReadyReplica",
    "PoolDriver",
    "PoolSpec",
    "ReplicaInfo",
    "driver_for",
    "spec_for",
]


def spec_for(pool) -> PoolSpec:
    """A pool row as its driver sees it. A Kubernetes pool's spec carries the Secrets an
    admin bound to its team in its namespace (the driver renders no other; a row written
    around the services gets no more than its team's) and its own Triton admin key, ""
    when it has none yet or it cannot be opened (then nothing renders: the platform's key
    is never a pool's)."""
    if pool.driver != "kubernetes":
        return PoolSpec.from_pool(pool)
    from deployments.models import PoolSecretBinding
    from registry import secret_box

    bound = PoolSecretBinding.objects.filter(team_id=pool.team_id, namespace=pool.namespace).values_list(
        "secret_name", flat=True
    )
    key = ""
    if pool.admin_key_sealed:
        try:
            key = secret_box.open_sealed(pool.admin_key_sealed)
        except secret_box.SecretUnreadable:
            key = ""
    return PoolSpec.from_pool(pool, bound_secrets=frozenset(bound), admin_key=key)


def driver_for(pool) -> PoolDriver:
    spec = spec_for(pool)
    if pool.driver == "local":
        from django.conf import settings

        from deployments.drivers.liveness import LivenessPolicy
        from deployments.drivers.local import START_GRACE_S, LocalDriver

        policy = LivenessPolicy(
            unready_after=settings.POOL_PROBE_UNREADY_AFTER,
            kill_after=settings.POOL_PROBE_KILL_AFTER,
            kill_window_s=settings.POOL_PROBE_KILL_WINDOW_S,
            start_grace_s=START_GRACE_S,
        )
        return LocalDriver(spec, policy=policy, probe_timeout_s=settings.POOL_PROBE_TIMEOUT_S)
    if pool.driver == "kubernetes":
        from deployments.drivers.kubernetes import KubernetesDriver

        return KubernetesDriver(spec)
    raise DriverError(f"unknown pool driver {pool.driver!r}")
