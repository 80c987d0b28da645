"""The judge's verdicts on a rollout, for the rollout's status (GET /api/v1/rollouts/{id}/status/).

The verdicts are monitoring's, and deployments imports nothing above it (the layers
contract): monitoring registers a source here at start-up (monitoring/apps.py), as
experiments registers its route overlays. A source takes (user, rollout id, limit) and
returns the latest verdicts the user may see, newest first, each a dict {id, step,
outcome, reason, checks: [{name, kind, outcome}], created_at}. Without one, none."""

from __future__ import annotations

from collections.abc import Callable

_sources: list[Callable] = []


def register_verdict_source(source: Callable) -> None:
    if source not in _sources:
        _sources.append(source)


def latest_verdicts(*, user, rollout_id: int, limit: int) -> list[dict]:
    out: list[dict] = []
    for source in _sources:
        out.extend(source(user=user, rollout_id=rollout_id, limit=limit))
    return out
