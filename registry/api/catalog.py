"""REST API v1 for the registry's catalog, models and their versions: thin views that
validate, call a service, serialize (teams and the audit trail: registry/api/teams.py)."""

from django.conf import settings
from django.contrib.auth.models import Group
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, parsers, serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from kernel.api import created
from kernel.errors import TooLarge
from kernel.parsers import StrictJSONParser
from kernel.serializers import StrictCharField, StrictModelSerializer
from kernel.viewsets import TeamScopedViewSet
from registry.models import DataKind, ModelVersion, RegisteredModel, Role, Task
from registry.parsers import StrictMultiPartParser
from registry.selectors import catalog as selectors
from registry.selectors.teams import team_list
from registry.services import catalog as services
from registry.services import version_data


# --- serializers -----------------------------------------------------------------------------
class TensorSpecSerializer(serializers.Serializer):
    name = StrictCharField()
    dtype = StrictCharField()
    shape = serializers.ListField(child=serializers.IntegerField(), help_text="-1 marks a dynamic dimension.")


class SignatureSerializer(serializers.Serializer):
    inputs = TensorSpecSerializer(many=True, required=False)
    outputs = TensorSpecSerializer(many=True, required=False)
    opset = serializers.IntegerField(required=False)
    ir_version = serializers.IntegerField(required=False)
    producer = StrictCharField(required=False)


class ModelSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="name", queryset=Group.objects.all())
    version_count = serializers.IntegerField(read_only=True)
    latest_version = serializers.IntegerField(read_only=True, allow_null=True)
    created_by = serializers.StringRelatedField()

    class Meta:
        model = RegisteredModel
        fields = [
            "name",
            "description",
            "task",
            "team",
            "version_count",
            "latest_version",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["created_by", "created_at", "updated_at"]
        # not DRF's UniqueValidator ("…with this name already exists" for any team's name):
        # the service answers a taken name (registry/names.name_conflict: no name oracle)
        extra_kwargs = {"name": {"validators": []}}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            # Only teams the user may create in are valid choices; others "do not exist".
            self.fields["team"].queryset = team_list(user=request.user, min_role=Role.DEVELOPER)


class ModelUpdateSerializer(serializers.Serializer):
    description = StrictCharField(required=False, allow_blank=True)
    task = serializers.ChoiceField(choices=Task.choices, required=False)


class VersionSerializer(StrictModelSerializer):
    model = StrictCharField(source="model.name", read_only=True)
    created_by = serializers.StringRelatedField()
    signature = SignatureSerializer(read_only=True)
    aliases = serializers.SerializerMethodField()
    url = serializers.HyperlinkedIdentityField(view_name="api:version-detail")
    llm = serializers.SerializerMethodField(
        help_text="LLM versions: kind (dir|openai), context_length, tokenizer, base_url, upstream_model, "
        "secret (its name), cost_per_1k_prompt/completion; null for a tensor model's version."
    )
    gr = serializers.SerializerMethodField(
        help_text="Generative recommender versions: the catalog version it was built against (catalog, "
        "catalog_version), levels, codes_per_level, layers, d_model, max_history; null otherwise."
    )

    class Meta:
        model = ModelVersion
        fields = [
            "id",
            "url",
            "model",
            "version",
            "status",
            "source",
            "source_uri",
            "framework",
            "file_sha256",
            "file_size",
            "original_filename",
            "signature",
            "metrics",
            "tags",
            "aliases",
            "llm",
            "gr",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields

    def get_aliases(self, version) -> list[str]:
        """The model's aliases that point at this version (models:/{model}@{alias})."""
        return sorted(alias.name for alias in version.aliases.all())

    def get_gr(self, version) -> dict | None:
        from registry.selectors.item_catalogs import gr_spec_of_version

        spec = gr_spec_of_version(version)
        if spec is None:
            return None
        return {
            "catalog": spec.catalog_version.catalog.name,
            "catalog_version": spec.catalog_version.version,
            **{k: getattr(spec, k) for k in ("levels", "codes_per_level", "layers", "d_model", "max_history")},
        }

    def get_llm(self, version) -> dict | None:

        from registry.selectors.llm import llm_spec_of_version

        spec = llm_spec_of_version(version)
        if spec is None:
            return None
        return {
            "kind": spec.kind,
            "context_length": spec.context_length,
            "tokenizer": spec.tokenizer,
            "base_url": spec.base_url,
            "upstream_model": spec.upstream_model,
            "secret": spec.secret.name if spec.secret_id else None,
            "cost_per_1k_prompt": spec.cost_per_1k_prompt,
            "cost_per_1k_completion": spec.cost_per_1k_completion,
        }


class VersionCreateSerializer(serializers.Serializer):
    file = serializers.FileField(required=False, help_text="An ONNX model file (multipart).")
    source_uri = StrictCharField(required=False, help_text="An MLflow model URI: runs:/… or models:/…")
    metrics = serializers.JSONField(required=False, help_text='Training metrics, e.g. {"auc": 0.78}.')
    tags = serializers.JSONField(required=False)
    validation_data = serializers.FileField(
        required=False, help_text="A labelled validation set (NPZ, Parquet or JSON lines); see /versions/{id}/data/."
    )
    input_example = serializers.FileField(
        required=False, help_text="An input example (NPZ, Parquet or JSON lines keyed by input name)."
    )
    label = StrictCharField(
        required=False, max_length=128, help_text='The label column/array name in validation_data (default "label").'
    )

    def validate(self, attrs):
        if bool(attrs.get("file")) == bool(attrs.get("source_uri")):
            raise serializers.ValidationError(
                {"file": "Give exactly one of file (multipart ONNX upload) or source_uri."}
            )
        for key in ("metrics", "tags"):
            if key in attrs and not isinstance(attrs[key], dict):
                raise serializers.ValidationError({key: "Must be a JSON object."})
        return attrs


# --- filters ---------------------------------------------------------------------------------
class ModelFilter(filters.FilterSet):
    name = filters.CharFilter(field_name="name", lookup_expr="icontains")
    team = filters.CharFilter(field_name="team__name")
    task = filters.ChoiceFilter(choices=Task.choices)

    class Meta:
        model = RegisteredModel
        fields = ["name", "team", "task"]


# --- views -----------------------------------------------------------------------------------
def _check_request_size(request) -> None:
    """413 before the body is read when Content-Length is over MAX_UPLOAD_MB."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > settings.MAX_UPLOAD_MB * 1024 * 1024 + 64 * 1024:
        raise TooLarge(
            f"file: the request is {length} bytes, over the {settings.MAX_UPLOAD_MB} MB limit (MAX_UPLOAD_MB).",
            field="file",
        )


@extend_schema_view(
    list=extend_schema(summary="List models of your teams"),
    retrieve=extend_schema(summary="One model"),
    create=extend_schema(summary="Register a model"),
    partial_update=extend_schema(request=ModelUpdateSerializer, summary="Change description or task"),
    update=extend_schema(request=ModelUpdateSerializer),
    destroy=extend_schema(summary="Delete a model that has no versions (409 otherwise)"),
)
class ModelViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TeamScopedViewSet,
):
    serializer_class = ModelSerializer
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9][a-z0-9_-]*"
    filterset_class = ModelFilter
    ordering_fields = ["name", "created_at", "updated_at"]
    ordering = ["name"]
    search_fields = ["name", "description"]

    def scoped_queryset(self, user):
        return selectors.model_list(user=user)

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = services.model_create(
            user=self.request.user,
            name=data["name"],
            team=data["team"],
            description=data.get("description", ""),
            task=data.get("task", Task.CTR),
        )

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        self.perform_create(serializer)
        instance = self.get_queryset().get(pk=serializer.instance.pk)
        return created(self.get_serializer(instance).data)

    def update(self, request, *args, **kwargs):
        model = self.get_object()
        serializer = ModelUpdateSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        services.model_update(user=request.user, model=model, **serializer.validated_data)
        return Response(self.get_serializer(self.get_queryset().get(pk=model.pk)).data)

    def perform_destroy(self, instance):
        services.model_delete(user=self.request.user, model=instance)


class ModelVersionViewSet(mixins.ListModelMixin, mixins.CreateModelMixin, TeamScopedViewSet):
    """Versions of one model: /api/v1/models/{name}/versions/."""

    serializer_class = VersionSerializer
    parser_classes = [StrictMultiPartParser, parsers.FormParser, StrictJSONParser]
    ordering_fields = ["version", "created_at"]
    ordering = ["-version"]
    filterset_fields = ["status", "source", "framework"]

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if request.method == "POST":
            _check_request_size(request)

    def get_model(self) -> RegisteredModel:
        return selectors.model_get(user=self.request.user, name=self.kwargs["model_name"])

    def scoped_queryset(self, user):
        return selectors.version_list(user=user, model=self.get_model()).prefetch_related("aliases")

    @extend_schema(
        request={"multipart/form-data": VersionCreateSerializer, "application/json": VersionCreateSerializer},
        responses={201: VersionSerializer},
        summary="Register a version: upload an ONNX file (multipart `file`) or give an MLflow `source_uri`",
    )
    def create(self, request, *args, **kwargs):
        model = self.get_model()
        payload = VersionCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        files = tuple(
            version_data.DataUpload(field, kind, data[field].name, data[field].chunks(), data[field].size)
            for field, kind in (("validation_data", DataKind.VALIDATION), ("input_example", DataKind.EXAMPLE))
            if data.get(field)
        )
        upload = data.get("file")
        version = version_data.version_create_with_data(
            user=request.user,
            model=model,
            source_uri=data.get("source_uri", ""),
            upload=version_data.DataUpload("file", "", upload.name, upload.chunks(), upload.size) if upload else None,
            metrics=data.get("metrics"),
            tags=data.get("tags"),
            data=files,
            label=data.get("label"),
        )
        return created(VersionSerializer(version, context=self.get_serializer_context()).data)


class VersionViewSet(mixins.RetrieveModelMixin, mixins.ListModelMixin, TeamScopedViewSet):
    """/api/v1/versions/{id}/ — a version with its signature."""

    serializer_class = VersionSerializer
    filterset_fields = ["status", "source", "framework"]
    ordering_fields = ["created_at", "version"]
    ordering = ["-created_at"]

    def scoped_queryset(self, user):
        return selectors.version_list(user=user).prefetch_related("aliases")

    @extend_schema(request=None, responses={200: VersionSerializer}, summary="Archive a version")
    @action(detail=True, methods=["post"])
    def archive(self, request, pk=None):
        version = services.version_archive(
            user=request.user, version=self.get_object(), reason=str(request.data.get("reason", ""))
        )
        return Response(self.get_serializer(version).data)
