"""Reads of serving pools shared by the API, the dashboard and the admin; every list is team-scoped."""

from django.db.models import Count, Prefetch, Q, QuerySet

from deployments.drivers import driver_for
from deployments.drivers.base import DriverError
from deployments.models import (
    PoolDriver,
    PoolModel,
    PoolModelState,
    PoolReplica,
    PoolSecretBinding,
    PoolStatus,
    ReplicaStatus,
    ServingPool,
)
from kernel.errors import NotFound, scrub_paths
from registry.models import Artifact
from registry.selectors.builds import artifact_get as registry_artifact_get
from registry.selectors.teams import team_scoped


def pool_list(*, user, filters: dict | None = None) -> QuerySet:
    filters = filters or {}
    qs = team_scoped(ServingPool.objects.select_related("team", "created_by"), user, "team_id").annotate(
        ready_replicas=Count("replica_set", filter=Q(replica_set__status=ReplicaStatus.READY), distinct=True),
        model_count=Count("models", filter=~Q(models__state=PoolModelState.UNLOADED), distinct=True),
    )
    if filters.get("team"):
        qs = qs.filter(team__name=filters["team"])
    if filters.get("driver"):
        qs = qs.filter(driver=filters["driver"])
    if filters.get("q"):
        qs = qs.filter(name__icontains=filters["q"])
    return qs


def pool_get(*, user, name: str) -> ServingPool:
    pool = (
        pool_list(user=user)
        .prefetch_related(
            Prefetch("replica_set", queryset=PoolReplica.objects.order_by("name")),
            Prefetch(
                "models",
                queryset=PoolModel.objects.exclude(state=PoolModelState.UNLOADED)
                .select_related("artifact", "artifact__version", "artifact__version__model")
                .order_by("triton_model_name"),
            ),
        )
        .filter(name=name)
        .first()
    )
    if pool is None:
        raise NotFound(f"No serving pool named {name!r}.", code="pool_not_found")
    return pool


def pool_models(*, pool: ServingPool, include_unloaded: bool = False) -> QuerySet:
    qs = PoolModel.objects.filter(pool=pool).select_related("artifact", "artifact__version", "artifact__version__model")
    if not include_unloaded:
        qs = qs.exclude(state=PoolModelState.UNLOADED)
    return qs.order_by("triton_model_name")


def artifact_get(*, user, artifact_id) -> Artifact:
    """An artifact the user may see (its model's team), else 404; the id may come from a form."""
    try:
        artifact_id = int(artifact_id)
    except (TypeError, ValueError):
        raise NotFound(f"No artifact with id {artifact_id!r}.", code="artifact_not_found") from None
    return registry_artifact_get(user=user, artifact_id=artifact_id)


def pool_live(*, pool: ServingPool) -> dict:
    """What the replicas say right now: readiness of each model per replica and Triton's
    statistics. Asks the driver (HTTP to each replica); a driver error is reported, not raised."""
    models = [m.triton_model_name for m in pool_models(pool=pool)]
    try:
        driver = driver_for(pool)
        replicas = driver.replicas()
        readiness = {
            name: {r.name: driver.is_model_ready(r, name) if r.ready else False for r in replicas} for name in models
        }
        stats = driver.statistics()
        return {"replicas": [r.__dict__ for r in replicas], "readiness": readiness, "statistics": stats, "error": ""}
    except DriverError as exc:
        return {
            "replicas": [],
            "readiness": {},
            "statistics": {"models": {}, "replicas": {}},
            "error": scrub_paths(str(exc)),
        }


def replica_log_tail(*, pool: ServingPool, replica: str, lines: int = 60) -> str:
    if not pool.replica_set.filter(name=replica).exists():
        raise NotFound(f"Pool {pool.name!r} has no replica {replica!r}.", code="replica_not_found")
    try:
        tail = driver_for(pool).log_tail(replica, lines)
    except DriverError as exc:
        tail = str(exc)
    return scrub_paths(tail)  # Triton logs its model repository's absolute paths; the server's layout stays private


