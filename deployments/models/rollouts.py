"""Endpoints and rollouts.

An Endpoint is what clients call on the gateway; it serves a stable artifact from a
pool. A Rollout brings a candidate artifact in through the state machine of
deployments/rollout_machine.py; the gateway's route table is derived from both.
"""

import secrets

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Q

from deployments.rollout_machine import (
    ACTIVE,
    DEFAULT_ON_INCONCLUSIVE,
    DEFAULT_PLAN,
    FULL_BP,
    OnInconclusive,
    Plan,
    Split,
    State,
    Strategy,
    split_for,
)
from registry.models import Artifact

ON_INCONCLUSIVE_CHOICES = [
    (OnInconclusive.ROLLBACK.value, "roll back"),
    (OnInconclusive.PAUSE.value, "pause and alert"),
    (OnInconclusive.PROMOTE.value, "go on (promote) unless a check failed"),
]


def _salt() -> str:
    return secrets.token_hex(8)


class Endpoint(models.Model):
    name = models.SlugField(max_length=64, unique=True, help_text="What clients call: POST /v2/models/{name}/infer.")
    team = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="endpoints")
    pool = models.ForeignKey("deployments.ServingPool", on_delete=models.PROTECT, related_name="endpoints")
    stable_artifact = models.ForeignKey(Artifact, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(
        max_length=8,
        choices=[("tensor", "tensor (KServe v2)"), ("llm", "LLM (OpenAI API)")],
        default="tensor",
        db_default="tensor",  # rows written by older code (and migration tests) are tensor endpoints
        help_text="tensor: POST /v2/models/{name}/infer; llm: the OpenAI API (/v1/chat/completions, model={name}).",
    )
    ttft_slo_ms = models.FloatField(
        null=True,
        blank=True,
        help_text="LLM endpoints: candidate time-to-first-token p99 above this fails the guardrail.",
    )
    itl_slo_ms = models.FloatField(
        null=True,
        blank=True,
        help_text="LLM endpoints: candidate inter-token latency p99 above this fails the guardrail.",
    )
    # LLM endpoints (kind llm): the route table's llm_endpoint settings (gateway/contracts/route_table.schema.json)
    first_token_timeout_ms = models.PositiveIntegerField(
        default=30_000,
        db_default=30_000,
        help_text="LLM: an attempt without a first token by then fails over to the next backend.",
    )
    context_length = models.PositiveIntegerField(
        null=True, blank=True, help_text="LLM: prompt + max_tokens above this is a 400; empty: the stable version's."
    )
    max_tokens_default = models.PositiveIntegerField(
        default=256, db_default=256, help_text="LLM: max_tokens when a request gives none."
    )
    prefix_affinity_chars = models.PositiveIntegerField(
        default=256,
        db_default=256,
        help_text="LLM: prompts sharing this many leading characters go to one replica (0: off).",
    )
    llm_fallbacks = models.JSONField(
        default=list,
        db_default=models.Value([], output_field=models.JSONField()),
        blank=True,
        help_text="LLM: ids of LLM artifacts (of the team) tried in this order after the chosen variant's backends.",
    )
    slo_p99_ms = models.FloatField(default=50.0, help_text="Candidate p99 above this fails the guardrail.")
    slo_error_rate = models.FloatField(default=0.01, help_text="Candidate error rate above this fails the guardrail.")
    psi_threshold = models.FloatField(default=0.25, help_text="Prediction-score PSI (candidate vs stable) guardrail.")
    # Practical significance of a latency difference; None (the default): derived from the p99
    # SLO's headroom over the control's own p99, 10-30 % (monitoring/judge/paired.py margin_for;
    # docs/rollouts.md, "Latency margin").
    latency_margin = models.FloatField(
        null=True,
        blank=True,
        default=None,
        help_text="Candidate latency may exceed the control's by this fraction; empty: derived from the SLO's headroom.",
    )
    sticky_header = models.CharField(max_length=100, default="X-User-Id")
    timeout_ms = models.PositiveIntegerField(default=1000)
    # Closed by default: the gateway lets through only the team's inference keys scoped to
    # it. Public: anyone who reaches the gateway may call it (e.g. the seeded demo).
    public = models.BooleanField(default=False, help_text="Callable without an inference key.")
    capture_share = models.FloatField(
        default=0.0,
        db_default=0.0,
        help_text="Share (0-1) of served requests whose inputs are logged with their exposure for training "
        "data (docs/experiments.md); the gateway caps captures per second whatever the share.",
    )
    on_inconclusive = models.CharField(
        max_length=16,
        default=DEFAULT_ON_INCONCLUSIVE,
        db_default=DEFAULT_ON_INCONCLUSIVE,
        choices=ON_INCONCLUSIVE_CHOICES,
        help_text="What a rollout step does when its deadline passes without a conclusive verdict (a rollout may override it).",
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        permissions = [("read_routes", "Can read the gateway route table")]
        constraints = [
            models.CheckConstraint(
                condition=Q(slo_error_rate__gte=0, slo_error_rate__lte=1), name="endpoint_slo_error_rate_0_1"
            ),
            models.CheckConstraint(condition=Q(slo_p99_ms__gt=0), name="endpoint_slo_p99_positive"),
            models.CheckConstraint(
                condition=Q(latency_margin__gte=0, latency_margin__lte=5), name="endpoint_latency_margin_0_5"
            ),
            models.CheckConstraint(
                condition=Q(capture_share__gte=0, capture_share__lte=1), name="endpoint_capture_share_0_1"
            ),
        ]

    def __str__(self):
        return self.name


class Rollout(models.Model):
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="rollouts")
    candidate_artifact = models.ForeignKey(Artifact, on_delete=models.PROTECT, related_name="+")
    # The stable when the rollout started (what it rolls back to).
    baseline_artifact = models.ForeignKey(Artifact, on_delete=models.PROTECT, related_name="+")
    strategy = models.CharField(max_length=16, choices=[(s.value, s.value) for s in Strategy], default=Strategy.CANARY)
    steps_bp = models.JSONField(
        default=list, help_text="Canary weights in basis points, e.g. [500, 2500, 5000, 10000]."
    )
    shadow_seconds = models.FloatField(default=DEFAULT_PLAN.shadow_seconds)
    shadow_sample_rate = models.FloatField(default=1.0)
    step_min_seconds = models.FloatField(default=DEFAULT_PLAN.step_min_seconds)
    step_min_requests = models.PositiveIntegerField(default=DEFAULT_PLAN.step_min_requests)
    step_deadline_seconds = models.FloatField(default=DEFAULT_PLAN.step_deadline_seconds)
    on_inconclusive = models.CharField(max_length=16, default=DEFAULT_ON_INCONCLUSIVE, choices=ON_INCONCLUSIVE_CHOICES)
    # The fair baseline's Triton name (a fresh copy of the stable artifact with the
    # candidate's share, judged against it); "" when the rollout runs without one.
    baseline_model = models.CharField(max_length=200, blank=True, default="", db_default="")
    promote_grace_seconds = models.FloatField(
        default=30.0, help_text="Promotion holds this long before the old stable is unloaded."
    )
    load_timeout_seconds = models.FloatField(default=300.0)

    state = models.CharField(max_length=16, choices=[(s.value, s.value) for s in State], default=State.PENDING)
    step_index = models.PositiveSmallIntegerField(default=0)
    paused_from = models.CharField(max_length=16, blank=True)
    paused_step_elapsed_s = models.FloatField(null=True, blank=True)
    generation = models.PositiveIntegerField(
        default=1, help_text="Bumped by every transition; fences concurrent writers."
    )
    salt = models.CharField(max_length=32, default=_salt, help_text="Sticky A/B assignment salt.")
    reason = models.TextField(blank=True)

    state_entered_at = models.DateTimeField(null=True, blank=True)
    step_started_at = models.DateTimeField(null=True, blank=True)
    traffic_started_at = models.DateTimeField(null=True, blank=True)
    traffic_stopped_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # At most one rollout in flight per endpoint.
            models.UniqueConstraint(
                fields=["endpoint"],
                condition=Q(state__in=sorted(s.value for s in ACTIVE)),
                name="one_active_rollout_per_endpoint",
            ),
            models.CheckConstraint(
                condition=Q(shadow_sample_rate__gte=0, shadow_sample_rate__lte=1), name="rollout_shadow_rate_0_1"
            ),
        ]

    def __str__(self):
        return f"rollout #{self.pk} of {self.endpoint.name}"

    @property
    def split(self) -> Split:
        """The traffic its state implies now."""
        return split_for(self.state, self.step_index, self.plan, self.paused_from)

    @property
    def plan(self) -> Plan:
        return Plan(
            strategy=Strategy(self.strategy),
            steps_bp=tuple(self.steps_bp) or (FULL_BP,),
            shadow_seconds=self.shadow_seconds,
            step_min_seconds=self.step_min_seconds,
            step_min_requests=self.step_min_requests,
            step_deadline_seconds=self.step_deadline_seconds,
            on_inconclusive=self.on_inconclusive,
            baseline=bool(self.baseline_model),
        )
