"""REST API v1: the teams you belong to and the audit trail of their objects (read only)."""

from django.contrib.auth.models import Group
from django_filters import rest_framework as filters
from rest_framework import mixins, serializers

from kernel.api import UTCDateTimeFilter
from kernel.serializers import StrictModelSerializer
from kernel.viewsets import TeamScopedViewSet
from registry.models import Event
from registry.selectors.events import event_list
from registry.selectors.teams import team_list, user_role_in


class EventSerializer(StrictModelSerializer):
    actor = serializers.StringRelatedField()
    team = serializers.StringRelatedField()

    class Meta:
        model = Event
        fields = [
            "id",
            "time",
            "actor",
            "team",
            "object_type",
            "object_id",
            "object_repr",
            "action",
            "from_state",
            "to_state",
            "reason",
            "data",
        ]
        read_only_fields = fields


class TeamSerializer(StrictModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Group
        fields = ["id", "name", "role"]

    def get_role(self, team) -> str | None:
        return user_role_in(user=self.context["request"].user, team=team)


class EventFilter(filters.FilterSet):
    object_type = filters.CharFilter()
    object_id = filters.CharFilter()
    action = filters.CharFilter()
    since = UTCDateTimeFilter(field_name="time", lookup_expr="gte")

    class Meta:
        model = Event
        fields = ["object_type", "object_id", "action", "since"]


class EventViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    """/api/v1/events/ — the audit trail of your teams' objects (read only)."""

    serializer_class = EventSerializer
    filterset_class = EventFilter
    ordering_fields = ["time"]
    ordering = ["-time", "-id"]

    def scoped_queryset(self, user):
        return event_list(user=user)


class TeamViewSet(mixins.ListModelMixin, TeamScopedViewSet):
    """/api/v1/teams/ — the teams you belong to, with your role in each."""

    serializer_class = TeamSerializer
    ordering = ["name"]

    def scoped_queryset(self, user):
        return team_list(user=user)
