"""REST API v1 for monitoring: metrics (time series), verdicts, alerts, channels."""

import re
from datetime import UTC, timedelta

from django.contrib.auth.models import Group
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view, inline_serializer
from rest_framework import mixins, permissions, serializers
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from kernel.api import created, to_utc
from kernel.errors import InvalidInput
from kernel.serializers import QuerySerializer, StrictCharField, StrictModelSerializer, StrictRegexField
from kernel.viewsets import TeamScopedViewSet
from monitoring import selectors
from monitoring.models import Alert, AlertStatus, NotificationChannel, NotificationDelivery, Verdict, VerdictOutcome
from monitoring.services.alerts import alert_acknowledge, alert_resolve
from monitoring.services.notifications import channel_create, channel_delete
from monitoring.services.store import score_samples_record
from registry.models import Role
from registry.selectors.teams import team_list

DURATION_RE = re.compile(r"^-?(\d+)([smhd])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
MAX_WINDOW = timedelta(days=31)


def parse_since(value: str, *, field: str = "since"):
    """An ISO 8601 time or a duration back from now ("15m", "2h", "-30s", "1d")."""
    value = (value or "").strip()
    match = DURATION_RE.match(value)
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        delta = timedelta(**{UNITS[unit]: amount})
        if delta > MAX_WINDOW:
            raise InvalidInput(f"{field}: at most {MAX_WINDOW.days} days back.", field=field)
        return timezone.now() - delta
    parsed = parse_datetime(value.replace(" ", "+")) if value else None
    if parsed is None:
        raise InvalidInput(
            f"{field}: give an ISO 8601 time or a duration like 15m, 2h, 1d (got {value!r}).", field=field
        )
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, UTC)
    utc = to_utc(parsed)
    if utc is None:
        raise InvalidInput(f"{field}: {value!r} is out of range in UTC.", field=field)
    return utc


# --- metrics ---------------------------------------------------------------------------------------
class PointSerializer(serializers.Serializer):
    time = serializers.DateTimeField()
    value = serializers.FloatField()


class SeriesSerializer(serializers.Serializer):
    endpoint = StrictCharField()
    variant = StrictCharField()
    metric = StrictCharField()
    resolution = serializers.ChoiceField(choices=["raw", "1m"])
    points = PointSerializer(many=True)


class MetricsQuerySerializer(QuerySerializer):
    endpoint = StrictRegexField(r"^[A-Za-z0-9_.:-]{1,64}$", required=False, help_text="Endpoint name.")
    variant = StrictRegexField(r"^[A-Za-z0-9_.:-]{1,64}$", required=False)
    metric = StrictCharField(
        required=False, help_text="One metric or a comma-separated list, e.g. request_rate,latency_p99_ms."
    )
    since = StrictCharField(
        required=False, default="15m", help_text="ISO 8601 time or duration back from now (15m, 2h, 1d)."
    )
    until = StrictCharField(required=False)
    resolution = serializers.ChoiceField(choices=["auto", "raw", "1m"], default="auto")

    def validate(self, attrs):
        if not attrs.get("endpoint") and not attrs.get("metric"):
            raise serializers.ValidationError({"endpoint": "Give an endpoint or a metric (or both)."})
        metrics = [m.strip() for m in attrs.get("metric", "").split(",") if m.strip()]
        if any(len(m) > 64 for m in metrics) or len(metrics) > 20:
            raise serializers.ValidationError({"metric": "At most 20 metric names of up to 64 characters."})
        attrs["metrics"] = metrics or None
        return attrs


