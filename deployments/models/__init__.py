"""Deployments data (app label "deployments"): serving pools in pools.py, endpoints and
rollouts in rollouts.py, inference keys in keys.py, releases (build → tune → canary) in
releases.py, route table changes in routes.py. Data and invariants only; writes go
through deployments.services."""

from deployments.models.keys import InferenceKey
from deployments.models.pools import (
    DeviceKind,
    PoolDriver,
    PoolModel,
    PoolModelState,
    PoolReplica,
    PoolSecretBinding,
    PoolStatus,
    ReplicaStatus,
    ServingPool,
)
from deployments.models.releases import Release, ReleaseState
from deployments.models.rollouts import Endpoint, Rollout
from deployments.models.routes import RouteChange

__all__ = [
    "DeviceKind",
    "Endpoint",
    "InferenceKey",
    "PoolDriver",
    "PoolModel",
    "PoolModelState",
    "PoolReplica",
    "PoolSecretBinding",
    "PoolStatus",
    "Release",
    "ReleaseState",
    "ReplicaStatus",
    "Rollout",
    "RouteChange",
    "ServingPool",
]
