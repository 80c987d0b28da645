"""A Kubernetes pool's objects, rendered with the `kubernetes` client's models from one
PoolSpec: a Deployment of Triton pods, its Service, a HorizontalPodAutoscaler (when the
pool autoscales), a PodDisruptionBudget (when it has two or more replicas to protect), a
NetworkPolicy and the Secret with the pool's own Triton admin key.

Nothing renders for a spec the operator's policy refuses (isolation.py: namespace, image,
repository secret) or for a pool without an admin key of its own: what the driver applies
never holds the platform's namespace, Secrets or key. Who may reach a pool and whom its
pods may reach is isolation.py's NetworkPolicy; Triton's model load/unload API is
restricted to callers with the pool's admin key. Pods run as a non-root user with a
read-only root filesystem, every capability dropped, the runtime's seccomp profile and no
service-account token.

Why this is one long module: every object of one pool is rendered from one spec and they name each other (selector, ports, scale target).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml
from kubernetes import client

from deployments.drivers.base import PoolSpec
from deployments.drivers.kubernetes import isolation
from deployments.pool_policy import PLATFORM_SECRET_PREFIX, PoolPolicy
from kernel.conf import setting
from registry.names import TENSORRT_CACHE_DIR
from serving.triton import ADMIN_KEY_HEADER

FIELD_MANAGER = "modelplane"
HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
MOUNT = "/models"
PRE_STOP_S = 10
TENSORRT_CACHE_SIZE = "8Gi"
RUN_AS = 10001  # an unprivileged uid outside the host's range (checkov CKV_K8S_40)
# What each autoscale metric is to the HPA: (metric type, name the Prometheus Adapter or
# KEDA exposes, how the target is read). deploy/kubernetes/prometheus/adapter-rules.yaml.
QUEUE_TIME_METRIC = "triton_queue_time_ms"
PENDING_METRIC = "nv_inference_pending_request_count"


@dataclass(frozen=True)
class ClusterSettings:
    """Where the platform itself runs (the pools' NetworkPolicies), what an operator allows
    team pools (deployments/pool_policy.py) and where pool pods may connect besides DNS."""

    platform_namespace: str = "modelplane"
    prometheus_namespace: str = "monitoring"
    policy: PoolPolicy = field(default_factory=PoolPolicy)
    egress_cidrs: tuple[str, ...] = ()  # the object store's addresses (POOL_EGRESS_CIDRS)

    @classmethod
    def from_env(cls) -> ClusterSettings:
        """From the settings (a Django setting, then the environment: kernel.conf)."""
        policy = PoolPolicy.from_settings()
        return cls(
            platform_namespace=policy.platform_namespace,
            prometheus_namespace=policy.prometheus_namespace,
            policy=policy,
            egress_cidrs=tuple(setting("POOL_EGRESS_CIDRS")),
        )


def admin_secret_name(spec: PoolSpec) -> str:
    """The pool's own Secret with its Triton admin key (a platform name: never bindable)."""
    return f"{PLATFORM_SECRET_PREFIX}triton-admin-{spec.name}"


def object_name(spec: PoolSpec) -> str:
    return f"triton-{spec.name}"[:63]


def labels(spec: PoolSpec) -> dict:
    out = {
        "app.kubernetes.io/name": "tritonserver",
        "app.kubernetes.io/instance": object_name(spec),
        "app.kubernetes.io/component": "serving-pool",
        "app.kubernetes.io/managed-by": FIELD_MANAGER,
        "modelplane.io/pool": spec.name,
    }
    if spec.team:
        out["modelplane.io/team"] = "".join(c if c.isalnum() or c in "-_." else "-" for c in spec.team)[:63].strip(
            "-_."
        )
    return out


def selector(spec: PoolSpec) -> dict:
    return {"app.kubernetes.io/instance": object_name(spec), "modelplane.io/pool": spec.name}


def autoscale_metric(spec: PoolSpec) -> str:
    return spec.autoscale_metric or ("cpu" if spec.device_kind == "cpu" else "queue_time")


def autoscaled(spec: PoolSpec) -> bool:
    """Whether an HPA owns the replica count: a running pool with room between its bounds,
    on a metric it can compute (CPU utilization needs a CPU request)."""
    if spec.replicas <= 0 or spec.max_replicas <= spec.min_replicas:
        return False
    return autoscale_metric(spec) != "cpu" or "cpu" in (spec.resources or {})


def floor_replicas(spec: PoolSpec) -> int:
    """The fewest replicas the pool is meant to run: what its PodDisruptionBudget protects."""
    return spec.min_replicas if autoscaled(spec) else spec.replicas


def _repository(spec: PoolSpec) -> tuple[str, list, list]:
    """(--model-repository value, volumes, volume mounts)."""
    repo = spec.model_repository
    if repo.startswith("pvc://"):
        claim, _, sub = repo[len("pvc://") :].partition("/")
        volume = client.V1Volume(
            name="model-repository",
            persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name=claim, read_only=True),
        )
        mount = client.V1VolumeMount(name="model-repository", mount_path=MOUNT, read_only=True)
        return (f"{MOUNT}/{sub}" if sub else MOUNT), [volume], [mount]
    return repo, [], []


