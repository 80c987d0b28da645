"""Kubernetes driver: a pool is a Deployment of Triton pods with a Service, a
HorizontalPodAutoscaler and a PodDisruptionBudget, rendered with the `kubernetes`
client's models and applied with server-side apply. Models are loaded and unloaded
through the Triton repository API of each ready pod (explicit model control).

The model repository is remote: an object-store URL Triton reads itself (s3://, gs://,
as://) or a PersistentVolumeClaim (`pvc://CLAIM[/SUBPATH]`) mounted read-only; the
artifact directories are expected there under their Triton model names.
"""

from __future__ import annotations

import os

import urllib3
import yaml
from kubernetes import client

from deployments.drivers.base import DriverError, PoolDriver, PoolSpec, ReplicaInfo
from registry.names import TENSORRT_CACHE_DIR

FIELD_MANAGER = "modelplane"
APPLY = "application/apply-patch+yaml"
HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
MOUNT = "/models"
PRE_STOP_S = 10
TENSORRT_CACHE_SIZE = "8Gi"


def object_name(spec: PoolSpec) -> str:
    return f"triton-{spec.name}"[:63]


def labels(spec: PoolSpec) -> dict:
    out = {
        "app.kubernetes.io/name": "tritonserver",
        "app.kubernetes.io/instance": object_name(spec),
        "app.kubernetes.io/managed-by": FIELD_MANAGER,
        "modelplane.io/pool": spec.name,
    }
    if spec.team:
        out["modelplane.io/team"] = "".join(c if c.isalnum() or c in "-_." else "-" for c in spec.team)[:63].strip("-_.")
    return out


def selector(spec: PoolSpec) -> dict:
    return {"app.kubernetes.io/instance": object_name(spec), "modelplane.io/pool": spec.name}


def _repository(spec: PoolSpec) -> tuple[str, list, list]:
    """(--model-repository value, volumes, volume mounts)."""
    repo = spec.model_repository
    if repo.startswith("pvc://"):
        claim, _, sub = repo[len("pvc://"):].partition("/")
        volume = client.V1Volume(
            name="model-repository",
            persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name=claim, read_only=True),
        )
        mount = client.V1VolumeMount(name="model-repository", mount_path=MOUNT, read_only=True)
        return (f"{MOUNT}/{sub}" if sub else MOUNT), [volume], [mount]
    return repo, [], []