class MetricsView(APIView):
    """/api/v1/metrics/ — your teams' series from the judge's source (store; Prometheus: 503 if down)."""

    @extend_schema(
        parameters=[MetricsQuerySerializer],
        responses={
            200: inline_serializer(
                "MetricsResponse", {"since": serializers.DateTimeField(), "series": SeriesSerializer(many=True)}
            )
        },
        summary="Time series per endpoint x variant x metric",
    )
    def get(self, request):
        query = MetricsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        since = parse_since(data["since"])
        until = parse_since(data["until"], field="until") if data.get("until") else None
        if until and until <= since:
            raise InvalidInput("until: must be after since.", field="until")
        series = selectors.metric_series(
            user=request.user,
            endpoint=data.get("endpoint"),
            variant=data.get("variant"),
            metrics=data["metrics"],
            since=since,
            until=until,
            resolution=data["resolution"],
        )
        return Response({"since": since, "series": SeriesSerializer(series, many=True).data})


class ScoreSamplesSerializer(serializers.Serializer):
    endpoint = StrictRegexField(r"^[A-Za-z0-9_.:-]{1,64}$")
    variant = StrictRegexField(r"^[A-Za-z0-9_.:-]{1,64}$")
    scores = serializers.ListField(child=serializers.FloatField(), min_length=1, max_length=100_000)
    team = serializers.SlugRelatedField(
        slug_field="name", queryset=Group.objects.all(), required=False, allow_null=True
    )


class ScoreSamplesView(APIView):
    """/api/v1/score-samples/ — a sampled copy of a variant's prediction scores (platform
    components only: staff tokens)."""

    permission_classes = [permissions.IsAdminUser]

    @extend_schema(
        request=ScoreSamplesSerializer,
        responses={
            201: inline_serializer("ScoreBins", {"bins": serializers.ListField(child=serializers.IntegerField())})
        },
        summary="Record sampled prediction scores (binned) for drift/PSI",
    )
    def post(self, request):
        payload = ScoreSamplesSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        team = data.get("team")
        bins = score_samples_record(
            endpoint=data["endpoint"], variant=data["variant"], scores=data["scores"], team_id=team.pk if team else None
        )
        return created({"bins": bins})


# --- verdicts -----------------------------------------------------------------------------------------
class VerdictSerializer(StrictModelSerializer):
    class Meta:
        model = Verdict
        fields = [
            "id",
            "rollout_id",
            "endpoint",
            "step",
            "stable_variant",
            "candidate_variant",
            "outcome",
            "reason",
            "checks",
            "window_start",
            "window_end",
            "created_at",
        ]
        read_only_fields = fields


@extend_schema_view(
    list=extend_schema(
        summary="Canary verdicts with their evidence",
        parameters=[
            OpenApiParameter("rollout", int),
            OpenApiParameter("endpoint", str),
            OpenApiParameter("outcome", str, enum=VerdictOutcome.values),
        ],
    ),
    retrieve=extend_schema(summary="One verdict"),
)
class VerdictViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    serializer_class = VerdictSerializer
    ordering = ["-created_at", "-id"]
    ordering_fields = ["created_at"]

    def scoped_queryset(self, user):
        qs = selectors.verdict_list(user=user)
        params = self.request.query_params
        if params.get("rollout"):
            if not params["rollout"].isdigit():
                raise InvalidInput("rollout: must be an integer id.", field="rollout")
            qs = qs.filter(rollout_id=int(params["rollout"]))
        if params.get("endpoint"):
            qs = qs.filter(endpoint=params["endpoint"])
        if params.get("outcome"):
            if params["outcome"] not in VerdictOutcome.values:
                raise InvalidInput(f"outcome: one of {', '.join(VerdictOutcome.values)}.", field="outcome")
            qs = qs.filter(outcome=params["outcome"])
        return qs


# --- alerts ------------------------------------------------------------------------------------------------
class DeliverySerializer(StrictModelSerializer):
    class Meta:
        model = NotificationDelivery
        fields = [
            "id",
            "notify_round",
            "kind",
            "target",
            "attempt",
            "status",
            "response_code",
            "error",
            "duration_ms",
            "created_at",
        ]
        read_only_fields = fields


