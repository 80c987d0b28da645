"""Serving pools: a pool, what the driver last saw of each replica, and each artifact a
pool serves. Data and invariants only; writes go through deployments.services.
"""

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Q

from registry.models import Artifact


class PoolDriver(models.TextChoices):
    LOCAL = "local", "Local tritonserver processes"
    KUBERNETES = "kubernetes", "Kubernetes Deployment"


class DeviceKind(models.TextChoices):
    CPU = "cpu", "CPU"
    NVIDIA_T4 = "nvidia-t4", "NVIDIA T4"
    NVIDIA_L4 = "nvidia-l4", "NVIDIA L4"
    NVIDIA_A10 = "nvidia-a10", "NVIDIA A10"
    NVIDIA_A100 = "nvidia-a100", "NVIDIA A100"
    NVIDIA_H100 = "nvidia-h100", "NVIDIA H100"

    @classmethod
    def is_gpu(cls, kind: str) -> bool:
        return kind != cls.CPU


class PoolStatus(models.TextChoices):
    PENDING = "pending", "Pending"  # created, replicas not started yet
    READY = "ready", "Ready"  # every desired replica is up
    DEGRADED = "degraded", "Degraded"  # some replicas down or restarting
    FAILED = "failed", "Failed"  # the driver cannot run the pool (e.g. no binary)
    DELETING = "deleting", "Deleting"


class ServingPool(models.Model):
    """A group of identical Triton servers the platform manages."""

    name = models.SlugField(max_length=48, unique=True, help_text="Lower-case letters, digits and '-'.")
    team = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="serving_pools")
    driver = models.CharField(max_length=16, choices=PoolDriver.choices, default=PoolDriver.LOCAL)
    replicas = models.PositiveSmallIntegerField(default=1, help_text="Desired number of replicas.")
    device_kind = models.CharField(max_length=16, choices=DeviceKind.choices, default=DeviceKind.CPU)
    gpus_per_replica = models.PositiveSmallIntegerField(default=0)
    # {"cpu": "2", "memory": "4Gi"} requests per replica (Kubernetes quantities).
    resources = models.JSONField(default=dict, blank=True)
    # Local: an absolute directory; Kubernetes: s3://, gs://, as:// URL or pvc://CLAIM[/SUBPATH].
    model_repository = models.CharField(max_length=512, blank=True)
    # Kubernetes only: checked against the operator's allow-lists (deployments/pool_policy.py).
    namespace = models.CharField(max_length=63, blank=True)
    image = models.CharField(max_length=255, default="nvcr.io/nvidia/tritonserver:24.10-py3")
    min_replicas = models.PositiveSmallIntegerField(default=1)
    max_replicas = models.PositiveSmallIntegerField(default=4)
    # What the HPA scales on when max_replicas > min_replicas (deployments/pool_fields.py):
    # "cpu" (utilization %), "queue_time" (Triton's queue ms per request), "pending_requests" (per pod).
    autoscale_metric = models.CharField(max_length=24, blank=True)
    autoscale_target = models.FloatField(default=0)
    # A Secret in the pool's namespace whose keys become Triton's environment: the object
    # store's standard variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, ...).
    repository_secret = models.CharField(max_length=253, blank=True)
    # Kubernetes only: the pool's own Triton admin key (model load/unload), sealed with
    # registry.secret_box; the driver writes it to a Secret of the pool's, never the platform's key.
    admin_key_sealed = models.TextField(blank=True, editable=False)
    # Queue policy every loaded model gets (config override at load): a hung model rejects
    # instead of queueing without bound. 0 and 0 (the default): no policy, because any policy
    # costs Triton 2.51's dynamic batcher its prefetching and with it a 500 ms stall
    # (docs/pools.md, "The 500 ms stall").
    max_queue_size = models.PositiveIntegerField(default=0)
    queue_timeout_ms = models.PositiveIntegerField(default=0)
    cost_per_replica_hour = models.DecimalField(max_digits=10, decimal_places=4, default=0)
    status = models.CharField(max_length=16, choices=PoolStatus.choices, default=PoolStatus.PENDING)
    status_reason = models.TextField(blank=True)
    # Bumped on every spec change (replicas, resources); reconcile records what it applied.
    generation = models.PositiveIntegerField(default=1)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(min_replicas__lte=models.F("max_replicas")), name="pool_min_le_max"),
            models.CheckConstraint(
                condition=Q(device_kind="cpu", gpus_per_replica=0)
                | (~Q(device_kind="cpu") & Q(gpus_per_replica__gte=1)),
                name="pool_gpu_matches_device",
            ),
        ]

    def __str__(self):
        return self.name


