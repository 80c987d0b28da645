"""Alerts an experiment raises about itself (not its arms' guardrails: services/guardrails.py):
a stream entry quarantined in the dead-letter store, an analysis tick that failed. Through
monitoring's alert service, the one way alerts are raised (webhook, email, banner; deduplicated
per endpoint and kind while open). The import contracts in pyproject.toml name this seam."""

from __future__ import annotations

from django.urls import reverse

from monitoring.services.alerts import alert_raise


def dead_letter_alert(*, stream: str, entry_id: str, reason: str, endpoint_name: str = "") -> None:
    alert_raise(
        kind="experiment_dead_letter",
        severity="warning",
        reason=f"{stream} entry {entry_id} quarantined (dead letter): {reason}"[:4000],
        endpoint=endpoint_name,
        evidence={"stream": stream, "entry_id": entry_id, "reason": reason[:500]},
    )


def analysis_failed_alert(*, experiment, reason: str) -> None:
    alert_raise(
        kind="experiment_analysis_failed",
        severity="warning",
        reason=f"experiment {experiment.public_id} on {experiment.endpoint.name}: analysis failed: {reason}"[:4000],
        endpoint=experiment.endpoint.name,
        team=experiment.endpoint.team,
        evidence={"experiment": experiment.public_id, "error": reason[:2000]},
        links={"experiment": reverse("experiments:online-detail", args=[experiment.pk])},
    )
