"""Releases: one flow from a build request to a canary of what it built.

A Release starts a build of a model version with a tune against the endpoint's latency SLO
(registry/factory/tune/), then a canary of the tuned variant (or the variant itself when
the tune found nothing better) against the endpoint's stable, with the fair baseline, and
ends when that rollout does: promoted, rolled back, or failed (a build that failed, a
rollout that could not start). Driven by deployments/services/releases.py.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

from registry.models import Artifact, Build, ModelVersion


class ReleaseState(models.TextChoices):
    BUILDING = "building", "Building and tuning"
    CANARY = "canary", "Canary"
    PROMOTED = "promoted", "Promoted"
    ROLLED_BACK = "rolled_back", "Rolled back"
    FAILED = "failed", "Failed"

    @classmethod
    def active(cls) -> tuple[str, ...]:
        return (cls.BUILDING.value, cls.CANARY.value)


class Release(models.Model):
    endpoint = models.ForeignKey("deployments.Endpoint", on_delete=models.CASCADE, related_name="releases")
    version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="+")
    variant = models.CharField(max_length=32, help_text="The variant built and tuned, e.g. onnx-int8.")
    slo_p99_ms = models.FloatField(help_text="The p99 the tune searched under (the endpoint's SLO unless given).")
    build = models.ForeignKey(Build, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    candidate_artifact = models.ForeignKey(Artifact, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    rollout = models.ForeignKey(
        "deployments.Rollout", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # rollout_start's plan options (steps_bp, step_min_seconds, …), checked when the release starts.
    rollout_options = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=ReleaseState.choices, default=ReleaseState.BUILDING)
    reason = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint"],
                condition=Q(state__in=["building", "canary"]),
                name="one_active_release_per_endpoint",
            ),
            models.CheckConstraint(condition=Q(slo_p99_ms__gt=0), name="release_slo_p99_positive"),
        ]

    def __str__(self):
        return f"release #{self.pk} of {self.endpoint.name}"
