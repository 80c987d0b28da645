"""The rollout actions added for the CLI's verbs, as mixins of the viewsets in
deployments/api/rollouts.py: GET /rollouts/{id}/status/ (everything a live view shows, in
one request, with an ETag: a bodiless 304 on If-None-Match while nothing changed),
POST /rollouts/{id}/retry/ and POST /endpoints/{name}/undo/ (new rollouts started from an
old one: deployments/services/rollout_restarts.py). A viewset using them names its rollout
serializer in `rollout_serializer` (and documents retry's and undo's 201 with it)."""

import hashlib
import json

from django.core.serializers.json import DjangoJSONEncoder
from django.utils.http import parse_etags
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from deployments.rollout_machine import FULL_BP, UNDO_PLAN
from deployments.selectors.rollout_status import rollout_status
from deployments.services import rollout_restarts
from kernel.api import created
from kernel.serializers import StrictCharField


class RolloutStatusSerializer(serializers.Serializer):
    """The shape of GET /rollouts/{id}/status/ (documentation: the view builds the body)."""

    rollout = serializers.DictField(help_text="The rollout, as GET /api/v1/rollouts/{id}/ gives it.")
    events = serializers.ListField(
        child=serializers.DictField(),
        help_text="Transitions, oldest first: id, time, actor, action, from_state, to_state, reason (the last 100).",
    )
    verdicts = serializers.ListField(
        child=serializers.DictField(),
        help_text="The judge's latest verdicts, oldest first: id, step, outcome, reason, checks [{name, kind, "
        "outcome}], created_at (the last 10).",
    )
    rolled_back_by = serializers.DictField(
        allow_null=True,
        help_text='Who rolled it back: {"kind": "person"|"judge"|"platform", "actor", "reason", "time"}; null if '
        "it never went to rolling_back.",
    )


class RolloutRetrySerializer(serializers.Serializer):
    reason = StrictCharField(required=False, allow_blank=True, default="", max_length=2000)


class EndpointUndoSerializer(serializers.Serializer):
    reason = StrictCharField(required=False, allow_blank=True, default="", max_length=2000)
    steps_bp = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=FULL_BP),
        required=False,
        help_text="Default [10000]: one step, all traffic to the previous stable once it is READY.",
    )
    step_min_seconds = serializers.FloatField(min_value=0, max_value=86400, default=UNDO_PLAN.step_min_seconds)
    step_min_requests = serializers.IntegerField(min_value=0, max_value=10**9, default=UNDO_PLAN.step_min_requests)
    promote_grace_seconds = serializers.FloatField(min_value=0, max_value=86400, default=0.0)


class RolloutStatusRetryMixin:
    @extend_schema(
        responses={200: RolloutStatusSerializer, 304: OpenApiResponse(description="Not modified (If-None-Match)")},
        summary="A rollout's live status in one request: the rollout, its transitions, the judge's latest "
        "verdicts, who rolled it back (ETag; 304 on If-None-Match)",
    )
    @action(detail=True, methods=["get"])
    def status(self, request, pk=None):
        rollout = self.get_object()
        body = {"rollout": self.rollout_serializer(rollout).data, **rollout_status(user=request.user, rollout=rollout)}
        # the ETag is a digest of the body: any change a watcher would see makes a new one
        canonical = json.dumps(body, cls=DjangoJSONEncoder, sort_keys=True, separators=(",", ":"))
        etag = f'"{hashlib.sha256(canonical.encode()).hexdigest()[:32]}"'
        offered = [tag.removeprefix("W/") for tag in parse_etags(request.headers.get("If-None-Match", ""))]
        response = Response(status=304) if etag in offered or offered == ["*"] else Response(body)  # weak comparison
        response["ETag"] = etag
        response["Cache-Control"] = "no-cache"
        return response

    @extend_schema(
        request=RolloutRetrySerializer,
        summary="Retry a rolled back or failed rollout: a new rollout with its candidate and plan "
        "(409 not_retryable otherwise)",
    )
    @action(detail=True, methods=["post"])
    def retry(self, request, pk=None):
        payload = RolloutRetrySerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        rollout = rollout_restarts.rollout_retry(
            user=request.user, rollout=self.get_object(), reason=payload.validated_data["reason"]
        )
        return created(self.rollout_serializer(rollout).data)


class EndpointUndoMixin:
    @extend_schema(
        request=EndpointUndoSerializer,
        summary="Undo: a rollout back to the stable the endpoint had before its last promotion "
        "(409 no_previous_stable when there is none)",
    )
    @action(detail=True, methods=["post"])
    def undo(self, request, name=None):
        endpoint = self.get_object()
        payload = EndpointUndoSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        rollout = rollout_restarts.rollout_undo(user=request.user, endpoint=endpoint, **payload.validated_data)
        return created(self.rollout_serializer(rollout).data)
