"""Monitoring data: the time-series store (raw samples + 1-minute roll-ups), scrape
state, canary verdicts, alerts and their notification deliveries. Data and invariants
only; writes go through monitoring.services.
"""

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models

from deployments import rollout_machine


# === time series =============================================================================
class MetricSample(models.Model):
    """One value of one metric of one endpoint x variant at one time (DESIGN.md contract).

    `team` scopes who may read it (the endpoint's team); null means staff only.
    Counters are stored as the count in the scrape interval that ends at `time`.
    """

    endpoint = models.CharField(max_length=64)
    variant = models.CharField(max_length=64)
    metric = models.CharField(max_length=64)
    time = models.DateTimeField()
    value = models.FloatField()
    team = models.ForeignKey(Group, null=True, blank=True, on_delete=models.CASCADE, related_name="+", db_index=False)

    class Meta:
        indexes = [models.Index(fields=["endpoint", "variant", "metric", "time"], name="sample_series_time_idx")]
        # For the retention sweep (delete by age) without scanning the series index.
        indexes += [models.Index(fields=["time"], name="sample_time_idx")]

    def __str__(self):
        return f"{self.endpoint}/{self.variant} {self.metric}={self.value} @ {self.time:%H:%M:%S}"


class MetricRollup(models.Model):
    """One minute of one series: count, sum, min, max (mean = sum / count)."""

    endpoint = models.CharField(max_length=64)
    variant = models.CharField(max_length=64)
    metric = models.CharField(max_length=64)
    minute = models.DateTimeField()
    count = models.PositiveIntegerField()
    total = models.FloatField()
    minimum = models.FloatField()
    maximum = models.FloatField()
    team = models.ForeignKey(Group, null=True, blank=True, on_delete=models.CASCADE, related_name="+", db_index=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint", "variant", "metric", "minute"], name="rollup_series_minute_uniq"
            )
        ]
        indexes = [models.Index(fields=["minute"], name="rollup_minute_idx")]

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def __str__(self):
        return f"{self.endpoint}/{self.variant} {self.metric} {self.minute:%Y-%m-%d %H:%M} n={self.count}"


class ScrapeState(models.Model):
    """The last scrape of one target: cumulative counters to diff the next scrape against."""

    target = models.CharField(max_length=255, unique=True)
    scraped_at = models.DateTimeField()
    counters = models.JSONField(default=dict)
    ok = models.BooleanField(default=True)
    error = models.TextField(blank=True)
    failing_since = models.DateTimeField(null=True, blank=True)  # first failed scrape of the current outage
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"{self.target} @ {self.scraped_at:%H:%M:%S}"


# === canary judge ============================================================================
class VerdictOutcome(models.TextChoices):
    """The outcomes of deployments.rollout_machine.Verdict, as the column's choices."""

    PASS = rollout_machine.Verdict.PASS.value, "Pass"
    FAIL = rollout_machine.Verdict.FAIL.value, "Fail"
    INCONCLUSIVE = rollout_machine.Verdict.INCONCLUSIVE.value, "Inconclusive"


class Verdict(models.Model):
    """The judge's decision at one tick of a canary step, with the evidence per check."""

    rollout_id = models.PositiveBigIntegerField(db_index=True)
    endpoint = models.CharField(max_length=64)
    step = models.IntegerField(null=True, blank=True)
    stable_variant = models.CharField(max_length=64)
    candidate_variant = models.CharField(max_length=64)
    outcome = models.CharField(max_length=16, choices=VerdictOutcome.choices)
    reason = models.TextField(blank=True)
    # [{"name", "kind": "guardrail"|"test", "outcome", "samples", "statistic", "p_value"|"e_value", "threshold", ...}]
    checks = models.JSONField(default=list)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    team = models.ForeignKey(Group, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["rollout_id", "-created_at"], name="verdict_rollout_idx")]

    def __str__(self):
        return f"rollout {self.rollout_id} {self.endpoint}: {self.outcome}"


# === alerts ==================================================================================
class Severity(models.TextChoices):
    INFO = "info", "Info"
    WARNING = "warning", "Warning"
    CRITICAL = "critical", "Critical"

    @classmethod
    def rank(cls, severity: str) -> int:
        return [cls.INFO, cls.WARNING, cls.CRITICAL].index(severity)


class AlertStatus(models.TextChoices):
    OPEN = "open", "Open"
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
    RESOLVED = "resolved", "Resolved"


