"""The Kubernetes pool driver: server-side apply of a pool's objects (objects.py), pods as
replicas, models loaded and unloaded through each ready pod's Triton repository API (with
the pool's admin key: Triton refuses that API to anyone else).

Who owns `spec.replicas`: the driver, while the pool has no HorizontalPodAutoscaler; the
HPA, once it has one. Server-side apply makes that a matter of field ownership: the
driver's manager (`modelplane`) applies the Deployment without `replicas` when an HPA
scales it, so re-applying every reconcile never undoes a scale-up. Handing the field over
follows Kubernetes' documented procedure ("Transferring ownership", server-side apply):
a second manager (`modelplane-handover`) applies only `spec.replicas` first, so the
field is never left without an owner (the API server would reset it to 1); the HPA's
first write then takes it from that manager. Going back (a scale to 0) is a forced apply
of `replicas` by `modelplane`, which takes the field back from the HPA.

Why this is one long module: every call the driver makes to the API server goes through one error mapping and one ownership rule.
"""

from __future__ import annotations

import json
import os

import urllib3
from kubernetes import client

from deployments.drivers.base import DriverError, PoolDriver, PoolSpec, ReplicaInfo
from deployments.drivers.kubernetes.objects import (
    FIELD_MANAGER,
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    ClusterSettings,
    admin_secret_name,
    autoscaled,
    object_name,
    render,
    selector,
)

APPLY = "application/apply-patch+yaml"
HANDOVER_MANAGER = "modelplane-handover"
KINDS = ("Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy", "Secret")


class ApiRefused(DriverError):
    """The API server answered with an error status (`status`: 404, 409, 422, ...)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def owns_replicas(deployment: dict | None, manager: str = FIELD_MANAGER) -> bool:
    """Whether `manager` applied `spec.replicas` of this Deployment (its managedFields)."""
    for entry in ((deployment or {}).get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {}):
                return True
    return False


def seed_replicas(spec: PoolSpec, deployment: dict | None) -> int:
    """The count an HPA starts from: what runs now when something runs, else what the pool
    asked for, inside the HPA's bounds."""
    current = ((deployment or {}).get("spec") or {}).get("replicas") or 0
    return min(max(current or spec.replicas, spec.min_replicas), spec.max_replicas)


