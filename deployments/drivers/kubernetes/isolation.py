"""What a team's pool is confined to on the cluster, at render time: the operator's policy
(deployments/pool_policy.py: namespace, image, repository secret) checked again on the
spec the driver is about to apply, and the pool's NetworkPolicy.

`renderable(spec, policy)` raises SpecRefused (a DriverError naming the field and the
rule) for a spec the services would have refused: a row written around them (a database
edit, an old row from before the policy) renders nothing of the platform's. A spec without
an admin key of its own is refused too: the platform's key is never a pool's.

The NetworkPolicy: ingress to Triton's HTTP and gRPC ports from the gateway and the
control plane only, to its metrics port from the control plane and Prometheus; egress to
the cluster's DNS and to the operator's POOL_EGRESS_CIDRS (the object store) only. A
python-backend model from a team's bucket runs code in the pod: this is what it can reach
(docs/pools.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kubernetes import client

from deployments.drivers.base import DriverError, PoolSpec
from deployments.pool_policy import PoolPolicy, spec_check
from kernel.errors import InvalidInput

if TYPE_CHECKING:
    from deployments.drivers.kubernetes.objects import ClusterSettings

DNS_PORT = 53


class SpecRefused(DriverError):
    """The spec breaks the operator's policy: nothing of it is rendered or applied."""

    def __init__(self, message: str, *, field: str, code: str):
        super().__init__(message)
        self.field, self.code = field, code


def renderable(spec: PoolSpec, policy: PoolPolicy) -> None:
    try:
        spec_check(
            policy,
            team=spec.team,
            namespace=spec.namespace,
            image=spec.image,
            repository_secret=spec.repository_secret,
            bound=spec.bound_secrets,
        )
    except InvalidInput as exc:
        raise SpecRefused(
            f"pool {spec.name!r} is not rendered: {exc.detail}", field=exc.field or "", code=exc.code
        ) from None
    if not spec.admin_key:
        raise SpecRefused(
            f"pool {spec.name!r} is not rendered: admin_key: it has no Triton admin key of its own yet "
            "(made when the pool is created or reconciled); the platform's key is never a pool's.",
            field="admin_key",
            code="admin_key_missing",
        )


def _peers(namespace: str, components: list[str]) -> client.V1NetworkPolicyPeer:
    return client.V1NetworkPolicyPeer(
        namespace_selector=client.V1LabelSelector(match_labels={"kubernetes.io/metadata.name": namespace}),
        pod_selector=client.V1LabelSelector(
            match_labels={"app.kubernetes.io/part-of": "modelplane"},
            match_expressions=[
                client.V1LabelSelectorRequirement(key="app.kubernetes.io/component", operator="In", values=components)
            ],
        ),
    )


def _egress(cluster: ClusterSettings) -> list[client.V1NetworkPolicyEgressRule]:
    """DNS, and the object store's addresses when the operator gave them; nothing else (not
    the API server, not the platform, not the cloud's metadata address, not other pods)."""
    dns = client.V1NetworkPolicyEgressRule(
        to=[
            client.V1NetworkPolicyPeer(
                namespace_selector=client.V1LabelSelector(match_labels={"kubernetes.io/metadata.name": "kube-system"}),
                pod_selector=client.V1LabelSelector(match_labels={"k8s-app": "kube-dns"}),
            )
        ],
        ports=[client.V1NetworkPolicyPort(protocol=p, port=DNS_PORT) for p in ("UDP", "TCP")],
    )
    rules = [dns]
    if cluster.egress_cidrs:
        rules.append(
            client.V1NetworkPolicyEgressRule(
                to=[client.V1NetworkPolicyPeer(ip_block=client.V1IPBlock(cidr=cidr)) for cidr in cluster.egress_cidrs]
            )
        )
    return rules


def render_network_policy(
    spec: PoolSpec, *, labels: dict, selector: dict, name: str, cluster: ClusterSettings
) -> client.V1NetworkPolicy:
    tcp = [client.V1NetworkPolicyPort(protocol="TCP", port=p) for p in ("http", "grpc")]
    prometheus = client.V1NetworkPolicyPeer(
        namespace_selector=client.V1LabelSelector(
            match_labels={"kubernetes.io/metadata.name": cluster.prometheus_namespace}
        ),
        pod_selector=client.V1LabelSelector(match_labels={"app.kubernetes.io/name": "prometheus"}),
    )
    return client.V1NetworkPolicy(
        api_version="networking.k8s.io/v1",
        kind="NetworkPolicy",
        metadata=client.V1ObjectMeta(name=name, namespace=spec.namespace, labels=labels),
        spec=client.V1NetworkPolicySpec(
            pod_selector=client.V1LabelSelector(match_labels=selector),
            policy_types=["Ingress", "Egress"],
            ingress=[
                client.V1NetworkPolicyIngressRule(
                    _from=[_peers(cluster.platform_namespace, ["gateway", "web", "worker", "pools"])], ports=tcp
                ),
                client.V1NetworkPolicyIngressRule(
                    _from=[_peers(cluster.platform_namespace, ["web", "worker"]), prometheus],
                    ports=[client.V1NetworkPolicyPort(protocol="TCP", port="metrics")],
                ),
            ],
            egress=_egress(cluster),
        ),
    )
