"""Version aliases (MLflow's @champion / @challenger) and model URIs.

/api/v1/models/{name}/aliases/ GET lists, POST {"alias", "version"} sets or moves one;
/api/v1/models/{name}/aliases/{alias}/ GET, PUT {"version"} moves, DELETE removes;
/api/v1/versions/resolve/?uri=models:/name@alias (or models:/name/3) is the version a URI
names. Another team's model answers as an unknown one (404)."""

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers
from rest_framework.response import Response

from kernel.api import created
from kernel.errors import InvalidInput, NotFound
from kernel.serializers import StrictCharField, StrictModelSerializer
from kernel.viewsets import TeamScopedViewSet
from registry.api.catalog import VersionSerializer
from registry.models import VersionAlias
from registry.selectors import aliases as selectors
from registry.selectors.catalog import model_get, version_list
from registry.services import aliases as services


class AliasSerializer(StrictModelSerializer):
    alias = StrictCharField(source="name", read_only=True)
    model = StrictCharField(source="model.name", read_only=True)
    version = serializers.IntegerField(source="version.version", read_only=True)
    version_id = serializers.IntegerField(read_only=True)
    uri = serializers.SerializerMethodField()
    updated_by = serializers.StringRelatedField()

    class Meta:
        model = VersionAlias
        fields = ["alias", "model", "version", "version_id", "uri", "updated_by", "updated_at"]
        read_only_fields = fields

    def get_uri(self, row) -> str:
        return f"models:/{row.model.name}@{row.name}"


class AliasSetSerializer(serializers.Serializer):
    alias = StrictCharField(max_length=64, help_text="e.g. champion: lower-case letters, digits, - and _.")
    version = serializers.IntegerField(min_value=1, max_value=10**9, help_text="The version number to point at.")


class AliasMoveSerializer(serializers.Serializer):
    version = serializers.IntegerField(min_value=1, max_value=10**9, help_text="The version number to point at.")


def _version(user, model, number: int):
    version = version_list(user=user, model=model).filter(version=number).first()
    if version is None:
        raise InvalidInput(
            f"version: model {model.name!r} has no version {number}.", code="version_not_found", field="version"
        )
    return version


class AliasViewSet(mixins.ListModelMixin, TeamScopedViewSet):
    serializer_class = AliasSerializer
    pagination_class = None
    lookup_url_kwarg = "alias"  # DRF's OPTIONS and get_object look for it

    def get_object(self):
        return self._row()

    def get_model(self):
        return model_get(user=self.request.user, name=self.kwargs["model_name"])

    def scoped_queryset(self, user):
        return selectors.alias_list(model=self.get_model()).select_related("model")

    def _row(self):
        row = self.get_queryset().filter(name=self.kwargs["alias"]).first()
        if row is None:
            raise NotFound(f"Model {self.kwargs['model_name']!r} has no alias {self.kwargs['alias'][:80]!r}.")
        return row

    @extend_schema(summary="Aliases of a model (models:/name@alias)")
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=AliasSetSerializer, responses={201: AliasSerializer}, summary="Set or move an alias")
    def create(self, request, *args, **kwargs):
        model = self.get_model()
        payload = AliasSetSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        row = services.alias_set(
            user=request.user, model=model, name=data["alias"], version=_version(request.user, model, data["version"])
        )
        return created(AliasSerializer(row).data)

    @extend_schema(responses={200: AliasSerializer}, summary="One alias")
    def retrieve(self, request, *args, **kwargs):
        return Response(AliasSerializer(self._row()).data)

    @extend_schema(request=AliasMoveSerializer, responses={200: AliasSerializer}, summary="Move an alias")
    def update(self, request, *args, **kwargs):
        model = self.get_model()
        payload = AliasMoveSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        version = _version(request.user, model, payload.validated_data["version"])
        row = services.alias_set(user=request.user, model=model, name=self.kwargs["alias"], version=version)
        return Response(AliasSerializer(row).data)

    @extend_schema(request=None, responses={204: None}, summary="Delete an alias")
    def destroy(self, request, *args, **kwargs):
        services.alias_delete(user=request.user, model=self.get_model(), name=self.kwargs["alias"])
        return Response(status=204)


URI = OpenApiParameter("uri", str, required=True, description="models:/<model>@<alias> or models:/<model>/<version>")


class VersionResolveViewSet(TeamScopedViewSet):
    serializer_class = VersionSerializer

    def scoped_queryset(self, user):
        return version_list(user=user)

    @extend_schema(parameters=[URI], responses={200: VersionSerializer}, summary="The version a model URI names")
    def resolve(self, request, *args, **kwargs):
        version = selectors.version_resolve(user=request.user, uri=request.query_params.get("uri", ""))
        return Response(VersionSerializer(version, context=self.get_serializer_context()).data)


urlpatterns = [
    path(
        "models/<slug:model_name>/aliases/",
        AliasViewSet.as_view({"get": "list", "post": "create"}),
        name="model-aliases",
    ),
    path(
        "models/<slug:model_name>/aliases/<str:alias>/",
        AliasViewSet.as_view({"get": "retrieve", "put": "update", "delete": "destroy"}),
        name="model-alias",
    ),
    path("versions/resolve/", VersionResolveViewSet.as_view({"get": "resolve"}), name="version-resolve"),
]