class AlertSerializer(StrictModelSerializer):
    team = serializers.StringRelatedField()
    acknowledged_by = serializers.StringRelatedField()
    deliveries = DeliverySerializer(many=True, read_only=True)

    class Meta:
        model = Alert
        fields = [
            "id",
            "severity",
            "kind",
            "endpoint",
            "rollout_id",
            "team",
            "reason",
            "evidence",
            "links",
            "status",
            "occurrences",
            "first_seen",
            "last_seen",
            "acknowledged_by",
            "acknowledged_at",
            "resolved_at",
            "deliveries",
        ]
        read_only_fields = fields


class NoteSerializer(serializers.Serializer):
    note = StrictCharField(required=False, allow_blank=True, max_length=2000)


@extend_schema_view(
    list=extend_schema(
        summary="Alerts of your teams",
        parameters=[
            OpenApiParameter("status", str, enum=AlertStatus.values),
            OpenApiParameter("endpoint", str),
            OpenApiParameter("rollout", int),
        ],
    ),
    retrieve=extend_schema(summary="One alert with its notification attempts"),
)
class AlertViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    serializer_class = AlertSerializer
    ordering = ["-last_seen", "-id"]
    ordering_fields = ["last_seen", "first_seen"]

    def scoped_queryset(self, user):
        params = self.request.query_params
        status = params.get("status")
        if status and status not in AlertStatus.values:
            raise InvalidInput(f"status: one of {', '.join(AlertStatus.values)}.", field="status")
        rollout = params.get("rollout")
        if rollout and not rollout.isdigit():
            raise InvalidInput("rollout: must be an integer id.", field="rollout")
        return selectors.alert_list(
            user=user, status=status, endpoint=params.get("endpoint"), rollout_id=int(rollout) if rollout else None
        ).prefetch_related("deliveries")

    @extend_schema(request=NoteSerializer, responses={200: AlertSerializer}, summary="Acknowledge an open alert")
    @action(detail=True, methods=["post"])
    def acknowledge(self, request, pk=None):
        note = NoteSerializer(data=request.data)
        note.is_valid(raise_exception=True)
        alert = alert_acknowledge(user=request.user, alert=self.get_object(), note=note.validated_data.get("note", ""))
        return Response(self.get_serializer(self.get_queryset().get(pk=alert.pk)).data)

    @extend_schema(request=NoteSerializer, responses={200: AlertSerializer}, summary="Resolve an alert")
    @action(detail=True, methods=["post"])
    def resolve(self, request, pk=None):
        note = NoteSerializer(data=request.data)
        note.is_valid(raise_exception=True)
        alert = alert_resolve(user=request.user, alert=self.get_object(), note=note.validated_data.get("note", ""))
        return Response(self.get_serializer(self.get_queryset().get(pk=alert.pk)).data)


# --- notification channels -------------------------------------------------------------------------------------
class ChannelSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="name", queryset=Group.objects.all())

    class Meta:
        model = NotificationChannel
        fields = ["id", "team", "kind", "target", "min_severity", "enabled", "created_at"]
        read_only_fields = ["id", "created_at"]
        validators = []  # uniqueness is the service's (409 channel_exists)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            self.fields["team"].queryset = team_list(user=request.user, min_role=Role.ADMIN)


@extend_schema_view(
    list=extend_schema(summary="Notification channels of your teams"),
    create=extend_schema(summary="Add a webhook or e-mail channel (team admins)"),
    destroy=extend_schema(summary="Remove a channel (team admins)"),
)
class ChannelViewSet(mixins.ListModelMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin, TeamScopedViewSet):
    serializer_class = ChannelSerializer
    ordering = ["id"]

    def scoped_queryset(self, user):
        return selectors.channel_list(user=user)

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        channel = channel_create(
            user=request.user,
            team=data["team"],
            kind=data["kind"],
            target=data["target"],
            min_severity=data.get("min_severity", "warning"),
            enabled=data.get("enabled", True),
        )
        return created(self.get_serializer(channel).data)

    def perform_destroy(self, instance):
        channel_delete(user=self.request.user, channel=instance)
