"""Admin console for online experiments; state changes go through the services (actions)."""

from django.contrib import admin, messages

from experiments.models import Arm, DeadLetter, Experiment, Exposure, Feedback
from experiments.services import online as services
from kernel.errors import PlatformError


class ArmInline(admin.TabularInline):
    model = Arm
    extra = 0
    fields = ["name", "artifact", "is_control", "allocation_bp"]
    readonly_fields = fields
    can_delete = False


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = ["name", "endpoint", "state", "decision", "winner", "planned_units_per_arm", "started_at"]
    list_filter = ["state", "decision"]
    search_fields = ["name", "endpoint__name", "hypothesis"]
    readonly_fields = [
        "state",
        "decision",
        "winner",
        "evidence",
        "history",
        "mlflow_run_id",
        "rollout_id",
        "started_at",
        "ended_at",
        "planned_units_per_arm",
        "salt",
        "created_by",
    ]
    inlines = [ArmInline]
    actions = ["start", "stop"]

    def _each(self, request, queryset, service):
        for experiment in queryset:
            try:
                service(user=request.user, experiment=experiment)
            except PlatformError as exc:
                self.message_user(request, f"{experiment.name}: {exc.detail}", messages.ERROR)

    @admin.action(description="Start the selected experiments")
    def start(self, request, queryset):
        self._each(request, queryset, services.experiment_start)

    @admin.action(description="Stop the selected experiments")
    def stop(self, request, queryset):
        self._each(request, queryset, services.experiment_stop)


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Exposure)
class ExposureAdmin(ReadOnly):
    list_display = ["request_id", "experiment", "arm", "unit_key", "time", "score"]
    list_filter = ["experiment"]
    search_fields = ["request_id", "unit_key"]


@admin.register(Feedback)
class FeedbackAdmin(ReadOnly):
    list_display = ["event_id", "endpoint_name", "kind", "status", "request_id", "unit_key", "time"]
    list_filter = ["status", "kind", "endpoint_name"]
    search_fields = ["event_id", "request_id", "unit_key"]


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnly):
    """Stream entries the ingest quarantined (docs/experiments.md): what and why."""

    list_display = ["created_at", "stream", "endpoint_name", "entry_id", "reason"]
    list_filter = ["stream", "endpoint_name"]
    search_fields = ["reason", "entry_id", "endpoint_name"]
