"""Admin console of deployments; actions call the same services as the API and the dashboard."""

from django.contrib import admin, messages

from deployments.models import Endpoint, InferenceKey, PoolModel, PoolReplica, Rollout, ServingPool
from deployments.services import endpoints as endpoint_services
from deployments.services import keys as key_services
from deployments.services import pools as pool_services
from deployments.services import rollouts as rollout_services
from kernel.errors import PlatformError


class PoolReplicaInline(admin.TabularInline):
    model = PoolReplica
    extra = 0
    can_delete = False
    readonly_fields = [
        "name",
        "status",
        "http_url",
        "grpc_url",
        "metrics_url",
        "pid",
        "restarts",
        "last_error",
        "started_at",
        "last_seen_at",
    ]
    fields = readonly_fields


class PoolModelInline(admin.TabularInline):
    model = PoolModel
    extra = 0
    can_delete = False
    readonly_fields = ["triton_model_name", "artifact", "state", "error", "replica_ready", "loaded_at"]
    fields = readonly_fields


@admin.register(ServingPool)
class ServingPoolAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "team",
        "driver",
        "replicas",
        "device_kind",
        "status",
        "cost_per_replica_hour",
        "updated_at",
    ]
    list_filter = ["driver", "status", "device_kind", "team"]
    search_fields = ["name"]
    readonly_fields = [
        "status",
        "status_reason",
        "generation",
        "model_repository",
        "created_by",
        "created_at",
        "updated_at",
    ]
    inlines = [PoolReplicaInline, PoolModelInline]
    actions = ["reconcile", "delete_pools"]

    def has_add_permission(self, request):
        return False  # pools are created through the API or the dashboard (services validate)

    def has_delete_permission(self, request, obj=None):
        return False  # deleting stops processes: the "delete pools" action goes through the service

    @admin.action(description="Reconcile replicas now")
    def reconcile(self, request, queryset):
        from deployments.tasks import pool_reconcile_task

        for pool in queryset:
            pool_reconcile_task.delay(pool.pk)
        self.message_user(request, f"Reconcile queued for {queryset.count()} pool(s).")

    @admin.action(description="Delete pools (stop replicas)")
    def delete_pools(self, request, queryset):
        for pool in queryset:
            try:
                pool_services.pool_delete(user=request.user, pool=pool)
            except PlatformError as exc:
                self.message_user(request, f"{pool.name}: {exc.detail}", messages.ERROR)


@admin.register(Endpoint)
class EndpointAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "pool", "public", "stable_artifact", "slo_p99_ms", "slo_error_rate", "updated_at"]
    list_filter = ["team", "pool", "public"]
    search_fields = ["name"]
    readonly_fields = ["name", "team", "pool", "stable_artifact", "created_by", "created_at", "updated_at"]

    def has_add_permission(self, request):
        return False  # endpoints are created through the API or the dashboard (the service loads the stable)

    def save_model(self, request, obj, form, change):
        endpoint_services.endpoint_update(
            user=request.user, endpoint=obj, **{f: getattr(obj, f) for f in endpoint_services.ENDPOINT_FIELDS}
        )


def _action(service, label):
    def run(modeladmin, request, queryset):
        for rollout in queryset.select_related("endpoint", "endpoint__team"):
            try:
                service(user=request.user, rollout=rollout, reason=f"{label} from the admin console")
            except PlatformError as exc:
                modeladmin.message_user(request, f"#{rollout.pk}: {exc.detail}", messages.WARNING)
            else:
                modeladmin.message_user(request, f"#{rollout.pk}: {label} done.")

    run.__name__ = f"rollout_{label.replace(' ', '_')}"
    return admin.action(description=f"{label.capitalize()} selected rollouts")(run)


@admin.register(Rollout)
class RolloutAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "endpoint",
        "candidate_artifact",
        "state",
        "step_index",
        "generation",
        "created_by",
        "created_at",
        "finished_at",
    ]
    list_filter = ["state", "strategy", "endpoint"]
    search_fields = ["endpoint__name", "reason"]
    readonly_fields = [f.name for f in Rollout._meta.fields]
    actions = [
        _action(rollout_services.rollout_promote, "promote"),
        _action(rollout_services.rollout_pause, "pause"),
        _action(rollout_services.rollout_resume, "resume"),
        _action(rollout_services.rollout_rollback, "roll back"),
    ]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(InferenceKey)
class InferenceKeyAdmin(admin.ModelAdmin):
    """Keys are created in the API or the dashboard (the secret is shown once there);
    here they are listed and revoked through the same service."""

    list_display = [
        "name",
        "team",
        "prefix",
        "all_endpoints",
        "rate_per_s",
        "burst",
        "max_concurrency",
        "created_by",
        "created_at",
        "revoked_at",
    ]
    list_filter = ["team", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "prefix"]
    readonly_fields = [f.name for f in InferenceKey._meta.fields] + ["endpoints"]
    exclude = ["sha256"]
    actions = ["revoke"]

    def get_readonly_fields(self, request, obj=None):
        return [f for f in self.readonly_fields if f != "sha256"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # limits and scope are set at creation; rotate by creating another key

    def has_delete_permission(self, request, obj=None):
        return False  # revoking keeps the audit trail; a deleted row would not

    @admin.action(description="Revoke selected keys")
    def revoke(self, request, queryset):
        for key in queryset.select_related("team"):
            try:
                key_services.inference_key_revoke(user=request.user, key=key, reason="revoked from the admin console")
            except PlatformError as exc:
                self.message_user(request, f"{key}: {exc.detail}", messages.ERROR)
            else:
                self.message_user(request, f"{key}: revoked.")