class KubernetesDriver(PoolDriver):
    kind = "kubernetes"

    def __init__(
        self,
        spec: PoolSpec,
        *,
        api_client: client.ApiClient | None = None,
        pod_http_port: int = HTTP_PORT,
        pod_metrics_port: int = METRICS_PORT,
        pod_grpc_port: int | None = GRPC_PORT,
        cluster: ClusterSettings | None = None,
        admin_key: str | None = None,
    ):
        """`pod_grpc_port=None`: control the pods' Triton over HTTP only (load/unload then
        stall HTTP inference while they run; see serving.triton._grpc_control)."""
        super().__init__(spec)
        self._api_client = api_client
        self.pod_http_port, self.pod_metrics_port, self.pod_grpc_port = pod_http_port, pod_metrics_port, pod_grpc_port
        self.cluster = cluster or ClusterSettings.from_env()
        # The key Triton's restricted model-repository API wants: the pool's own (the Secret its pods read).
        self.admin_key = spec.admin_key if admin_key is None else admin_key

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
            raise ApiRefused(
                f"{what}: Kubernetes API answered {exc.status} {exc.reason}: {(exc.body or '')[:500]}", exc.status
            ) from None
        except (OSError, urllib3.exceptions.HTTPError) as exc:
            raise DriverError(f"{what}: Kubernetes API unreachable: {exc}") from None

    def _apis(self) -> dict:
        apps, core = client.AppsV1Api(self.api_client), client.CoreV1Api(self.api_client)
        autoscaling, policy = client.AutoscalingV2Api(self.api_client), client.PolicyV1Api(self.api_client)
        networking = client.NetworkingV1Api(self.api_client)
        return {
            "Deployment": (apps.patch_namespaced_deployment, apps.delete_namespaced_deployment),
            "Service": (core.patch_namespaced_service, core.delete_namespaced_service),
            "HorizontalPodAutoscaler": (
                autoscaling.patch_namespaced_horizontal_pod_autoscaler,
                autoscaling.delete_namespaced_horizontal_pod_autoscaler,
            ),
            "PodDisruptionBudget": (
                policy.patch_namespaced_pod_disruption_budget,
                policy.delete_namespaced_pod_disruption_budget,
            ),
            "NetworkPolicy": (
                networking.patch_namespaced_network_policy,
                networking.delete_namespaced_network_policy,
            ),
            "Secret": (core.patch_namespaced_secret, core.delete_namespaced_secret),
        }

    def _apply(self, patch, obj: dict, *, manager: str = FIELD_MANAGER, force: bool = True):
        name, namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
        return self._call(
            f"apply {obj['kind']} {namespace}/{name}",
            patch,
            name,
            namespace,
            obj,
            field_manager=manager,
            force=force,
            _content_type=APPLY,
        )

    def _current_deployment(self) -> dict | None:
        apps = client.AppsV1Api(self.api_client)
        try:
            reply = apps.read_namespaced_deployment(object_name(self.spec), self.spec.namespace, _preload_content=False)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise ApiRefused(
                f"read Deployment: Kubernetes API answered {exc.status} {exc.reason}", exc.status
            ) from None
        except (OSError, urllib3.exceptions.HTTPError) as exc:
            raise DriverError(f"read Deployment: Kubernetes API unreachable: {exc}") from None
        return json.loads(reply.data)

    def _hand_over_replicas(self, patch, deployment: dict, current: dict | None) -> None:
        """Give `spec.replicas` to the handover manager (then to the HPA's first write).
        Called only when the driver's manager owns the field or the Deployment is new, so
        the owner `force` takes it from is the driver itself (at a start from 0, its 0),
        with the value running now; on a new Deployment nobody owns it yet and a 409 (the
        HPA wrote first) leaves it to the HPA."""
        replicas_only = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": deployment["metadata"]["name"], "namespace": deployment["metadata"]["namespace"]},
            "spec": {"replicas": seed_replicas(self.spec, current)},
        }
        try:
            self._apply(patch, replicas_only, manager=HANDOVER_MANAGER, force=current is not None)
        except ApiRefused as exc:
            if exc.status != 409:  # a conflict: the HPA already owns the field, as it should
                raise

    def apply(self) -> list[str]:
        """Server-side apply every rendered object (field manager `modelplane`); remove the
        kinds this spec no longer has (an HPA at 0 replicas, a PDB at one)."""
        apis = self._apis()
        objects = render(self.spec, self.cluster)
        deployment = objects[0]
        hpa = autoscaled(self.spec)
        handover, current = False, None
        if hpa:
            current = self._current_deployment()
            handover = current is None or owns_replicas(current)
            if current is not None and handover:
                self._hand_over_replicas(apis["Deployment"][0], deployment, current)
        applied = []
        # The admin key's Secret first: the pods read it when they start.
        for obj in sorted(objects, key=lambda o: o["kind"] != "Secret"):
            self._apply(apis[obj["kind"]][0], obj)
            applied.append(obj["kind"])
            if obj is deployment and hpa and handover and current is None:
                self._hand_over_replicas(apis["Deployment"][0], deployment, None)
        for kind in ("HorizontalPodAutoscaler", "PodDisruptionBudget"):
            if kind not in applied:
                self._delete_quietly(apis[kind][1], kind)
        return applied

    def ensure(self, on_down=None) -> list[ReplicaInfo]:  # the kubelet restarts pods; their state is in replicas()
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
                    name=pod.metadata.name,
                    status=status,
                    http_url=f"http://{ip}:{self.pod_http_port}" if ip else "",
                    grpc_url=f"{ip}:{self.pod_grpc_port}" if ip and self.pod_grpc_port else "",
                    metrics_url=f"http://{ip}:{self.pod_metrics_port}/metrics" if ip else "",
                    restarts=restarts,
                    started_at=started,
                    error=pod.status.message or "",
                    admin_key=self.admin_key,
                )
            )
        return sorted(infos, key=lambda r: r.name)

    def scale(self, replicas: int) -> list[ReplicaInfo]:
        if replicas < 0:
            raise DriverError("replicas must be 0 or more")
        self.spec = PoolSpec(**{**self.spec.__dict__, "replicas": replicas})
        return self.ensure()

    def _delete_quietly(self, fn, kind: str, name: str = "") -> None:
        try:
            fn(
                name or object_name(self.spec), self.spec.namespace, _preload_content=False
            )  # the reply body is not needed
        except client.ApiException as exc:
            if exc.status != 404:
                raise DriverError(f"delete {kind}: Kubernetes API answered {exc.status} {exc.reason}") from None
        except (OSError, urllib3.exceptions.HTTPError) as exc:
            raise DriverError(f"delete {kind}: Kubernetes API unreachable: {exc}") from None

    def delete(self) -> None:
        apis = self._apis()
        for kind in ("NetworkPolicy", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service", "Deployment"):
            self._delete_quietly(apis[kind][1], kind)
        self._delete_quietly(apis["Secret"][1], "Secret", name=admin_secret_name(self.spec))

    def log_tail(self, replica: str, lines: int = 60) -> str:
        core = client.CoreV1Api(self.api_client)
        return (
            self._call("read pod log", core.read_namespaced_pod_log, replica, self.spec.namespace, tail_lines=lines)
            or ""
        )
