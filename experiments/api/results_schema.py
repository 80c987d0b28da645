"""The shape of GET /api/v1/experiments/{id}/results/ for the OpenAPI schema (documentation
only: the selector experiments.selectors.online.experiment_results builds the body, and
tests/experiments/test_online_api.py checks the two agree key for key)."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from experiments.analysis import ArmDecision, GuardrailStatus

DECISIONS = [d.value for d in ArmDecision]
GUARDRAIL_STATUS = [s.value for s in GuardrailStatus]

CHECK_SCHEMA = {
    "type": "object",
    "description": "One check of the canary judge (monitoring/judge/verdict.py) with its evidence: samples, statistic, "
    "p-value or e-value, threshold, `progress` {have, need, unit} and `eta_seconds`.",
    "properties": {
        "name": {"type": "string", "enum": ["p99_slo", "error_slo", "psi", "error_rate", "latency", "latency_tail"]},
        "kind": {"type": "string", "enum": ["guardrail", "test"]},
        "outcome": {"type": "string", "enum": ["pass", "fail", "inconclusive", "skipped"]},
    },
    "required": ["name", "kind", "outcome"],
    "additionalProperties": True,
}
POINT_SCHEMA = {
    "type": "object",
    "description": "One analysis tick: `t`, `units` (the smallest arm's), and per candidate arm [lift, lower, upper].",
    "properties": {"t": {"type": "string", "format": "date-time"}, "units": {"type": "integer"}},
    "additionalProperties": {
        "type": "array",
        "items": {"type": "number", "nullable": True},
        "minItems": 3,
        "maxItems": 3,
    },
}


@extend_schema_field(CHECK_SCHEMA)
class CheckField(serializers.JSONField):
    pass


@extend_schema_field(POINT_SCHEMA)
class PointField(serializers.JSONField):
    pass


class ArmResultSerializer(serializers.Serializer):
    units = serializers.IntegerField()
    exposures = serializers.IntegerField()
    clicks = serializers.IntegerField()
    ctr = serializers.FloatField(allow_null=True)
    ctr_se = serializers.FloatField(allow_null=True)
    conversions = serializers.IntegerField()
    value = serializers.FloatField(allow_null=True, help_text="Sum of value events (null if not finite).")


class CandidateResultSerializer(serializers.Serializer):
    lift = serializers.FloatField(allow_null=True, help_text="Relative lift of CTR over the control (0.05 = +5 %).")
    lower = serializers.FloatField(allow_null=True, help_text="Always-valid lower bound of the lift.")
    upper = serializers.FloatField(allow_null=True)
    fixed_lower = serializers.FloatField(allow_null=True, help_text="Fixed-horizon bound, for comparison only.")
    fixed_upper = serializers.FloatField(allow_null=True)
    var = serializers.FloatField(allow_null=True, help_text="Variance of the log CTR ratio.")
    decision = serializers.ChoiceField(choices=DECISIONS)
    guardrails = serializers.ChoiceField(choices=GUARDRAIL_STATUS, help_text="The arm's machine-guardrail status.")


class ArmGuardrailsSerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=GUARDRAIL_STATUS,
        help_text="fail: a check failed (the experiment stops for harm); pending: a check "
        "lacks data or a breach is not yet sustained; pass: every check passed.",
    )
    reason = serializers.CharField(
        help_text="The failing checks with their figures, or what the pending ones wait for."
    )
    checks = serializers.ListField(child=CheckField())
    judged_at = serializers.DateTimeField(required=False, help_text="The analysis tick (absent before the first).")


class SrmSerializer(serializers.Serializer):
    e_value = serializers.FloatField()
    threshold = serializers.FloatField()
    flagged = serializers.BooleanField()


class ProgressSerializer(serializers.Serializer):
    have = serializers.IntegerField()
    need = serializers.IntegerField()
    unit = serializers.CharField()


class FeedbackCountsSerializer(serializers.Serializer):
    attributed = serializers.IntegerField()
    late = serializers.IntegerField()
    unknown = serializers.IntegerField()
    refused = serializers.IntegerField(
        required=False, help_text="Cited an exposure token past what one exposure carries, or of an ended experiment."
    )


class ShipSerializer(serializers.Serializer):
    rollout = serializers.IntegerField(help_text="The ship's one-step rollout (100 %) of the winner.")
    state = serializers.CharField(help_text="started while it ships; then the rollout's end state.")
    reason = serializers.CharField(required=False, help_text="Why the rollout ended (absent while it ships).")
    waiting = serializers.CharField(
        required=False,
        help_text='While shipping: "waiting for traffic: ..." when the rollout\'s step waits for requests (done '
        "after 30 s without one), else empty.",
    )


class ExperimentResultsSerializer(serializers.Serializer):
    experiment = serializers.CharField()
    state = serializers.CharField()
    decision = serializers.ChoiceField(choices=DECISIONS, allow_null=True)
    winner = serializers.CharField(allow_null=True)
    arms = serializers.DictField(child=ArmResultSerializer(), help_text="Per arm (variant name).")
    candidates = serializers.DictField(child=CandidateResultSerializer(), help_text="Per candidate arm.")
    srm = SrmSerializer()
    progress = ProgressSerializer()
    feedback = FeedbackCountsSerializer()
    history = serializers.ListField(child=PointField())
    guardrails = serializers.DictField(
        child=ArmGuardrailsSerializer(),
        help_text="Per candidate arm: its machine guardrails against the control at the last analysis tick.",
    )
    rule = serializers.CharField()
    ship = ShipSerializer(allow_null=True, help_text="Null until Ship was pressed.")
