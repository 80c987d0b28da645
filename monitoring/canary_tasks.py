"""Celery task of the closed loop (monitoring/canary.py): thin and safe to run twice."""

from celery import shared_task

from monitoring.services import canary


@shared_task(name="monitoring.canary_tick", ignore_result=True, expires=10, soft_time_limit=20, time_limit=30)
def canary_tick(limit: int = 50) -> int:
    """Every ~1 s (beat): judge every rollout whose candidate has traffic, act on the verdict."""
    return len(canary.canary_tick(limit=limit))
