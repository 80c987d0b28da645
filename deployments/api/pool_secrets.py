"""REST API v1: Kubernetes Secrets bound to teams' pools (deployments/pool_policy.py). Team
members read their teams' bindings (which Secrets a pool may name); platform admins bind
and unbind them."""

from django.contrib.auth.models import Group
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.response import Response

from deployments.models import PoolSecretBinding
from deployments.selectors import pools as selectors
from deployments.services import pool_secrets as services
from kernel.serializers import StrictCharField, StrictModelSerializer
from kernel.viewsets import TeamScopedViewSet


class PoolSecretBindingSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="name", read_only=True)
    created_by = serializers.StringRelatedField()

    class Meta:
        model = PoolSecretBinding
        fields = ["id", "team", "namespace", "secret_name", "created_by", "created_at"]
        read_only_fields = fields


class PoolSecretBindingCreateSerializer(serializers.Serializer):
    team = serializers.SlugRelatedField(slug_field="name", queryset=Group.objects.all())
    namespace = StrictCharField(
        max_length=63, required=False, allow_blank=True, help_text="One of the team's namespaces; empty: its default."
    )
    secret_name = StrictCharField(
        max_length=253, help_text="A Secret in that namespace (its keys become Triton's environment)."
    )


@extend_schema_view(
    list=extend_schema(summary="Secrets bound to your teams' pools (what repository_secret may name)"),
    retrieve=extend_schema(summary="One binding"),
    create=extend_schema(
        request=PoolSecretBindingCreateSerializer,
        responses={201: PoolSecretBindingSerializer},
        summary="Bind a Secret in a namespace to a team's pools (platform admins)",
    ),
    destroy=extend_schema(responses={204: None}, summary="Unbind a Secret no pool names (platform admins)"),
)
class PoolSecretBindingViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    TeamScopedViewSet,
):
    serializer_class = PoolSecretBindingSerializer
    ordering = ["namespace", "secret_name"]

    def scoped_queryset(self, user):
        return selectors.pool_secret_binding_list(user=user)

    def get_object(self):
        return selectors.pool_secret_binding_get(user=self.request.user, binding_id=self.kwargs["pk"])

    def create(self, request, *args, **kwargs):
        services.require_platform_admin(request.user)  # before the team lookup: no team-name oracle
        payload = PoolSecretBindingCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        binding = services.pool_secret_bind(
            user=request.user, team=data["team"], namespace=data.get("namespace", ""), secret_name=data["secret_name"]
        )
        return Response(PoolSecretBindingSerializer(binding).data, status=status.HTTP_201_CREATED)

    def destroy(self, request, *args, **kwargs):
        services.pool_secret_unbind(user=request.user, binding=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
