"""Admin console for monitoring; actions call the same services as the API."""

from django.contrib import admin, messages

from kernel.admin import ReadOnlyAdmin
from kernel.errors import PlatformError
from monitoring.models import (
    Alert,
    MetricRollup,
    MetricSample,
    NotificationChannel,
    NotificationDelivery,
    ScrapeState,
    Silence,
    Verdict,
)
from monitoring.services.alerts import alert_acknowledge, alert_resolve
from monitoring.services.silences import silence_expire


@admin.register(MetricSample)
class MetricSampleAdmin(ReadOnlyAdmin):
    list_display = ["time", "endpoint", "variant", "metric", "value", "team"]
    list_filter = ["metric"]
    search_fields = ["endpoint", "variant", "metric"]
    date_hierarchy = "time"
    show_full_result_count = False


@admin.register(MetricRollup)
class MetricRollupAdmin(ReadOnlyAdmin):
    list_display = ["minute", "endpoint", "variant", "metric", "count", "minimum", "maximum"]
    search_fields = ["endpoint", "variant", "metric"]
    show_full_result_count = False


@admin.register(ScrapeState)
class ScrapeStateAdmin(ReadOnlyAdmin):
    list_display = ["target", "scraped_at", "ok", "error"]
    list_filter = ["ok"]


@admin.register(Verdict)
class VerdictAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "rollout_id", "endpoint", "step", "candidate_variant", "outcome", "reason"]
    list_filter = ["outcome"]
    search_fields = ["endpoint", "reason"]


class DeliveryInline(admin.TabularInline):
    model = NotificationDelivery
    fields = ["created_at", "notify_round", "kind", "target", "attempt", "status", "response_code", "error"]
    readonly_fields = fields
    extra = 0
    can_delete = False


def _run(modeladmin, request, queryset, service, label):
    done = 0
    for alert in queryset:
        try:
            service(user=request.user, alert=alert, note="admin console")
            done += 1
        except PlatformError as exc:
            modeladmin.message_user(request, f"{alert}: {exc.detail}", messages.WARNING)
    modeladmin.message_user(request, f"{done} alert(s) {label}.")


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ["last_seen", "severity", "endpoint", "rollout_id", "kind", "status", "occurrences", "team"]
    list_filter = ["status", "severity", "kind"]
    search_fields = ["endpoint", "reason", "dedupe_key"]
    readonly_fields = [f.name for f in Alert._meta.fields]
    inlines = [DeliveryInline]
    actions = ["acknowledge", "resolve"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Acknowledge selected alerts")
    def acknowledge(self, request, queryset):
        _run(self, request, queryset, alert_acknowledge, "acknowledged")

    @admin.action(description="Resolve selected alerts")
    def resolve(self, request, queryset):
        _run(self, request, queryset, alert_resolve, "resolved")


@admin.register(NotificationChannel)
class NotificationChannelAdmin(admin.ModelAdmin):
    list_display = ["team", "kind", "target", "min_severity", "enabled"]
    list_filter = ["kind", "enabled"]
    search_fields = ["target", "team__name"]


@admin.register(NotificationDelivery)
class NotificationDeliveryAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "alert", "kind", "target", "attempt", "status", "response_code"]
    list_filter = ["status", "kind"]


@admin.register(Silence)
class SilenceAdmin(ReadOnlyAdmin):
    """Made on the dashboard or through the API (the service checks the matchers and the
    role); here they are read and expired."""

    list_display = ["id", "team", "endpoint", "kind", "severity", "starts_at", "ends_at", "created_by", "comment"]
    list_filter = ["severity"]
    search_fields = ["endpoint", "kind", "comment", "team__name"]
    actions = ["expire"]

    @admin.action(description="Expire selected silences now")
    def expire(self, request, queryset):
        done = 0
        for silence in queryset:
            try:
                silence_expire(user=request.user, silence=silence)
                done += 1
            except PlatformError as exc:
                self.message_user(request, f"{silence}: {exc.detail}", messages.WARNING)
        self.message_user(request, f"{done} silence(s) expired.")
