"""Admin console for endpoints and rollouts; actions call the same services as the API
and the dashboard (imported by deployments/admin.py)."""

from django.contrib import admin, messages

from config.errors import PlatformError
from deployments.services import rollouts as services
from deployments.models import Endpoint, Rollout


@admin.register(Endpoint)
class EndpointAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "pool", "stable_artifact", "slo_p99_ms", "slo_error_rate", "updated_at"]
    list_filter = ["team", "pool"]
    search_fields = ["name"]
    readonly_fields = ["name", "team", "pool", "stable_artifact", "created_by", "created_at", "updated_at"]

    def has_add_permission(self, request):
        return False  # endpoints are created through the API or the dashboard (the service loads the stable)

    def save_model(self, request, obj, form, change):
        services.endpoint_update(user=request.user, endpoint=obj, **{f: getattr(obj, f) for f in services.ENDPOINT_FIELDS})


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
    list_display = ["id", "endpoint", "candidate_artifact", "state", "step_index", "generation", "created_by", "created_at", "finished_at"]
    list_filter = ["state", "strategy", "endpoint"]
    search_fields = ["endpoint__name", "reason"]
    readonly_fields = [f.name for f in Rollout._meta.fields]
    actions = [
        _action(services.rollout_promote, "promote"), _action(services.rollout_pause, "pause"),
        _action(services.rollout_resume, "resume"), _action(services.rollout_rollback, "roll back"),
    ]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