def _volumes(spec: PoolSpec, gpu: bool) -> tuple[str, list, list]:
    repository, volumes, mounts = _repository(spec)
    # The python backend and Triton's shared-memory transport need more than the 64 MiB default /dev/shm;
    # the root filesystem is read-only, so Triton's scratch space is an emptyDir too.
    volumes += [
        client.V1Volume(name="dshm", empty_dir=client.V1EmptyDirVolumeSource(medium="Memory", size_limit="1Gi")),
        client.V1Volume(name="tmp", empty_dir=client.V1EmptyDirVolumeSource(size_limit="1Gi")),
    ]
    mounts += [
        client.V1VolumeMount(name="dshm", mount_path="/dev/shm"),
        client.V1VolumeMount(name="tmp", mount_path="/tmp"),
    ]
    if gpu:
        # Where the GPU variants' configs keep TensorRT engines and timing caches: built on
        # a model's first load in the pod, reused by every reload (a rollout, a restart).
        volumes.append(
            client.V1Volume(
                name="tensorrt-cache", empty_dir=client.V1EmptyDirVolumeSource(size_limit=TENSORRT_CACHE_SIZE)
            )
        )
        mounts.append(client.V1VolumeMount(name="tensorrt-cache", mount_path=TENSORRT_CACHE_DIR))
    return repository, volumes, mounts


def _args(spec: PoolSpec, repository: str, gpu: bool) -> list[str]:
    # Only a caller with the admin key (the control plane) may load and unload models;
    # $(TRITON_ADMIN_KEY) is expanded by the kubelet from the container's environment.
    restricted = f"model-repository:{ADMIN_KEY_HEADER}=$(TRITON_ADMIN_KEY)"
    return [
        "tritonserver",
        f"--model-repository={repository}",
        "--model-control-mode=explicit",
        "--strict-readiness=true",
        "--exit-on-error=false",
        f"--http-port={HTTP_PORT}",
        f"--grpc-port={GRPC_PORT}",
        f"--metrics-port={METRICS_PORT}",
        "--allow-metrics=true",
        f"--allow-gpu-metrics={'true' if gpu else 'false'}",
        f"--http-restricted-api={restricted}",
        f"--grpc-restricted-protocol={restricted}",
        "--log-verbose=0",
    ]


def _security(spec: PoolSpec) -> tuple[client.V1PodSecurityContext, client.V1SecurityContext]:
    pod = client.V1PodSecurityContext(
        run_as_non_root=True,
        run_as_user=RUN_AS,
        run_as_group=RUN_AS,
        fs_group=RUN_AS,
        seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
    )
    container = client.V1SecurityContext(
        allow_privilege_escalation=False,
        read_only_root_filesystem=True,
        run_as_non_root=True,
        privileged=False,
        capabilities=client.V1Capabilities(drop=["ALL"]),
    )
    return pod, container


