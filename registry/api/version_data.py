"""/api/v1/versions/{version_id}/data/ — a version's input example and labelled validation set.

GET lists what the version carries; POST (multipart: `file`, `kind` = validation |
example, `label` = the label column/array name, default "label") checks the file against
the signature and stores it, replacing that kind; DELETE ?kind=... removes it. Another
team's version is a 404."""

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, parsers, serializers
from rest_framework.response import Response

from kernel.api import created
from kernel.errors import InvalidInput
from kernel.serializers import StrictCharField, StrictModelSerializer
from kernel.viewsets import TeamScopedViewSet
from registry.api.catalog import _check_request_size
from registry.models import DataKind, VersionData
from registry.parsers import StrictMultiPartParser
from registry.selectors.catalog import version_get
from registry.services import version_data as services


class VersionDataSerializer(StrictModelSerializer):
    created_by = serializers.StringRelatedField()

    class Meta:
        model = VersionData
        fields = [
            "kind",
            "format",
            "original_filename",
            "rows",
            "label",
            "summary",
            "sha256",
            "size_bytes",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields


class VersionDataUploadSerializer(serializers.Serializer):
    file = serializers.FileField(
        help_text="NPZ, Parquet or JSON lines keyed by input name, plus the label column/array."
    )
    kind = serializers.ChoiceField(choices=DataKind.choices, default=DataKind.VALIDATION)
    label = StrictCharField(required=False, max_length=128, help_text='The label column/array name (default "label").')


KIND = OpenApiParameter("kind", str, enum=DataKind.values, required=True, description="Which data to remove.")


class VersionDataViewSet(mixins.ListModelMixin, TeamScopedViewSet):
    serializer_class = VersionDataSerializer
    parser_classes = [StrictMultiPartParser, parsers.FormParser]
    pagination_class = None

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if request.method == "POST":
            _check_request_size(request)

    def get_version(self):
        return version_get(user=self.request.user, version_id=self.kwargs["version_id"])

    def scoped_queryset(self, user):
        return VersionData.objects.filter(version=self.get_version()).select_related("created_by")

    @extend_schema(summary="The version's input example and validation set")
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(
        request={"multipart/form-data": VersionDataUploadSerializer},
        responses={201: VersionDataSerializer},
        summary="Attach an input example or a labelled validation set (checked against the signature)",
    )
    def create(self, request, *args, **kwargs):
        version = self.get_version()
        payload = VersionDataUploadSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        upload = data["file"]
        row = services.version_data_attach(
            user=request.user,
            version=version,
            kind=data["kind"],
            filename=upload.name,
            chunks=upload.chunks(),
            size=upload.size,
            label=data.get("label"),
        )
        return created(VersionDataSerializer(row).data)

    @extend_schema(
        parameters=[KIND], request=None, responses={204: None}, summary="Remove the version's example or validation set"
    )
    def destroy(self, request, *args, **kwargs):
        version = self.get_version()
        kind = request.query_params.get("kind", "")
        if kind not in DataKind.values:
            raise InvalidInput(
                f"kind: give ?kind= one of {', '.join(DataKind.values)}.", code="invalid_choice", field="kind"
            )
        if not services.version_data_remove(user=request.user, version=version, kind=kind):
            raise InvalidInput(f"kind: the version has no {kind} data.", code="not_found", field="kind", status=404)
        return Response(status=204)


urlpatterns = [
    path(
        "versions/<int:version_id>/data/",
        VersionDataViewSet.as_view({"get": "list", "post": "create", "delete": "destroy"}),
        name="version-data",
    ),
]
