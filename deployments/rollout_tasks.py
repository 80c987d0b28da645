"""Celery tasks for rollouts: thin, named, safe to run twice or concurrently."""

from celery import shared_task

from deployments.selectors import rollouts as rollout_selectors
from deployments.services import rollouts as rollout_services


@shared_task(name="deployments.rollouts_reconcile", ignore_result=True, expires=10, soft_time_limit=20, time_limit=30)
def rollouts_reconcile(limit: int = 50) -> int:
    """Every ~1 s (beat): one reconcile step for a bounded batch of active rollouts."""
    ids = rollout_selectors.rollouts_to_reconcile(limit=limit)
    for rollout_id in ids:
        rollout_services.rollout_reconcile(rollout_id=rollout_id)
    return len(ids)
