"""Online experiments: the experiment and its arms, the exposure log and feedback events.

Exposures and feedback are the embedded store (PostgreSQL, written in batches with COPY-
sized bulk inserts; see experiments/store.py for the interface a large user swaps
for Kafka + ClickHouse). Feedback carries its outcome (attributed / late / unknown) so
nothing is dropped silently and the page can show every count.
"""

import secrets

from django.conf import settings
from django.db import models
from django.db.models import Q

from registry.models import Artifact


def _salt() -> str:
    return secrets.token_hex(8)


def _token_key() -> str:
    return secrets.token_hex(32)


class ExperimentState(models.TextChoices):
    DRAFT = "draft"
    RUNNING = "running"
    DECIDED = "decided"
    SHIPPING = "shipping"  # the winner's rollout runs; shipped once it succeeded
    SHIPPED = "shipped"
    STOPPED = "stopped"


class Experiment(models.Model):
    endpoint = models.ForeignKey("deployments.Endpoint", on_delete=models.CASCADE, related_name="+")
    name = models.SlugField(max_length=64)
    hypothesis = models.TextField(blank=True)
    unit_header = models.CharField(
        max_length=100,
        default="X-User-Id",
        help_text="The unit of randomisation: the sticky header the gateway hashes.",
    )
    salt = models.CharField(max_length=32, default=_salt)
    primary_metric = models.CharField(max_length=32, default="ctr")
    secondary_metrics = models.JSONField(default=list, blank=True)
    baseline_rate = models.FloatField(default=0.1, help_text="Expected control CTR, for planning.")
    exposures_per_unit = models.FloatField(default=1.0, help_text="Expected exposures per unit, for planning.")
    mde = models.FloatField(default=0.05, help_text="Minimum detectable relative effect, e.g. 0.05 = +5 %.")
    power = models.FloatField(default=0.8)
    alpha = models.FloatField(default=0.05)
    srm_alpha = models.FloatField(default=0.001)
    attribution_window_s = models.PositiveIntegerField(default=3600)
    guardrail_psi = models.BooleanField(
        default=True,
        help_text="Judge the arms' prediction-score PSI against the control as a guardrail (the endpoint's "
        "threshold). Off when the candidate is meant to predict differently, e.g. a control with "
        "random weights: PSI is then shown, never failed.",
    )
    feedback_tokens = models.BooleanField(
        default=False,
        help_text="Accept feedback that cites a signed exposure token (the gateway's X-Exposure-Token reply "
        "header) without an inference key. Off: feedback needs a key of the endpoint's team, public endpoint or not.",
    )
    token_key = models.CharField(max_length=64, default=_token_key, editable=False)
    planned_units_per_arm = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=16, choices=ExperimentState.choices, default=ExperimentState.DRAFT)
    decision = models.CharField(max_length=16, blank=True)
    winner = models.ForeignKey("experiments.Arm", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    evidence = models.JSONField(default=dict, blank=True)
    history = models.JSONField(default=list, blank=True, help_text="Lift and band per analysis tick (the chart).")
    mlflow_run_id = models.CharField(max_length=64, blank=True)
    rollout_id = models.PositiveIntegerField(null=True, blank=True)
    analyzed_at = models.DateTimeField(null=True, blank=True, help_text="The last analysis tick that finished.")
    analysis_error = models.TextField(blank=True, help_text="Why the last analysis tick failed (empty: it did not).")
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint"], condition=Q(state="running"), name="one_running_experiment_per_endpoint"
            ),
            models.CheckConstraint(condition=Q(alpha__gt=0, alpha__lt=1), name="experiment_alpha_0_1"),
            models.CheckConstraint(condition=Q(power__gt=0, power__lt=1), name="experiment_power_0_1"),
        ]

    def __str__(self):  # the audit trail's name of it: the endpoint by name, as people know it
        return f"{self.name} on {self.endpoint.name}"

    @property
    def public_id(self) -> str:
        return f"exp-{self.pk}"


class Arm(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="arms")
    name = models.CharField(max_length=128)  # the variant name the gateway reports (registry.names.variant_name)
    artifact = models.ForeignKey(Artifact, on_delete=models.PROTECT, related_name="+")
    is_control = models.BooleanField(default=False)
    allocation_bp = models.PositiveIntegerField(help_text="Share of the experiment's units in basis points.")

    class Meta:
        ordering = ["-is_control", "pk"]
        constraints = [models.UniqueConstraint(fields=["experiment", "name"], name="arm_name_unique")]

    def __str__(self):
        return self.name