class ReplicaStatus(models.TextChoices):
    STARTING = "starting", "Starting"
    READY = "ready", "Ready"
    DOWN = "down", "Down"  # crashed or unreachable; the supervisor restarts it with backoff
    FAILED = "failed", "Failed"  # cannot start (e.g. no binary)
    STOPPED = "stopped", "Stopped"


class PoolReplica(models.Model):
    """What the driver last reported about one replica (a process or a pod)."""

    pool = models.ForeignKey(ServingPool, on_delete=models.CASCADE, related_name="replica_set")
    name = models.CharField(max_length=128)  # "r0" locally, the pod name on Kubernetes
    status = models.CharField(max_length=16, choices=ReplicaStatus.choices, default=ReplicaStatus.STARTING)
    http_url = models.CharField(max_length=255, blank=True)
    grpc_url = models.CharField(max_length=255, blank=True)
    metrics_url = models.CharField(max_length=255, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    log_path = models.CharField(max_length=512, blank=True)
    restarts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    # Set when a scale-down picks this replica: it leaves the route table (status STOPPED)
    # and its process is stopped once the gateway had time to stop sending to it.
    retiring_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pool", "name"]
        constraints = [models.UniqueConstraint(fields=["pool", "name"], name="uniq_pool_replica")]

    def __str__(self):
        return f"{self.pool.name}/{self.name}"


class PoolModelState(models.TextChoices):
    LOADING = "loading", "Loading"
    READY = "ready", "Ready"  # READY on every replica
    FAILED = "failed", "Failed"  # Triton's message in `error`; the pool serves what it did before
    DRAINING = "draining", "Draining"  # the gateway stops routing here; waiting for in-flight requests
    UNLOADED = "unloaded", "Unloaded"


class PoolModel(models.Model):
    """One artifact a pool serves (or tried to), under its Triton model name."""

    pool = models.ForeignKey(ServingPool, on_delete=models.CASCADE, related_name="models")
    artifact = models.ForeignKey(Artifact, on_delete=models.PROTECT, related_name="pool_models")
    triton_model_name = models.CharField(max_length=200)
    state = models.CharField(max_length=16, choices=PoolModelState.choices, default=PoolModelState.LOADING)
    error = models.TextField(blank=True)
    # {"r0": true, "r1": false}: readiness per replica at the last check.
    replica_ready = models.JSONField(default=dict, blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    loaded_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pool", "triton_model_name"]
        constraints = [models.UniqueConstraint(fields=["pool", "triton_model_name"], name="uniq_pool_model")]

    def __str__(self):
        return f"{self.triton_model_name} on {self.pool.name}"

    @property
    def wanted(self) -> bool:
        """Should the replicas serve it (reloaded after a restart)?"""
        return self.state in {PoolModelState.LOADING, PoolModelState.READY, PoolModelState.DRAINING}


class PoolSecretBinding(models.Model):
    """A Kubernetes Secret an admin allowed one team's pools to use as their repository
    credentials, in one namespace (deployments/pool_policy.py). A Secret that is not bound
    is refused at the door and again when the driver renders."""

    team = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="pool_secret_bindings")
    namespace = models.CharField(max_length=63)
    secret_name = models.CharField(max_length=253)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["namespace", "secret_name"]
        # A Secret in a namespace serves one team.
        constraints = [models.UniqueConstraint(fields=["namespace", "secret_name"], name="uniq_pool_secret_binding")]

    def __str__(self):
        return f"{self.namespace}/{self.secret_name} for {self.team}"
