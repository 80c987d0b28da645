from django.contrib import admin, messages

from config.errors import PlatformError
from deployments import services
from deployments.models import PoolModel, PoolReplica, ServingPool


class PoolReplicaInline(admin.TabularInline):
    model = PoolReplica
    extra = 0
    can_delete = False
    readonly_fields = ["name", "status", "http_url", "grpc_url", "metrics_url", "pid", "restarts", "last_error", "started_at", "last_seen_at"]
    fields = readonly_fields


class PoolModelInline(admin.TabularInline):
    model = PoolModel
    extra = 0
    can_delete = False
    readonly_fields = ["triton_model_name", "artifact", "state", "error", "replica_ready", "loaded_at"]
    fields = readonly_fields


@admin.register(ServingPool)
class ServingPoolAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "driver", "replicas", "device_kind", "status", "cost_per_replica_hour", "updated_at"]
    list_filter = ["driver", "status", "device_kind", "team"]
    search_fields = ["name"]
    readonly_fields = ["status", "status_reason", "generation", "model_repository", "created_by", "created_at", "updated_at"]
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
                services.pool_delete(user=request.user, pool=pool)
            except PlatformError as exc:
                self.message_user(request, f"{pool.name}: {exc.detail}", messages.ERROR)


from deployments import rollout_admin  # noqa: E402,F401  (endpoints and rollouts)