class Exposure(models.Model):
    """One request served in an experiment (written by the exposure ingest, batched)."""

    request_id = models.CharField(max_length=128)  # unique per experiment: one tenant's ids never meet another's
    # indexed by the (experiment, request_id) constraint, which leads with it
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="+", db_index=False)
    arm = models.ForeignKey(Arm, on_delete=models.CASCADE, related_name="+")
    unit_key = models.CharField(max_length=200)
    time = models.DateTimeField()
    score = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["experiment", "request_id"], name="exposure_request_per_experiment")
        ]
        indexes = [
            models.Index(fields=["experiment", "arm", "unit_key"], name="exposure_unit_idx"),
            models.Index(fields=["experiment", "unit_key", "-time"], name="exposure_unit_time_idx"),
        ]


class FeedbackKind(models.TextChoices):
    CLICK = "click"
    CONVERSION = "conversion"
    VALUE = "value"


class FeedbackStatus(models.TextChoices):
    ATTRIBUTED = "attributed"
    LATE = "late"  # the exposure is known, the event came after the attribution window
    UNKNOWN = "unknown"  # no exposure with that request id (or unit in a running experiment)
    # cites an exposure token past what one exposure carries (a replay), or of an experiment that ended
    REFUSED = "refused"


class Feedback(models.Model):
    event_id = models.CharField(max_length=128, help_text="Idempotency per team: a retried event is stored once.")
    # Feedback is an append-only log written at 20k+ rows/s: its references are checked by the
    # statement that attributes it (it joins the exposure's experiment and arm; the team is the
    # endpoint's), not by a trigger per row (db_constraint=False halves the insert's cost; the ORM
    # still cascades deletes). No index of its own for team: (team, event_id) leads with it.
    team = models.ForeignKey(
        "auth.Group", on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    endpoint_name = models.CharField(
        max_length=64, help_text="Where the batch was sent (unknown events are counted here)."
    )
    kind = models.CharField(max_length=16, choices=FeedbackKind.choices)
    value = models.FloatField(default=1.0)
    request_id = models.CharField(max_length=128, blank=True)
    unit_key = models.CharField(max_length=200, blank=True)
    time = models.DateTimeField()
    received_at = models.DateTimeField(auto_now_add=True)
    status = models.CharField(max_length=16, choices=FeedbackStatus.choices)
    experiment = models.ForeignKey(  # indexed by feedback_arm_idx, which leads with it
        Experiment,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    arm = models.ForeignKey(Arm, null=True, blank=True, on_delete=models.CASCADE, related_name="+", db_constraint=False)
    exposure_unit = models.CharField(max_length=200, blank=True)
    via_token = models.BooleanField(
        default=False, help_text="Sent citing an exposure token: counted against what one exposure carries."
    )

    class Meta:
        verbose_name = verbose_name_plural = "feedback"  # a mass noun: the admin said "Feedbacks"
        constraints = [models.UniqueConstraint(fields=["team", "event_id"], name="feedback_event_per_team")]
        indexes = [
            models.Index(fields=["received_at"], name="feedback_received_idx"),  # retention
            models.Index(fields=["experiment", "arm", "status"], name="feedback_arm_idx"),
            models.Index(fields=["endpoint_name", "status", "time"], name="feedback_endpoint_idx"),
            # what an exposure's token has carried so far (only token rows pay for it)
            models.Index(fields=["experiment", "request_id"], condition=Q(via_token=True), name="feedback_token_idx"),
        ]


class DeadLetter(models.Model):
    """A stream message the ingest could not handle: kept with its reason instead of
    blocking the stream (the entry is acknowledged), counted and alerted."""

    stream = models.CharField(max_length=64)
    entry_id = models.CharField(max_length=64)
    reason = models.CharField(max_length=500)
    payload = models.TextField(blank=True, help_text="The entry's first 4 KiB, to see what it was.")
    endpoint_name = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["created_at"], name="deadletter_created_idx")]

    def __str__(self):
        return f"{self.stream} {self.entry_id}: {self.reason[:60]}"
