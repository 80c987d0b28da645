"""Pool requests: the writes people make to serving pools (API, dashboard, admin).

pool_create, pool_update, pool_scale, pool_delete, pool_load_request and
pool_unload_request check the user's role, validate, record the wanted state with its
audit Event in one transaction, and send a Celery task after commit that does the driver
work (reconcile.py). Nothing is half-written: a bad request changes nothing.

Why this is one long module: every write to a pool and its loads validates through the same field checks, and every load or unload request locks the pool the same way.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.conf import settings
from django.db import transaction

from deployments import conf as deployments_conf
from deployments import pool_policy
from deployments.lock_objects import pool_for_update
from deployments.models import DeviceKind, PoolDriver, PoolModel, PoolModelState, PoolStatus, ServingPool
from deployments.pool_fields import DNS1123_LABEL, pool_fields_check, whole_number
from deployments.selectors.pools import bound_secret_names
from deployments.services.reconcile import model_dir_for, sealed_admin_key
from deployments.tasks import pool_model_load_task, pool_model_unload_task, pool_reconcile_task, pool_teardown_task
from kernel.errors import Conflict, InvalidInput, NotFound
from registry.models import Artifact, ArtifactStatus, EventAction, Role
from registry.names import LLM_BACKEND_VARIANT, name_conflict
from registry.services.events import event_record
from registry.services.teams import require_role
from serving.tritonserver import TritonNotAvailable, find_binary

MAX_REPLICAS = 64
LOCAL_MAX_REPLICAS = 8  # processes on one machine
REPOSITORY_SCHEMES = ("s3://", "gs://", "as://", "pvc://")
UPDATABLE_FIELDS = (
    "cost_per_replica_hour",
    "max_queue_size",
    "queue_timeout_ms",
    "resources",
    "image",
    "min_replicas",
    "max_replicas",
    "autoscale_metric",
    "autoscale_target",
    "repository_secret",
)
KUBERNETES_ONLY = ("autoscale_metric", "autoscale_target", "repository_secret")


def pools_root() -> Path:
    """Where local pools keep their repositories, replica state and logs."""
    configured = deployments_conf.get("POOLS_DIR")
    return Path(configured or Path(settings.VAR_DIR) / "pools").resolve()


def _after_commit(task, *args, **kwargs) -> None:
    """Send a deployments task after the current transaction commits."""
    transaction.on_commit(lambda: task.delay(*args, **kwargs))


def _check_cost(value) -> Decimal:
    try:
        cost = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise InvalidInput(
            f"cost_per_replica_hour: {value!r} is not a number.", field="cost_per_replica_hour"
        ) from None
    if cost < 0 or not cost.is_finite():
        raise InvalidInput("cost_per_replica_hour: must be 0 or more.", field="cost_per_replica_hour")
    return cost


def _team_infrastructure(*, team, namespace: str, image: str, repository_secret: str) -> dict:
    """A Kubernetes pool's namespace, image and repository secret as the operator allows
    them for `team` (deployments/pool_policy.py): a 400 naming the field and the rule."""
    policy = pool_policy.PoolPolicy.from_settings()
    namespace = pool_policy.namespace_check(policy, team=team.name, namespace=namespace)
    return {
        "namespace": namespace,
        "image": pool_policy.image_check(policy, team=team.name, image=image),
        "repository_secret": pool_policy.secret_check(
            team=team.name,
            namespace=namespace,
            secret=repository_secret,
            bound=bound_secret_names(team=team, namespace=namespace),
        ),
    }


def _default_bounds(*, replicas: int, min_replicas, max_replicas, limit: int, cpu_autoscaled: bool) -> tuple:
    """Autoscaling bounds not given: from 1 up to 4 (or the count asked for); a pool that
    would scale on CPU without a CPU request keeps its size (asked for explicitly: a 400)."""
    min_given = min_replicas is not None
    min_replicas = whole_number(1 if min_replicas is None else min_replicas, "min_replicas", low=1, high=limit)
    if max_replicas is None:
        max_replicas = max(replicas, min_replicas, 4)
        if cpu_autoscaled:
            max_replicas = max(replicas, min_replicas)
            if not min_given:
                min_replicas = max_replicas
    return min_replicas, max_replicas


def pool_create(
    *,
    user,
    name: str,
    team,
    driver: str = PoolDriver.LOCAL,
    replicas: int = 1,
    device_kind: str = DeviceKind.CPU,
    gpus_per_replica: int | None = None,
    resources: dict | None = None,
    model_repository: str = "",
    namespace: str = "",
    image: str = "",
    min_replicas: int | None = None,
    max_replicas: int | None = None,
    max_queue_size: int = 0,
    queue_timeout_ms: int = 0,
    cost_per_replica_hour=0,
    autoscale_metric: str = "",
    autoscale_target: float | None = None,
    repository_secret: str = "",
) -> ServingPool:
    """Record a new pool and start its replicas (a task after commit).

    Guarantees: the name is a free DNS label; every field passes the one validator
    (deployments/pool_fields.py: quantities, names, replica bounds, autoscaling); a local
    pool runs on CPU with the tritonserver binary present; a Kubernetes pool has a remote
    model repository, runs in a namespace of its team with an allowed image and only a
    Secret bound to its team (deployments/pool_policy.py; no namespace: the team's
    default), and gets a Triton admin key of its own."""
    if not isinstance(name, str) or len(name) > 48 or not DNS1123_LABEL.match(name):
        raise InvalidInput(
            "name: use 1-48 lower-case letters, digits or '-', starting and ending with a letter or digit.",
            field="name",
        )
    if driver not in PoolDriver.values:
        raise InvalidInput(f"driver: unknown driver {driver!r}; one of {', '.join(PoolDriver.values)}.", field="driver")
    if device_kind not in DeviceKind.values:
        raise InvalidInput(
            f"device_kind: unknown device {device_kind!r}; one of {', '.join(DeviceKind.values)}.", field="device_kind"
        )
    require_role(user=user, team=team, role=Role.DEPLOYER)
    kubernetes = driver == PoolDriver.KUBERNETES
    limit = MAX_REPLICAS if kubernetes else LOCAL_MAX_REPLICAS
    replicas = whole_number(replicas, "replicas", low=0, high=limit)
    gpu = DeviceKind.is_gpu(device_kind)
    gpus = whole_number(
        gpus_per_replica if gpus_per_replica is not None else (1 if gpu else 0), "gpus_per_replica", low=0, high=16
    )
    if gpu and gpus == 0:
        raise InvalidInput(
            f"gpus_per_replica: a {device_kind} pool needs at least 1 GPU per replica.", field="gpus_per_replica"
        )
    if not gpu and gpus:
        raise InvalidInput(
            "gpus_per_replica: a cpu pool has no GPUs; set device_kind to a GPU type.", field="gpus_per_replica"
        )
    min_replicas, max_replicas = _default_bounds(
        replicas=replicas,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        limit=limit,
        cpu_autoscaled=kubernetes
        and (autoscale_metric or ("cpu" if device_kind == DeviceKind.CPU else "")) == "cpu"
        and not (isinstance(resources, dict) and "cpu" in resources),
    )
    fields = pool_fields_check(
        {
            "replicas": replicas,
            "min_replicas": min_replicas,
            "max_replicas": max_replicas,
            "resources": resources,
            **({"namespace": namespace} if namespace else {}),
            "image": image or ServingPool._meta.get_field("image").default,
            "autoscale_metric": autoscale_metric,
            "autoscale_target": autoscale_target,
            "repository_secret": repository_secret,
        },
        kubernetes=kubernetes,
        device_kind=device_kind,
        limit=limit,
    )
    queue = whole_number(max_queue_size, "max_queue_size", low=0, high=1_000_000)
    queue_ms = whole_number(queue_timeout_ms, "queue_timeout_ms", low=0, high=600_000)
    cost = _check_cost(cost_per_replica_hour)
    admin_key = ""
    if kubernetes:
        fields.update(
            _team_infrastructure(
                team=team,
                namespace=fields.get("namespace", ""),
                image=fields["image"],
                repository_secret=fields["repository_secret"],
            )
        )
        admin_key = sealed_admin_key()
    if driver == PoolDriver.LOCAL:
        if fields.get("namespace"):
            raise InvalidInput(
                "namespace: a local pool runs on this machine, in no namespace; leave it empty.", field="namespace"
            )
        if gpu:
            raise InvalidInput(
                "device_kind: local pools run on this machine's CPU; use the kubernetes driver for GPUs.",
                code="gpu_not_local",
                field="device_kind",
            )
        if model_repository:
            raise InvalidInput(
                "model_repository: a local pool keeps its repository under VAR_DIR; leave it empty.",
                field="model_repository",
            )
        if fields["repository_secret"]:
            raise InvalidInput(
                "repository_secret: a local pool reads its repository from this machine; leave it empty.",
                field="repository_secret",
            )
        try:
            find_binary()
        except TritonNotAvailable as exc:
            raise InvalidInput(f"driver: {exc}", code="triton_unavailable", field="driver") from None
        model_repository = str(pools_root() / name / "models")
    elif not isinstance(model_repository, str) or not model_repository.startswith(REPOSITORY_SCHEMES):
        raise InvalidInput(
            f"model_repository: give an object-store URL or a volume claim ({', '.join(REPOSITORY_SCHEMES)}).",
            field="model_repository",
        )
    with transaction.atomic():
        holder = ServingPool.objects.filter(name=name).select_related("team").first()
        if holder is not None:  # another team's name reads as a reserved one (no name oracle)
            raise name_conflict(user=user, kind="serving pool", name=name, holder_team=holder.team)
        pool = ServingPool.objects.create(
            name=name,
            team=team,
            driver=driver,
            replicas=fields["replicas"],
            device_kind=device_kind,
            gpus_per_replica=gpus,
            resources=fields["resources"],
            model_repository=model_repository,
            namespace=fields.get("namespace", ""),
            image=fields["image"],
            min_replicas=fields["min_replicas"],
            max_replicas=fields["max_replicas"],
            autoscale_metric=fields["autoscale_metric"],
            autoscale_target=fields["autoscale_target"],
            repository_secret=fields["repository_secret"],
            admin_key_sealed=admin_key,
            max_queue_size=queue,
            queue_timeout_ms=queue_ms,
            cost_per_replica_hour=cost,
            created_by=user,
        )
        event_record(
            actor=user,
            obj=pool,
            action=EventAction.CREATED,
            to_state=pool.status,
            data={"driver": driver, "replicas": replicas},
        )
        _after_commit(pool_reconcile_task, pool.pk)
    return pool


def pool_update(*, user, pool: ServingPool, **changes) -> ServingPool:
    """Change cost, queue limits, resources, image or autoscaling bounds."""
    require_role(user=user, team=pool.team, role=Role.DEPLOYER)
    unknown = set(changes) - set(UPDATABLE_FIELDS)
    if unknown:
        raise InvalidInput(f"{sorted(unknown)[0]}: cannot be changed here.", field=sorted(unknown)[0])
    kubernetes = pool.driver == PoolDriver.KUBERNETES
    if not kubernetes and set(changes) & set(KUBERNETES_ONLY):
        key = sorted(set(changes) & set(KUBERNETES_ONLY))[0]
        raise InvalidInput(f"{key}: only Kubernetes pools have it.", field=key)
    limit = MAX_REPLICAS if kubernetes else LOCAL_MAX_REPLICAS
    clean = {}
    for key, value in changes.items():
        if key == "cost_per_replica_hour":
            clean[key] = _check_cost(value)
        elif key == "image":
            clean[key] = value if value not in (None, "") else pool.image
        elif key == "max_queue_size":
            clean[key] = whole_number(value, key, low=0, high=1_000_000)
        elif key == "queue_timeout_ms":
            clean[key] = whole_number(value, key, low=0, high=600_000)
        else:
            clean[key] = value
    # The whole pool as it would be, through the one validator (bounds are checked together).
    merged = {
        key: getattr(pool, key)
        for key in ("replicas", "min_replicas", "max_replicas", "resources", "autoscale_metric", "autoscale_target")
    }
    if "autoscale_metric" in clean and "autoscale_target" not in clean:
        merged["autoscale_target"] = None  # a new metric starts from its own default target
    merged.update(
        {k: v for k, v in clean.items() if k not in ("cost_per_replica_hour", "max_queue_size", "queue_timeout_ms")}
    )
    checked = pool_fields_check(merged, kubernetes=kubernetes, device_kind=pool.device_kind, limit=limit)
    clean.update({k: checked[k] for k in clean if k in checked})
    if kubernetes and {"image", "repository_secret"} & clean.keys():
        allowed = _team_infrastructure(
            team=pool.team,
            namespace=pool.namespace,
            image=clean.get("image", pool.image),
            repository_secret=clean.get("repository_secret", pool.repository_secret),
        )
        clean.update({k: allowed[k] for k in ("image", "repository_secret") if k in clean})
    if "autoscale_metric" in clean:
        clean["autoscale_target"] = checked["autoscale_target"]
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        changed = sorted(k for k, v in clean.items() if getattr(locked, k) != v)
        if not changed:
            return locked
        for key in changed:
            setattr(locked, key, clean[key])
        locked.generation += 1
        locked.save(update_fields=[*changed, "generation", "updated_at"])
        event_record(
            actor=user,
            obj=locked,
            action=EventAction.UPDATED,
            data={"fields": changed, "generation": locked.generation},
        )
        _after_commit(pool_reconcile_task, locked.pk)
    return locked


def pool_scale(*, user, pool: ServingPool, replicas) -> ServingPool:
    """Set the desired replica count (0 allowed: keeps the pool, stops its servers).

    A Kubernetes pool that autoscales (max_replicas above min_replicas) leaves its count
    to its HorizontalPodAutoscaler: it may be stopped (0) and started again (a count inside
    its bounds, the HPA's starting point), but a running one is a 409 naming the bounds."""
    require_role(user=user, team=pool.team, role=Role.DEPLOYER)
    kubernetes = pool.driver == PoolDriver.KUBERNETES
    limit = MAX_REPLICAS if kubernetes else LOCAL_MAX_REPLICAS
    replicas = whole_number(replicas, "replicas", low=0, high=limit)
    pool_fields_check(
        {"replicas": replicas, "min_replicas": pool.min_replicas, "max_replicas": pool.max_replicas},
        kubernetes=kubernetes,
        device_kind=pool.device_kind,
        limit=limit,
    )
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        if locked.status == PoolStatus.DELETING:
            raise Conflict(f"Pool {locked.name!r} is being deleted.", code="pool_deleting")
        if locked.replicas == replicas:
            return locked
        if kubernetes and locked.replicas and replicas and locked.max_replicas > locked.min_replicas:
            raise Conflict(
                f"replicas: pool {locked.name!r} autoscales between {locked.min_replicas} and {locked.max_replicas} "
                "replicas (its HorizontalPodAutoscaler owns the count); change min_replicas/max_replicas, "
                "or scale to 0 to stop it.",
                code="pool_autoscaled",
                field="replicas",
            )
        old = locked.replicas
        locked.replicas = replicas
        locked.generation += 1
        locked.save(update_fields=["replicas", "generation", "updated_at"])
        event_record(actor=user, obj=locked, action=EventAction.SCALED, from_state=str(old), to_state=str(replicas))
        _after_commit(pool_reconcile_task, locked.pk)
    return locked


def pool_delete(*, user, pool: ServingPool) -> ServingPool:
    """Mark the pool for deletion; a task stops its replicas and removes it."""
    require_role(user=user, team=pool.team, role=Role.DEPLOYER)
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        endpoints = getattr(locked, "endpoints", None)  # deployments.Endpoint.pool (PROTECT)
        if endpoints is not None and endpoints.exists():
            names = ", ".join(sorted(endpoints.values_list("name", flat=True))[:5])
            raise Conflict(
                f"Pool {locked.name!r} serves endpoints ({names}); move or delete them first.", code="pool_in_use"
            )
        if locked.status != PoolStatus.DELETING:
            old = locked.status
            locked.status = PoolStatus.DELETING
            locked.save(update_fields=["status", "updated_at"])
            event_record(
                actor=user,
                obj=locked,
                action=EventAction.DELETE_REQUESTED,
                from_state=old,
                to_state=PoolStatus.DELETING,
            )
        _after_commit(pool_teardown_task, locked.pk)
    return locked


# --- models in pools -------------------------------------------------------------------------
def pool_load_request(*, user, pool: ServingPool, artifact: Artifact, model_name: str = "") -> PoolModel:
    """Ask for `artifact` on every replica of `pool`; idempotent for a model already there.
    `model_name`: under another Triton name than its own (an alias: a rollout's baseline).

    Guarantees: only a servable artifact with a readable Triton model directory is
    accepted; the load itself runs in a task and is READY only when every replica says so."""
    require_role(user=user, team=pool.team, role=Role.DEPLOYER)
    if artifact.status != ArtifactStatus.SERVABLE:
        raise InvalidInput(
            f"artifact: artifact {artifact.pk} ({artifact.variant}) is {artifact.status}, not servable"
            + (f": {artifact.status_reason}" if artifact.status_reason else "."),
            code="artifact_not_servable",
            field="artifact",
        )
    if artifact.variant == LLM_BACKEND_VARIANT:
        raise InvalidInput(
            f"artifact: artifact {artifact.pk} is a reference to an LLM backend (an OpenAI-compatible server); "
            "there is nothing to load into a pool: an LLM endpoint routes to it directly.",
            code="artifact_not_loadable",
            field="artifact",
        )
    model_dir = model_dir_for(pool, artifact, model_name)
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        if locked.status == PoolStatus.DELETING:
            raise Conflict(f"Pool {locked.name!r} is being deleted.", code="pool_deleting")
        if locked.replicas == 0:
            raise Conflict(f"Pool {locked.name!r} has 0 replicas; scale it up before loading.", code="no_replicas")
        pool_model, created = PoolModel.objects.select_for_update().get_or_create(
            pool=locked,
            triton_model_name=model_dir.name,
            defaults={"artifact": artifact, "requested_by": user, "state": PoolModelState.LOADING},
        )
        if not created:
            if pool_model.state == PoolModelState.DRAINING:
                raise Conflict(
                    f"{model_dir.name} is draining on {locked.name}; load it again after the unload.",
                    code="model_draining",
                )
            if pool_model.state == PoolModelState.READY:
                return pool_model
            old = pool_model.state
            pool_model.artifact, pool_model.requested_by = artifact, user
            pool_model.state, pool_model.error, pool_model.replica_ready = PoolModelState.LOADING, "", {}
            pool_model.save()
        else:
            old = ""
        event_record(
            actor=user,
            obj=locked,
            action=EventAction.MODEL_LOAD_REQUESTED,
            from_state=old,
            to_state=PoolModelState.LOADING,
            reason=model_dir.name,
            data={"model": model_dir.name, "artifact": artifact.pk},
        )
        _after_commit(pool_model_load_task, pool_model.pk)
    return pool_model


def pool_unload_request(
    *, user, pool: ServingPool, model_name: str, drain_timeout_s: float = 30.0, force: bool = False
) -> PoolModel:
    """Stop serving `model_name`: mark it DRAINING (the gateway stops routing to it), then
    a task waits for in-flight requests to finish and unloads it from every replica."""
    require_role(user=user, team=pool.team, role=Role.DEPLOYER)
    try:
        drain_timeout_s = float(drain_timeout_s)
    except (TypeError, ValueError):
        raise InvalidInput(f"drain_timeout_s: {drain_timeout_s!r} is not a number.", field="drain_timeout_s") from None
    if not 0 <= drain_timeout_s <= 600:
        raise InvalidInput("drain_timeout_s: give 0..600 seconds.", field="drain_timeout_s")
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        pool_model = PoolModel.objects.select_for_update().filter(pool=locked, triton_model_name=model_name).first()
        if pool_model is None:
            raise NotFound(f"Pool {locked.name!r} has no model {model_name!r}.", code="model_not_in_pool")
        if pool_model.state in {PoolModelState.UNLOADED, PoolModelState.DRAINING}:
            return pool_model
        old = pool_model.state
        pool_model.state = PoolModelState.DRAINING
        pool_model.save(update_fields=["state", "updated_at"])
        event_record(
            actor=user,
            obj=locked,
            action=EventAction.MODEL_DRAIN_STARTED,
            from_state=old,
            to_state=PoolModelState.DRAINING,
            reason=model_name,
            data={"model": model_name, "drain_timeout_s": drain_timeout_s, "force": bool(force)},
        )
        _after_commit(pool_model_unload_task, pool_model.pk, drain_timeout_s=drain_timeout_s, force=bool(force))
    return pool_model