def render_deployment(spec: PoolSpec) -> client.V1Deployment:
    repository, volumes, mounts = _repository(spec)
    # The python backend and Triton's shared-memory transport need more than the 64 MiB default /dev/shm.
    volumes.append(client.V1Volume(name="dshm", empty_dir=client.V1EmptyDirVolumeSource(medium="Memory", size_limit="1Gi")))
    mounts.append(client.V1VolumeMount(name="dshm", mount_path="/dev/shm"))
    requests = {k: v for k, v in (spec.resources or {}).items()}
    limits = {}
    gpu = spec.device_kind != "cpu"
    if gpu:
        limits["nvidia.com/gpu"] = str(spec.gpus_per_replica)
        requests["nvidia.com/gpu"] = str(spec.gpus_per_replica)
        # Where the GPU variants' configs keep TensorRT engines and timing caches: built on
        # a model's first load in the pod, reused by every reload (a rollout, a restart).
        volumes.append(client.V1Volume(name="tensorrt-cache", empty_dir=client.V1EmptyDirVolumeSource(size_limit=TENSORRT_CACHE_SIZE)))
        mounts.append(client.V1VolumeMount(name="tensorrt-cache", mount_path=TENSORRT_CACHE_DIR))
    if "memory" in requests:
        limits["memory"] = requests["memory"]
    args = [
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
        "--log-verbose=0",
    ]
    container = client.V1Container(
        name="tritonserver",
        image=spec.image,
        args=args,
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
        volume_mounts=mounts,
        # Out of the Service's endpoints before SIGTERM: requests routed just before removal still land.
        # ("exec" by its alias: the pydantic model silently drops `var_exec=` passed by name.)
        lifecycle=client.V1Lifecycle(pre_stop=client.V1LifecycleHandler(**{"exec": client.V1ExecAction(command=["sleep", str(PRE_STOP_S)])})),
    )
    pod = client.V1PodSpec(
        containers=[container],
        volumes=volumes,
        termination_grace_period_seconds=PRE_STOP_S + 60,  # Triton then finishes in-flight requests
        node_selector={"modelplane.io/device-kind": spec.device_kind} if gpu else None,
        tolerations=[client.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")] if gpu else None,
    )
    return client.V1Deployment(
        api_version="apps/v1",
        kind="Deployment",
        metadata=client.V1ObjectMeta(name=object_name(spec), namespace=spec.namespace, labels=labels(spec)),
        spec=client.V1DeploymentSpec(
            replicas=spec.replicas,
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


def render_hpa(spec: PoolSpec) -> client.V2HorizontalPodAutoscaler:
    return client.V2HorizontalPodAutoscaler(
        api_version="autoscaling/v2",
        kind="HorizontalPodAutoscaler",
        metadata=client.V1ObjectMeta(name=object_name(spec), namespace=spec.namespace, labels=labels(spec)),
        spec=client.V2HorizontalPodAutoscalerSpec(
            scale_target_ref=client.V2CrossVersionObjectReference(api_version="apps/v1", kind="Deployment", name=object_name(spec)),
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            metrics=[
                client.V2MetricSpec(
                    type="Resource",
                    resource=client.V2ResourceMetricSource(
                        name="cpu", target=client.V2MetricTarget(type="Utilization", average_utilization=70)
                    ),
                )
            ],
        ),
    )


def render_pdb(spec: PoolSpec) -> client.V1PodDisruptionBudget:
    return client.V1PodDisruptionBudget(
        api_version="policy/v1",
        kind="PodDisruptionBudget",
        metadata=client.V1ObjectMeta(name=object_name(spec), namespace=spec.namespace, labels=labels(spec)),
        spec=client.V1PodDisruptionBudgetSpec(max_unavailable=1, selector=client.V1LabelSelector(match_labels=selector(spec))),
    )


def render(spec: PoolSpec) -> list[dict]:
    """Every object of a pool as plain dicts (camelCase, as the API server expects)."""
    sanitize = client.ApiClient().sanitize_for_serialization
    objects = [render_deployment(spec), render_service(spec), render_pdb(spec)]
    if spec.replicas > 0:  # an HPA never scales a Deployment up from 0, and would undo a scale to 0
        objects.insert(2, render_hpa(spec))
    return [sanitize(obj) for obj in objects]


def render_yaml(spec: PoolSpec) -> str:
    return yaml.safe_dump_all(render(spec), sort_keys=False)


class KubernetesDriver(PoolDriver):
    kind = "kubernetes"

    def __init__(self, spec: PoolSpec, *, api_client: client.ApiClient | None = None, pod_http_port: int = HTTP_PORT,
                 pod_metrics_port: int = METRICS_PORT, pod_grpc_port: int | None = GRPC_PORT):
        """`pod_grpc_port=None`: control the pods' Triton over HTTP only (load/unload then
        stall HTTP inference while they run; see deployments.drivers.triton._grpc_control)."""
        super().__init__(spec)
        self._api_client = api_client
        self.pod_http_port, self.pod_metrics_port, self.pod_grpc_port = pod_http_port, pod_metrics_port, pod_grpc_port

    @property
    def api_client(self) -> client.ApiClient:
        if self._api_client is None:
            from kubernetes import config

            try:
                config.load_incluster_config()
                self._api_client = client.ApiClient()
            except config.ConfigException:
                try:
                    # KUBECONFIG read now, not when the kubernetes package was imported.
                    self._api_client = config.new_client_from_config(config_file=os.environ.get("KUBECONFIG") or None)
                except (config.ConfigException, OSError) as exc:
                    raise DriverError(f"no Kubernetes configuration (in-cluster or kubeconfig): {exc}") from None
        return self._api_client

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except client.ApiException as exc:
            raise DriverError(f"{what}: Kubernetes API answered {exc.status} {exc.reason}: {(exc.body or '')[:500]}") from None
        except (OSError, urllib3.exceptions.HTTPError) as exc:
            raise DriverError(f"{what}: Kubernetes API unreachable: {exc}") from None

    def apply(self) -> list[str]:
        """Server-side apply every rendered object (owned by field manager `modelplane`)."""
        apps, core = client.AppsV1Api(self.api_client), client.CoreV1Api(self.api_client)
        autoscaling, policy = client.AutoscalingV2Api(self.api_client), client.PolicyV1Api(self.api_client)
        patchers = {
            "Deployment": apps.patch_namespaced_deployment,
            "Service": core.patch_namespaced_service,
            "HorizontalPodAutoscaler": autoscaling.patch_namespaced_horizontal_pod_autoscaler,
            "PodDisruptionBudget": policy.patch_namespaced_pod_disruption_budget,
        }
        applied = []
        objects = render(self.spec)
        for obj in objects:
            name, namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
            self._call(
                f"apply {obj['kind']} {namespace}/{name}", patchers[obj["kind"]], name, namespace, obj,
                field_manager=FIELD_MANAGER, force=True, _content_type=APPLY,
            )
            applied.append(obj["kind"])
        if not any(o["kind"] == "HorizontalPodAutoscaler" for o in objects):
            self._delete_quietly(autoscaling.delete_namespaced_horizontal_pod_autoscaler, "HorizontalPodAutoscaler")
        return applied

    def ensure(self) -> list[ReplicaInfo]:
        self.apply()
        return self.replicas()

    def replicas(self) -> list[ReplicaInfo]:
        core = client.CoreV1Api(self.api_client)
        label_selector = ",".join(f"{k}={v}" for k, v in selector(self.spec).items())
        pods = self._call("list pods", core.list_namespaced_pod, self.spec.namespace, label_selector=label_selector)
        infos = []
        for pod in pods.items:
            if pod.metadata.deletion_timestamp is not None:
                continue
            conditions = {c.type: c.status for c in (pod.status.conditions or [])}
            ip = pod.status.pod_ip or ""
            phase = pod.status.phase or ""
            if conditions.get("Ready") == "True" and ip:
                status = "ready"
            elif phase in {"Failed", "Unknown"}:
                status = "down"
            else:
                status = "starting"
            restarts = sum(cs.restart_count or 0 for cs in (pod.status.container_statuses or []))
            started = pod.status.start_time.timestamp() if pod.status.start_time else None
            infos.append(
                ReplicaInfo(
                    name=pod.metadata.name, status=status,
                    http_url=f"http://{ip}:{self.pod_http_port}" if ip else "",
                    grpc_url=f"{ip}:{self.pod_grpc_port}" if ip and self.pod_grpc_port else "",
                    metrics_url=f"http://{ip}:{self.pod_metrics_port}/metrics" if ip else "",
                    restarts=restarts, started_at=started, error=pod.status.message or "",
                )
            )
        return sorted(infos, key=lambda r: r.name)

    def scale(self, replicas: int) -> list[ReplicaInfo]:
        if replicas < 0:
            raise DriverError("replicas must be 0 or more")
        self.spec = PoolSpec(**{**self.spec.__dict__, "replicas": replicas})
        return self.ensure()

    def _delete_quietly(self, fn, kind: str) -> None:
        try:
            fn(object_name(self.spec), self.spec.namespace, _preload_content=False)  # the reply body is not needed
        except client.ApiException as exc:
            if exc.status != 404:
                raise DriverError(f"delete {kind}: Kubernetes API answered {exc.status} {exc.reason}") from None
        except (OSError, urllib3.exceptions.HTTPError) as exc:
            raise DriverError(f"delete {kind}: Kubernetes API unreachable: {exc}") from None

    def delete(self) -> None:
        apps, core = client.AppsV1Api(self.api_client), client.CoreV1Api(self.api_client)
        autoscaling, policy = client.AutoscalingV2Api(self.api_client), client.PolicyV1Api(self.api_client)
        self._delete_quietly(autoscaling.delete_namespaced_horizontal_pod_autoscaler, "HorizontalPodAutoscaler")
        self._delete_quietly(policy.delete_namespaced_pod_disruption_budget, "PodDisruptionBudget")
        self._delete_quietly(core.delete_namespaced_service, "Service")
        self._delete_quietly(apps.delete_namespaced_deployment, "Deployment")

    def log_tail(self, replica: str, lines: int = 60) -> str:
        core = client.CoreV1Api(self.api_client)
        return self._call("read pod log", core.read_namespaced_pod_log, replica, self.spec.namespace, tail_lines=lines) or ""