def render_deployment(spec: PoolSpec, cluster: ClusterSettings | None = None) -> client.V1Deployment:
    gpu = spec.device_kind != "cpu"
    repository, volumes, mounts = _volumes(spec, gpu)
    requests = {k: v for k, v in (spec.resources or {}).items()}
    limits = {}
    if gpu:
        limits["nvidia.com/gpu"] = str(spec.gpus_per_replica)
        requests["nvidia.com/gpu"] = str(spec.gpus_per_replica)
    if "memory" in requests:
        limits["memory"] = requests["memory"]
    env = [
        client.V1EnvVar(
            name="TRITON_ADMIN_KEY",
            value_from=client.V1EnvVarSource(
                secret_key_ref=client.V1SecretKeySelector(name=admin_secret_name(spec), key="admin-key")
            ),
        )
    ]
    # The object store's credentials: a Secret an admin bound to the team in this namespace,
    # its keys as the standard variables Triton's S3/GCS/Azure clients read (AWS_ACCESS_KEY_ID, ...).
    env_from = (
        [client.V1EnvFromSource(secret_ref=client.V1SecretEnvSource(name=spec.repository_secret))]
        if spec.repository_secret
        else None
    )
    pod_security, container_security = _security(spec)
    container = client.V1Container(
        name="tritonserver",
        image=spec.image,
        image_pull_policy="Always",  # a moved tag is noticed; layers stay cached on the node
        args=_args(spec, repository, gpu),
        env=env,
        env_from=env_from,
        ports=[
            client.V1ContainerPort(name="http", container_port=HTTP_PORT),
            client.V1ContainerPort(name="grpc", container_port=GRPC_PORT),
            client.V1ContainerPort(name="metrics", container_port=METRICS_PORT),
        ],
        readiness_probe=client.V1Probe(
            http_get=client.V1HTTPGetAction(path="/v2/health/ready", port="http"), period_seconds=5, failure_threshold=3
        ),
        liveness_probe=client.V1Probe(
            http_get=client.V1HTTPGetAction(path="/v2/health/live", port="http"), period_seconds=10, failure_threshold=6
        ),
        startup_probe=client.V1Probe(
            http_get=client.V1HTTPGetAction(path="/v2/health/live", port="http"), period_seconds=5, failure_threshold=60
        ),
        resources=client.V1ResourceRequirements(requests=requests or None, limits=limits or None),
        security_context=container_security,
        volume_mounts=mounts,
        # Out of the Service's endpoints before SIGTERM: requests routed just before removal still land.
        # ("exec" by its alias: the pydantic model silently drops `var_exec=` passed by name.)
        lifecycle=client.V1Lifecycle(
            pre_stop=client.V1LifecycleHandler(**{"exec": client.V1ExecAction(command=["sleep", str(PRE_STOP_S)])})
        ),
    )
    pod = client.V1PodSpec(
        containers=[container],
        volumes=volumes,
        security_context=pod_security,
        automount_service_account_token=False,  # Triton never talks to the API server
        enable_service_links=False,
        termination_grace_period_seconds=PRE_STOP_S + 60,  # Triton then finishes in-flight requests
        node_selector={"modelplane.io/device-kind": spec.device_kind} if gpu else None,
        tolerations=[client.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]
        if gpu
        else None,
    )
    return client.V1Deployment(
        api_version="apps/v1",
        kind="Deployment",
        metadata=client.V1ObjectMeta(name=object_name(spec), namespace=spec.namespace, labels=labels(spec)),
        spec=client.V1DeploymentSpec(
            # Left out when an HPA owns the count: server-side apply then never touches it
            # (deployments/drivers/kubernetes/driver.py hands it over).
            replicas=None if autoscaled(spec) else spec.replicas,
            selector=client.V1LabelSelector(match_labels=selector(spec)),
            strategy=client.V1DeploymentStrategy(
                type="RollingUpdate", rolling_update=client.V1RollingUpdateDeployment(max_surge=1, max_unavailable=0)
            ),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(
                    labels=labels(spec),
                    annotations={"prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT)},
                ),
                spec=pod,
            ),
        ),
    )


def render_service(spec: PoolSpec) -> client.V1Service:
    return client.V1Service(
        api_version="v1",
        kind="Service",
        metadata=client.V1ObjectMeta(name=object_name(spec), namespace=spec.namespace, labels=labels(spec)),
        spec=client.V1ServiceSpec(
            selector=selector(spec),
            ports=[
                client.V1ServicePort(name="http", port=HTTP_PORT, target_port="http"),
                client.V1ServicePort(name="grpc", port=GRPC_PORT, target_port="grpc"),
                client.V1ServicePort(name="metrics", port=METRICS_PORT, target_port="metrics"),
            ],
        ),
    )


