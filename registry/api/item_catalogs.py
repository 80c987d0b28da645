"""REST API v1 of item catalogs (what generative recommenders' semantic ids name), thin over
registry/services/item_catalogs.py:

- /api/v1/item-catalogs/ (list, create) and /api/v1/item-catalogs/{name}/ (read): a team's
  catalogs with their semantic-id shape (levels x codes_per_level).
- /api/v1/item-catalogs/{name}/versions/ (list, create) and .../versions/{n}/ (read): a new
  version from an NPZ upload (multipart `file`, never unpickled): item_id [n] with
  semantic_id [n, levels], or with embedding [n, dim] and `encode_with` (a generative
  recommender version's id, whose codebook encodes them); `base` (a version number) keeps
  that version's items and adds these.
Another team's catalog is a 404 like an unknown one.
"""

from django.urls import path
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, parsers, serializers
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from kernel.api import created
from kernel.parsers import StrictJSONParser
from kernel.serializers import StrictCharField, StrictModelSerializer
from kernel.viewsets import TeamScopedViewSet
from registry.api.catalog import _check_request_size
from registry.models import ItemCatalog, ItemCatalogVersion, Role
from registry.parsers import StrictMultiPartParser
from registry.selectors import item_catalogs as selectors
from registry.selectors.catalog import version_get
from registry.selectors.teams import team_list
from registry.services import item_catalogs as services


class ItemCatalogSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="name", read_only=True)
    version_count = serializers.IntegerField(read_only=True)
    latest_version = serializers.IntegerField(read_only=True, allow_null=True)
    created_by = serializers.StringRelatedField()

    class Meta:
        model = ItemCatalog
        fields = [
            "name",
            "description",
            "team",
            "levels",
            "codes_per_level",
            "version_count",
            "latest_version",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields


class ItemCatalogCreateSerializer(serializers.Serializer):
    name = StrictCharField(max_length=64)
    team = StrictCharField(max_length=150, help_text="One of your teams (you need its developer role).")
    levels = serializers.IntegerField(help_text="Codes per semantic id (1-8).")
    codes_per_level = serializers.IntegerField(help_text="Distinct codes at each level (2-4096).")
    description = StrictCharField(required=False, allow_blank=True, max_length=2000)

    def validate_team(self, value: str):
        request = self.context.get("request")
        team = team_list(user=request.user, min_role=Role.DEVELOPER).filter(name=value).first() if request else None
        if team is None:
            raise serializers.ValidationError(f"You develop in no team named {value[:150]!r}.", code="team_not_found")
        return team


class ItemCatalogVersionSerializer(StrictModelSerializer):
    catalog = StrictCharField(source="catalog.name", read_only=True)
    parent = serializers.IntegerField(source="parent.version", read_only=True, allow_null=True, default=None)
    created_by = serializers.StringRelatedField()

    class Meta:
        model = ItemCatalogVersion
        fields = ["catalog", "version", "items", "sha256", "parent", "codebook_sha256", "created_by", "created_at"]
        read_only_fields = fields


class ItemCatalogVersionCreateSerializer(serializers.Serializer):
    file = serializers.FileField(
        help_text="NPZ (numpy.savez; never unpickled): item_id [n] int64 and semantic_id [n, levels] int, "
        "or item_id and embedding [n, dim] float with encode_with."
    )
    base = serializers.IntegerField(
        required=False, min_value=1, help_text="A version number whose items the new version keeps (then adds these)."
    )
    encode_with = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="Id of a generative recommender version whose codebook encodes embeddings.",
    )


@extend_schema_view(
    list=extend_schema(summary="Item catalogs of your teams"),
    retrieve=extend_schema(summary="One item catalog"),
    create=extend_schema(
        request=ItemCatalogCreateSerializer, responses={201: ItemCatalogSerializer}, summary="Create an item catalog"
    ),
)
class ItemCatalogViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, TeamScopedViewSet):
    serializer_class = ItemCatalogSerializer
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9][a-z0-9_-]*"
    ordering = ["name"]
    parser_classes = [StrictJSONParser]

    def scoped_queryset(self, user):
        return selectors.item_catalog_list(user=user)

    def create(self, request, *args, **kwargs):
        payload = ItemCatalogCreateSerializer(data=request.data, context=self.get_serializer_context())
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        catalog = services.item_catalog_create(
            user=request.user,
            team=data["team"],
            name=data["name"],
            levels=data["levels"],
            codes_per_level=data["codes_per_level"],
            description=data.get("description", ""),
        )
        return created(self.get_serializer(self.get_queryset().get(pk=catalog.pk)).data)


@extend_schema_view(
    list=extend_schema(summary="Versions of an item catalog"),
    retrieve=extend_schema(summary="One version of an item catalog"),
)
class ItemCatalogVersionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    serializer_class = ItemCatalogVersionSerializer
    parser_classes = [StrictMultiPartParser, parsers.FormParser]
    ordering = ["-version"]

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if request.method == "POST":
            _check_request_size(request)

    def get_catalog(self):
        return selectors.item_catalog_get(user=self.request.user, name=self.kwargs["catalog_name"])

    def scoped_queryset(self, user):
        return selectors.item_catalog_version_list(user=user, catalog=self.get_catalog())

    def get_object(self):
        return selectors.item_catalog_version_get(
            user=self.request.user, catalog=self.get_catalog(), version=self.kwargs["version"]
        )

    @extend_schema(
        request={"multipart/form-data": ItemCatalogVersionCreateSerializer},
        responses={201: ItemCatalogVersionSerializer},
        summary="A new catalog version from an NPZ upload (new items served without retraining)",
    )
    def create(self, request, *args, **kwargs):
        catalog = self.get_catalog()
        payload = ItemCatalogVersionCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        encode_with = (
            version_get(user=request.user, version_id=data["encode_with"]) if data.get("encode_with") else None
        )
        upload = data["file"]
        version = services.item_catalog_version_from_upload(
            user=request.user,
            catalog=catalog,
            filename=upload.name,
            chunks=upload.chunks(),
            size=upload.size,
            base=data.get("base"),
            encode_with=encode_with,
        )
        return created(self.get_serializer(self.get_queryset().get(pk=version.pk)).data)

    def retrieve(self, request, *args, **kwargs):
        return Response(self.get_serializer(self.get_object()).data)


router = SimpleRouter()
router.register("item-catalogs", ItemCatalogViewSet, basename="item-catalog")
urlpatterns = [
    path(
        "item-catalogs/<slug:catalog_name>/versions/",
        ItemCatalogVersionViewSet.as_view({"get": "list", "post": "create"}),
        name="item-catalog-versions",
    ),
    path(
        "item-catalogs/<slug:catalog_name>/versions/<int:version>/",
        ItemCatalogVersionViewSet.as_view({"get": "retrieve"}),
        name="item-catalog-version-detail",
    ),
    *router.urls,
]
