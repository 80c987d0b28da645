"""/api/v1/rollout-forecast/ — before a rollout starts: the endpoint's observed traffic,
the steps that fit it, and for a plan (the suggested one, or the steps given) each
step's expected time to a verdict and a warning for each step that cannot conclude
before its deadline (monitoring/judge/forecast.py). The endpoint page shows the same."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from deployments.rollout_machine import DEFAULT_PLAN, Plan
from deployments.selectors.rollouts import endpoint_get
from kernel.errors import InvalidInput
from kernel.serializers import QuerySerializer, StrictCharField
from monitoring.judge.forecast import forecast, suggest_steps
from monitoring.selectors import metrics as metric_selectors
from monitoring.selectors.judge_config import judge_config_for


class ForecastQuerySerializer(QuerySerializer):
    endpoint = StrictCharField(help_text="The endpoint's name.")
    steps_bp = StrictCharField(
        required=False,
        help_text="Comma-separated weights in basis points, e.g. 1000,2500,10000; "
        "default: the steps suggested for the observed traffic.",
    )
    rate_rps = serializers.FloatField(
        required=False,
        min_value=0.001,
        max_value=1e7,
        help_text="Assume this traffic instead of the observed one (requests/s).",
    )
    step_min_seconds = serializers.FloatField(required=False, min_value=0, default=DEFAULT_PLAN.step_min_seconds)
    step_min_requests = serializers.IntegerField(required=False, min_value=0, default=DEFAULT_PLAN.step_min_requests)
    step_deadline_seconds = serializers.FloatField(
        required=False, min_value=1, default=DEFAULT_PLAN.step_deadline_seconds
    )
    fair_baseline = serializers.BooleanField(required=False, default=True)

    def validate_steps_bp(self, value):
        try:
            steps = [int(part) for part in value.split(",") if part.strip()]
        except ValueError:
            raise serializers.ValidationError(
                "give comma-separated whole numbers of basis points, e.g. 1000,2500,10000."
            ) from None
        if Plan.steps_problem(steps):
            raise serializers.ValidationError(f"steps must be {Plan.STEPS_RULE}.")
        return steps


def endpoint_forecast(
    *,
    user,
    name: str,
    steps_bp=None,
    rate_rps=None,
    step_min_seconds=DEFAULT_PLAN.step_min_seconds,
    step_min_requests=DEFAULT_PLAN.step_min_requests,
    step_deadline_seconds=DEFAULT_PLAN.step_deadline_seconds,
    fair_baseline=True,
) -> dict:
    endpoint = endpoint_get(user=user, name=name)  # another team's endpoint: 404
    observed = metric_selectors.endpoint_request_rate(endpoint=endpoint.name)
    rate = rate_rps or observed
    config = judge_config_for(endpoint)
    plan = dict(
        step_min_seconds=step_min_seconds,
        step_min_requests=step_min_requests,
        step_deadline_seconds=step_deadline_seconds,
        baseline=fair_baseline,
    )
    suggested = suggest_steps(rate, config, **plan)
    steps = steps_bp or suggested
    return {
        "endpoint": endpoint.name,
        "observed_rate_rps": None if observed is None else round(observed, 3),
        "suggested_steps_bp": suggested,
        "steps_bp": steps,
        **forecast(rate, steps, config, **plan),
    }


class RolloutForecastView(APIView):
    schema_error_codes = ("404", "503")  # an endpoint that is not yours (or does not exist); Prometheus down

    @extend_schema(
        parameters=[ForecastQuerySerializer],
        responses=OpenApiTypes.OBJECT,
        summary="Expected time to a verdict for each step of a rollout plan, "
        "at the endpoint's traffic (before starting it)",
    )
    def get(self, request):
        query = ForecastQuerySerializer(data=request.query_params)
        if not query.is_valid():
            field, errors = next(iter(query.errors.items()))
            raise InvalidInput(f"{field}: {' '.join(str(e) for e in errors)}", field=field)
        data = dict(query.validated_data)
        return Response(endpoint_forecast(user=request.user, name=data.pop("endpoint"), **data))