def _hpa_metric(spec: PoolSpec) -> client.V2MetricSpec:
    metric, target = autoscale_metric(spec), spec.autoscale_target
    if metric == "cpu":
        return client.V2MetricSpec(
            type="Resource",
            resource=client.V2ResourceMetricSource(
                name="cpu", target=client.V2MetricTarget(type="Utilization", average_utilization=int(target or 70))
            ),
        )
    # A per-pod series from the custom metrics API (Prometheus Adapter; rules shipped in
    # deploy/kubernetes/prometheus/adapter-rules.yaml): Triton's queue time or pending requests.
    name = QUEUE_TIME_METRIC if metric == "queue_time" else PENDING_METRIC
    default = 20.0 if metric == "queue_time" else 8.0
    value = f"{int(round((target or default) * 1000))}m"  # a quantity in thousandths
    return client.V2MetricSpec(
        type="Pods",
        pods=client.V2PodsMetricSource(
            metric=client.V2MetricIdentifier(name=name),
            target=client.V2MetricTarget(type="AverageValue", average_value=value),
        ),
    )


def render_hpa(spec: PoolSpec) -> client.V2HorizontalPodAutoscaler:
    return client.V2HorizontalPodAutoscaler(
        api_version="autoscaling/v2",
        kind="HorizontalPodAutoscaler",
        metadata=client.V1ObjectMeta(name=object_name(spec), namespace=spec.namespace, labels=labels(spec)),
        spec=client.V2HorizontalPodAutoscalerSpec(
            scale_target_ref=client.V2CrossVersionObjectReference(
                api_version="apps/v1", kind="Deployment", name=object_name(spec)
            ),
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            metrics=[_hpa_metric(spec)],
            # A new replica loads every model before it is ready: scale down slowly, or the
            # pool pays that load again on the next burst.
            behavior=client.V2HorizontalPodAutoscalerBehavior(
                scale_down=client.V2HPAScalingRules(
                    stabilization_window_seconds=300,
                    policies=[client.V2HPAScalingPolicy(type="Pods", value=1, period_seconds=60)],
                )
            ),
        ),
    )


def render_pdb(spec: PoolSpec) -> client.V1PodDisruptionBudget:
    """At most one pod below the pool's floor during voluntary disruptions (drains)."""
    return client.V1PodDisruptionBudget(
        api_version="policy/v1",
        kind="PodDisruptionBudget",
        metadata=client.V1ObjectMeta(name=object_name(spec), namespace=spec.namespace, labels=labels(spec)),
        spec=client.V1PodDisruptionBudgetSpec(
            min_available=floor_replicas(spec) - 1, selector=client.V1LabelSelector(match_labels=selector(spec))
        ),
    )


def render_admin_secret(spec: PoolSpec) -> client.V1Secret:
    """The pool's own Triton admin key: its pods read it, the driver sends it; no other pool
    and no platform key opens this pool's model repository API."""
    return client.V1Secret(
        api_version="v1",
        kind="Secret",
        metadata=client.V1ObjectMeta(name=admin_secret_name(spec), namespace=spec.namespace, labels=labels(spec)),
        type="Opaque",
        string_data={"admin-key": spec.admin_key},
    )


def render(spec: PoolSpec, cluster: ClusterSettings | None = None) -> list[dict]:
    """Every object of a pool as plain dicts (camelCase, as the API server expects): the
    Deployment first, the admin key's Secret last (the driver applies it first). Raises
    SpecRefused, naming the field and the rule, for a spec the policy refuses."""
    cluster = cluster or ClusterSettings.from_env()
    isolation.renderable(spec, cluster.policy)
    sanitize = client.ApiClient().sanitize_for_serialization
    objects = [render_deployment(spec, cluster), render_service(spec)]
    if autoscaled(spec):  # an HPA never scales a Deployment up from 0, and would undo a scale to 0
        objects.append(render_hpa(spec))
    if floor_replicas(spec) >= 2:  # at one replica a budget either protects nothing or blocks every drain
        objects.append(render_pdb(spec))
    objects.append(
        isolation.render_network_policy(
            spec, labels=labels(spec), selector=selector(spec), name=object_name(spec), cluster=cluster
        )
    )
    objects.append(render_admin_secret(spec))
    return [sanitize(obj) for obj in objects]


def render_yaml(spec: PoolSpec, cluster: ClusterSettings | None = None) -> str:
    """What `manage.py render_pool` prints: the objects with the admin key left out."""
    objects = render(spec, cluster)
    for obj in objects:
        if obj["kind"] == "Secret":
            obj["stringData"] = {key: "(the pool's own key: not shown)" for key in obj.get("stringData") or {}}
    return yaml.safe_dump_all(objects, sort_keys=False)
