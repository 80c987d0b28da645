"""Kubernetes pools: objects.py renders a pool's objects, driver.py applies them and
talks to the pods (docs/pools.md)."""

from deployments.drivers.kubernetes.driver import HANDOVER_MANAGER, KubernetesDriver, owns_replicas
from deployments.drivers.kubernetes.isolation import SpecRefused
from deployments.drivers.kubernetes.objects import (
    FIELD_MANAGER,
    ClusterSettings,
    admin_secret_name,
    autoscaled,
    object_name,
    render,
    render_yaml,
)

__all__ = [
    "FIELD_MANAGER",
    "HANDOVER_MANAGER",
    "ClusterSettings",
    "KubernetesDriver",
    "SpecRefused",
    "admin_secret_name",
    "autoscaled",
    "object_name",
    "owns_replicas",
    "render",
    "render_yaml",
]
