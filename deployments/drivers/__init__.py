"""Pool drivers: `local` (tritonserver processes here) and `kubernetes` (a Deployment).

`driver_for(pool)` is the one place that picks a driver for a ServingPool row.
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
]


def driver_for(pool) -> PoolDriver:
    spec = PoolSpec.from_pool(pool)
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
