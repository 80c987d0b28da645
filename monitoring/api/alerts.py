"""REST API v1 for monitoring's judgements: verdicts, alerts (acknowledge, resolve, notes) and
notification channels (silences: monitoring/api/silences.py)."""

from django.contrib.auth.models import Group
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from kernel.api import created
from kernel.errors import InvalidInput
from kernel.serializers import StrictCharField, StrictModelSerializer
from kernel.viewsets import TeamScopedViewSet
from monitoring.models import (
    Alert,
    AlertStatus,
    NotificationChannel,
    NotificationDelivery,
    Verdict,
    VerdictOutcome,
)
from monitoring.selectors import alerts as alert_selectors
from monitoring.services.alerts import alert_acknowledge, alert_resolve
from monitoring.services.notifications import channel_create, channel_delete
from registry.models import Role
from registry.selectors.teams import team_list


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
        qs = alert_selectors.verdict_list(user=user)
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
    silenced_by = serializers.PrimaryKeyRelatedField(
        read_only=True, help_text="The silence that held this alert's notification back (null: none)."
    )
    notified_with = serializers.PrimaryKeyRelatedField(
        read_only=True, help_text="The alert of the same group whose notification carried this one (null: its own)."
    )

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
            "silenced_by",
            "notified_with",
            "notified_at",
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
        return alert_selectors.alert_list(
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
        return alert_selectors.channel_list(user=user)

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
