"""Inference keys: the credentials clients send to the gateway to call a team's endpoints.

A key belongs to a team and is scoped to all of the team's endpoints (also the ones made
later) or to a chosen few. The secret is shown once, at creation; only its SHA-256 (hex)
and a short display prefix are stored (the secret is a random 256-bit token, so a fast
hash is enough: nobody can guess their way to a preimage). Revoking sets revoked_at; a
revoked key leaves the gateway's route table. Data and invariants only; writes go
through deployments.services.keys.
"""

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Q

SECRET_PREFIX = "mpk_"  # recognisable in logs and by secret scanners: "modelplane key"
DISPLAY_PREFIX_LENGTH = 12  # "mpk_" + 8 random characters: enough to tell keys apart, never to use one


class InferenceKey(models.Model):
    team = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="inference_keys")
    name = models.CharField(max_length=100, help_text="What the key is for, e.g. 'ads-ranker-prod'.")
    prefix = models.CharField(max_length=16, help_text="The secret's first characters, shown to tell keys apart.")
    sha256 = models.CharField(max_length=64, unique=True, help_text="Hex SHA-256 of the secret's UTF-8 bytes.")
    all_endpoints = models.BooleanField(
        default=True, help_text="Scoped to every endpoint of the team, also later ones."
    )
    endpoints = models.ManyToManyField(
        "deployments.Endpoint",
        blank=True,
        related_name="inference_keys",
        help_text="The endpoints it may call when not all_endpoints.",
    )
    # Limits the gateway enforces per key (null: none).
    rate_per_s = models.FloatField(
        null=True, blank=True, default=100.0, help_text="Sustained requests per second (token bucket)."
    )
    burst = models.FloatField(
        null=True, blank=True, default=200.0, help_text="Requests allowed at once above the rate."
    )
    max_concurrency = models.PositiveIntegerField(
        null=True, blank=True, default=64, help_text="Requests in flight at once."
    )
    tokens_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="LLM tokens (prompt + completion) per minute; empty: no token limit."
    )
    max_streams = models.PositiveIntegerField(
        null=True, blank=True, help_text="LLM requests (streamed or not) in flight at once; empty: no limit."
    )
    token_budgets = models.JSONField(
        default=list,
        blank=True,
        help_text="LLM token budgets over windows from a second to a month: [{tokens, window_s}] "
        "(deployments/services/keys.py checks them).",
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["team__name", "-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "name"], condition=Q(revoked_at__isnull=True), name="uniq_active_key_name_per_team"
            ),
            models.CheckConstraint(
                condition=Q(rate_per_s__isnull=True) | Q(rate_per_s__gt=0, rate_per_s__lte=1_000_000),
                name="key_rate_positive",
            ),
            models.CheckConstraint(
                condition=Q(burst__isnull=True) | Q(burst__gte=1, burst__lte=1_000_000), name="key_burst_ge_1"
            ),
            models.CheckConstraint(
                condition=Q(max_concurrency__isnull=True) | Q(max_concurrency__gte=1, max_concurrency__lte=1_000_000),
                name="key_concurrency_ge_1",
            ),
            models.CheckConstraint(
                condition=Q(tokens_per_minute__isnull=True)
                | Q(tokens_per_minute__gte=1, tokens_per_minute__lte=1_000_000_000),
                name="key_tokens_per_minute_bounds",
            ),
            models.CheckConstraint(
                condition=Q(max_streams__isnull=True) | Q(max_streams__gte=1, max_streams__lte=1_000_000),
                name="key_max_streams_bounds",
            ),
        ]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    @property
    def gateway_id(self) -> str:
        """The key's id in the route table and in the gateway's metric labels."""
        return f"k{self.pk}"

    @property
    def active(self) -> bool:
        return self.revoked_at is None
