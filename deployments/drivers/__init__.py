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
        from deployments.drivers.local import LocalDriver

        return LocalDriver(spec)
    if pool.driver == "kubernetes":
        from deployments.drivers.kubernetes import KubernetesDriver

        return KubernetesDriver(spec)
    raise DriverError(f"unknown pool driver {pool.driver!r}")