class Silence(models.Model):
    """Alertmanager's silence, scoped to one team: while it is active (starts_at <= now <
    ends_at) an alert of that team whose endpoint, kind ("check") and severity match is
    still recorded and shown ("silenced by ..."), but not notified. An empty matcher
    matches any value; at least one matcher is set (monitoring.services.silences)."""

    team = models.ForeignKey(Group, null=True, blank=True, on_delete=models.CASCADE, related_name="silences")
    endpoint = models.CharField(max_length=64, blank=True, help_text="Exact endpoint name; empty: any.")
    # The "check" matcher (what the API and the page call it): the alert's kind, e.g. rollout_rolled_back.
    kind = models.CharField(max_length=64, blank=True, help_text="Exact alert kind (check); empty: any.")
    severity = models.CharField(max_length=16, choices=Severity.choices, blank=True, help_text="Empty: any.")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    comment = models.TextField(help_text="Why: what is being done about it.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expired_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-ends_at", "-id"]
        indexes = [models.Index(fields=["team", "ends_at"], name="silence_team_ends_idx")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ends_at__gt=models.F("starts_at")), name="silence_ends_after_start"
            )
        ]

    def __str__(self):
        return f"silence #{self.pk} ({self.matchers_text()})"

    def matchers_text(self) -> str:
        parts = [
            f"{name}={value}"
            for name, value in (("endpoint", self.endpoint), ("check", self.kind), ("severity", self.severity))
            if value
        ]
        return ", ".join(parts) or "everything"

    def is_active(self, now) -> bool:
        return self.starts_at <= now < self.ends_at

    @property
    def active(self) -> bool:
        from django.utils import timezone

        return self.is_active(timezone.now())

    def matches(self, alert) -> bool:
        """The one matching rule (the selector's query says the same in SQL)."""
        return (
            self.team_id == alert.team_id
            and self.endpoint in ("", alert.endpoint)
            and self.kind in ("", alert.kind)
            and self.severity in ("", alert.severity)
        )


class Alert(models.Model):
    """Something a person should know; one row per rollout and kind (raising again
    bumps `occurrences` instead of making a second alert). A notification round of an
    alert is either sent on its own, carried by an earlier alert of the same group
    (`notified_with`: team, endpoint and kind within MONITORING_ALERT_GROUP_WINDOW_S),
    or not sent because a silence matched (`silenced_by`)."""

    team = models.ForeignKey(Group, null=True, blank=True, on_delete=models.CASCADE, related_name="alerts")
    severity = models.CharField(max_length=16, choices=Severity.choices, default=Severity.WARNING)
    kind = models.CharField(max_length=64, help_text="What happened, e.g. canary_rollback, guardrail_p99.")
    endpoint = models.CharField(max_length=64, blank=True)
    rollout_id = models.PositiveBigIntegerField(null=True, blank=True)
    reason = models.TextField()
    evidence = models.JSONField(default=dict, blank=True)
    links = models.JSONField(default=dict, blank=True, help_text='{"label": "url"}')
    status = models.CharField(max_length=16, choices=AlertStatus.choices, default=AlertStatus.OPEN)
    dedupe_key = models.CharField(max_length=200, unique=True)
    occurrences = models.PositiveIntegerField(default=1)
    # Bumped each time the alert (re)opens: one notification round per value.
    notify_round = models.PositiveIntegerField(default=1)
    first_seen = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField()
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    silenced_by = models.ForeignKey(Silence, null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts")
    # When its own notification of the current round goes out (may be ahead: the end of its group's window).
    notified_at = models.DateTimeField(null=True, blank=True)
    notified_with = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="carried")

    class Meta:
        ordering = ["-last_seen", "-id"]
        indexes = [
            models.Index(fields=["status", "team"], name="alert_status_team_idx"),
            models.Index(fields=["team", "endpoint", "kind", "-notified_at"], name="alert_group_idx"),
        ]

    @property
    def group_key(self) -> str:
        """Alerts with the same key inside the group window go out as one notification."""
        return f"{self.team_id or '-'}:{self.endpoint or '-'}:{self.kind}"

    def __str__(self):
        return f"[{self.severity}] {self.endpoint or 'platform'}: {self.kind}"


class ChannelKind(models.TextChoices):
    WEBHOOK = "webhook", "Webhook (JSON, Slack-compatible)"
    EMAIL = "email", "Email"


class NotificationChannel(models.Model):
    """Where a team's alerts go (the dashboard banner needs no channel). A channel with
    no team receives every team's alerts."""

    team = models.ForeignKey(
        Group, null=True, blank=True, on_delete=models.CASCADE, related_name="notification_channels"
    )
    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    target = models.CharField(max_length=500, help_text="Webhook URL or e-mail address.")
    min_severity = models.CharField(max_length=16, choices=Severity.choices, default=Severity.WARNING)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__name", "kind", "target"]
        constraints = [models.UniqueConstraint(fields=["team", "kind", "target"], name="channel_team_kind_target_uniq")]

    def __str__(self):
        return f"{self.kind}:{self.target}"

    def clean(self):
        """The admin form's check: a webhook that would reach inside is refused (the API
        refuses the same in monitoring.services.notifications.channel_create)."""
        from django.core.exceptions import ValidationError

        from kernel.outbound import OutboundRefused, Unresolvable, vet_url

        if self.kind == ChannelKind.WEBHOOK:
            try:
                vet_url(self.target)
            except Unresolvable:
                pass  # nothing to judge yet; every delivery vets it again
            except OutboundRefused as exc:
                raise ValidationError({"target": str(exc)}) from None


class DeliveryStatus(models.TextChoices):
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"  # this attempt failed; a retry may follow
    GAVE_UP = "gave_up", "Gave up"  # the last allowed attempt failed


class NotificationDelivery(models.Model):
    """One attempt to deliver one alert round to one channel target (every try is a row)."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="deliveries")
    notify_round = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    target = models.CharField(max_length=500)
    attempt = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices)
    response_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.FloatField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["alert", "notify_round", "kind", "target"], name="delivery_alert_round_idx")]
        verbose_name_plural = "notification deliveries"

    def __str__(self):
        return f"alert {self.alert_id} -> {self.kind}:{self.target} #{self.attempt} {self.status}"
