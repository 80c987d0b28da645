"""REST API v1 for silences: create, list, expire, delete (monitoring/services/silences.py)."""

from datetime import timedelta

from django.contrib.auth.models import Group
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from kernel.api import created
from kernel.serializers import StrictCharField, StrictModelSerializer
from kernel.viewsets import TeamScopedViewSet
from monitoring.models import Severity, Silence
from monitoring.selectors import silences as silence_selectors
from monitoring.services import silences as silence_services
from registry.models import Role
from registry.selectors.teams import team_list


# --- silences ---------------------------------------------------------------------------------------------------
class SilenceSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="name", queryset=Group.objects.all())
    check = StrictCharField(
        source="kind",
        required=False,
        allow_blank=True,
        max_length=64,
        help_text="The alert kind to match exactly (e.g. rollout_rolled_back); empty: any.",
    )
    severity = serializers.ChoiceField(choices=["", *Severity.values], required=False, allow_blank=True)
    duration_s = serializers.IntegerField(
        write_only=True, required=False, min_value=60, max_value=30 * 86400, help_text="Instead of ends_at."
    )
    state = serializers.SerializerMethodField()
    created_by = serializers.StringRelatedField()
    expired_by = serializers.StringRelatedField()

    class Meta:
        model = Silence
        fields = [
            "id",
            "team",
            "endpoint",
            "check",
            "severity",
            "starts_at",
            "ends_at",
            "duration_s",
            "comment",
            "state",
            "created_by",
            "created_at",
            "expired_by",
        ]
        read_only_fields = ["id", "state", "created_by", "created_at", "expired_by"]
        extra_kwargs = {
            "ends_at": {"required": False},
            "starts_at": {"required": False},
            "comment": {"max_length": 2000},
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            self.fields["team"].queryset = team_list(user=request.user, min_role=Role.DEVELOPER)

    def get_state(self, silence) -> str:
        return silence_selectors.silence_state(silence)


@extend_schema_view(
    list=extend_schema(
        summary="Silences of your teams", parameters=[OpenApiParameter("state", str, enum=silence_selectors.STATES)]
    ),
    retrieve=extend_schema(summary="One silence"),
    create=extend_schema(summary="Silence matching alerts' notifications for a while (team developers)"),
    destroy=extend_schema(summary="Delete a silence (team developers)"),
)
class SilenceViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    TeamScopedViewSet,
):
    serializer_class = SilenceSerializer
    ordering = ["-ends_at", "-id"]

    def scoped_queryset(self, user):
        return silence_selectors.silence_list(user=user, state=self.request.query_params.get("state") or None)

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        silence = silence_services.silence_create(
            user=request.user,
            team=data["team"],
            endpoint=data.get("endpoint", ""),
            kind=data.get("kind", ""),
            severity=data.get("severity", ""),
            starts_at=data.get("starts_at"),
            ends_at=data.get("ends_at"),
            duration=timedelta(seconds=data["duration_s"]) if "duration_s" in data else None,
            comment=data.get("comment", ""),
        )
        return created(self.get_serializer(silence).data)

    @extend_schema(request=None, responses={200: SilenceSerializer}, summary="Expire a silence now")
    @action(detail=True, methods=["post"])
    def expire(self, request, pk=None):
        silence = silence_services.silence_expire(user=request.user, silence=self.get_object())
        return Response(self.get_serializer(silence).data)

    def perform_destroy(self, instance):
        silence_services.silence_delete(user=self.request.user, silence=instance)