def local_pools_steady() -> bool:
    """Whether every local pool is READY with every replica READY and no model loading or
    draining: the pool supervisor then ticks at its steady rate (run_pools --steady-interval)."""
    pools = ServingPool.objects.filter(driver=PoolDriver.LOCAL)
    if pools.exclude(status=PoolStatus.READY).exists():
        return False
    if PoolReplica.objects.filter(pool__driver=PoolDriver.LOCAL).exclude(status=ReplicaStatus.READY).exists():
        return False
    return not PoolModel.objects.filter(
        pool__driver=PoolDriver.LOCAL, state__in=[PoolModelState.LOADING, PoolModelState.DRAINING]
    ).exists()


def ready_replicas(*, pool_ids) -> list[PoolReplica]:
    """READY replicas of these pools, by pool and name (not user-scoped: for the platform).

    A pool none of whose replicas is READY keeps its DOWN ones (missed probes: slow or gone),
    as Envoy's panic routing does: a replica that still answers slowly beats a certain 503
    for every request, and the gateway's breakers and failover judge each one by its replies
    (a gone one refuses connections and is not tried)."""
    rows = list(
        PoolReplica.objects.filter(pool_id__in=pool_ids, status__in=[ReplicaStatus.READY, ReplicaStatus.DOWN])
        .select_related("pool")
        .order_by("pool_id", "name")
    )
    has_ready = {row.pool_id for row in rows if row.status == ReplicaStatus.READY}
    return [row for row in rows if row.status == ReplicaStatus.READY or row.pool_id not in has_ready]


def pool_health_problems() -> dict[str, dict[str, str]]:
    """What is broken in the serving pools as their supervisor last recorded it (not
    user-scoped: for /healthz): {pool: {replica or "pool": why}}. A replica that is down
    or failed, or restarting after a death; a failed pool. A replica starting for the first
    time (a new pool, a scale-up) and one retiring after a scale-down are not problems."""
    from deployments.models import PoolStatus

    problems: dict[str, dict[str, str]] = {}
    pools = ServingPool.objects.exclude(status=PoolStatus.DELETING).filter(replicas__gt=0)
    for name, reason in pools.filter(status=PoolStatus.FAILED).values_list("name", "status_reason"):
        problems.setdefault(name, {})["pool"] = f"failed: {reason}"
    rows = (
        PoolReplica.objects.filter(pool__in=pools, retiring_since__isnull=True)
        .filter(
            Q(status__in=[ReplicaStatus.DOWN, ReplicaStatus.FAILED]) | Q(status=ReplicaStatus.STARTING, restarts__gt=0)
        )
        .values_list("pool__name", "name", "status", "last_error")
        .order_by("pool__name", "name")
    )
    for pool_name, replica, status, error in rows:
        problems.setdefault(pool_name, {})[replica] = f"{status}: {error}" if error else status
    return problems


# --- repository secrets bound to teams (deployments/pool_policy.py) --------------------------
def pool_secret_binding_list(*, user) -> QuerySet:
    """Bindings of the user's teams (staff: all): which Secrets their pools may name."""
    return team_scoped(PoolSecretBinding.objects.select_related("team", "created_by"), user, "team_id")


def pool_secret_binding_get(*, user, binding_id) -> PoolSecretBinding:
    try:
        binding_id = int(binding_id)
    except (TypeError, ValueError):
        binding_id = None
    binding = pool_secret_binding_list(user=user).filter(pk=binding_id).first() if binding_id else None
    if binding is None:
        raise NotFound(f"No pool secret binding {str(binding_id)[:20]}.", code="binding_not_found")
    return binding


def bound_secret_names(*, team, namespace: str) -> frozenset[str]:
    """The Secrets `team`'s pools in `namespace` may name (not user-scoped: for the services)."""
    return frozenset(
        PoolSecretBinding.objects.filter(team=team, namespace=namespace).values_list("secret_name", flat=True)
    )


def replica_listeners() -> list[str]:
    """Every pool replica's HTTP and gRPC address, of every team (kernel/outbound.py refuses a
    tenant URL that points at one: a Triton pool is reached by pool, never by URL)."""
    out = []
    for http_url, grpc_url in PoolReplica.objects.values_list("http_url", "grpc_url"):
        out += [url for url in (http_url, grpc_url) if url]
    return out
