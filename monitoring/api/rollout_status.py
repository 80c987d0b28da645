"""GET /api/v1/rollouts/{id}/status/: everything a live view of a rollout shows, in one
request (the rollout with its traffic, its transitions, the judge's latest verdicts, and
who rolled it back), with an ETag so a poller's unchanged answer is a bodiless 304.

Monitoring serves it (not deployments) because it joins the judge's verdicts to the
rollout, and monitoring sits above deployments. `modelplane rollout watch` polls it: one
request per poll, `If-None-Match` with the last ETag; the access log leaves conditional
polls out (config/log_filters.py)."""

from __future__ import annotations

import hashlib
import json

from django.core.serializers.json import DjangoJSONEncoder
from django.utils.http import parse_etags
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from deployments.api.rollouts import RolloutSerializer
from deployments.rollout_machine import State
from deployments.selectors.rollouts import rollout_get
from monitoring.selectors.alerts import verdict_list
from registry.selectors.events import event_list

EVENTS_SHOWN = 100  # a rollout has a handful of transitions per step; the last ones are kept
VERDICTS_SHOWN = 10  # the judge writes one a second while the candidate gets traffic


def rolled_back_by(event) -> dict | None:
    """Who sent the rollout to rolling_back: a person (abort / rollback), the judge (a
    failed verdict, or the plan's policy at a step deadline without a conclusive one), or
    the platform (e.g. a plan that no longer holds)."""
    if event is None:
        return None
    if event.actor_id:
        kind = "person"
    elif (event.data or {}).get("verdict") is not None or (event.data or {}).get("outcome"):
        kind = "judge"
    else:
        kind = "platform"
    return {
        "kind": kind,
        "actor": str(event.actor) if event.actor_id else None,
        "reason": event.reason,
        "time": event.time,
    }


def rollout_status(*, user, rollout) -> dict:
    events = event_list(user=user, object_type=rollout._meta.label_lower, object_id=rollout.pk)
    recent = list(events.order_by("-time", "-id")[:EVENTS_SHOWN])
    back = events.filter(to_state=State.ROLLING_BACK).order_by("-time", "-id").first()
    verdicts = list(verdict_list(user=user, rollout_id=rollout.pk).order_by("-id")[:VERDICTS_SHOWN])
    return {
        "rollout": RolloutSerializer(rollout).data,
        "events": [
            {
                "id": e.id,
                "time": e.time,
                "actor": str(e.actor) if e.actor_id else None,
                "action": e.action,
                "from_state": e.from_state,
                "to_state": e.to_state,
                "reason": e.reason,
            }
            for e in reversed(recent)
        ],
        "verdicts": [
            {
                "id": v.id,
                "step": v.step,
                "outcome": v.outcome,
                "reason": v.reason,
                "checks": [
                    {"name": c.get("name"), "kind": c.get("kind"), "outcome": c.get("outcome")}
                    for c in (v.checks or [])
                    if isinstance(c, dict)
                ],
                "created_at": v.created_at,
            }
            for v in reversed(verdicts)
        ],
        "rolled_back_by": rolled_back_by(back),
    }


class RolloutStatusView(APIView):
    @extend_schema(
        responses={200: dict, 304: OpenApiResponse(description="Not modified (If-None-Match matched the ETag)")},
        summary="A rollout's live status in one request: rollout, transitions, the judge's latest verdicts, "
        "who rolled it back (ETag / If-None-Match)",
    )
    def get(self, request, pk: int):
        body = rollout_status(user=request.user, rollout=rollout_get(user=request.user, rollout_id=pk))
        canonical = json.dumps(body, cls=DjangoJSONEncoder, sort_keys=True, separators=(",", ":"))
        etag = f'"{hashlib.sha256(canonical.encode()).hexdigest()[:32]}"'
        offered = parse_etags(request.headers.get("If-None-Match", ""))
        response = Response(status=304) if etag in offered or offered == ["*"] else Response(body)
        response["ETag"] = etag
        response["Cache-Control"] = "no-cache"  # a cache may keep it, but asks again every time
        return response
