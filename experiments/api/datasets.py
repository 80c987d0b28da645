"""REST API v1 for training datasets built from the platform's own traffic.

GET /api/v1/datasets/ (your teams'; ?endpoint=, ?name=), GET /api/v1/datasets/{id}/ (ds-…),
POST /api/v1/datasets/ builds the next version of a dataset (experiments/services/datasets.py
says what is refused; nothing is written then).
"""

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers

from deployments.selectors import rollouts as endpoint_selectors
from experiments.models import Dataset
from experiments.selectors import datasets as selectors
from experiments.selectors.online import online_experiment_get
from experiments.services.dataset_requests import dataset_request
from kernel.api import created
from kernel.errors import InvalidInput, NotFound
from kernel.serializers import StrictCharField, StrictModelSerializer, StrictSlugField
from kernel.viewsets import TeamScopedViewSet


class TrainedVersionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    model = StrictCharField(source="model.name")
    version = serializers.IntegerField()
    metrics = serializers.DictField()


class DatasetSerializer(StrictModelSerializer):
    id = StrictCharField(source="public_id", read_only=True)
    team = StrictCharField(source="team.name", read_only=True)
    endpoint = StrictCharField(source="endpoint.name", read_only=True)
    experiment = StrictCharField(source="experiment.public_id", read_only=True, allow_null=True, default=None)
    created_by = StrictCharField(source="created_by.username", read_only=True, allow_null=True, default=None)
    versions = serializers.SerializerMethodField(help_text="Model versions trained on this dataset.")

    class Meta:
        model = Dataset
        fields = [
            "id",
            "name",
            "version",
            "team",
            "endpoint",
            "experiment",
            "window_start",
            "window_end",
            "split_at",
            "attribution_window_s",
            "schema",
            "statistics",
            "lineage",
            "mlflow_run_id",
            "versions",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields

    @extend_schema_field(TrainedVersionSerializer(many=True))
    def get_versions(self, dataset) -> list[dict]:
        by_dataset = self.context.get("versions_by_dataset")
        if by_dataset is not None:
            versions = by_dataset.get(dataset.public_id, [])
        else:
            versions = selectors.dataset_versions(user=self.context["request"].user, dataset=dataset)
        return TrainedVersionSerializer(versions, many=True).data


class DatasetBuildSerializer(serializers.Serializer):
    endpoint = StrictCharField(
        max_length=64, help_text="Name of an endpoint of your team with a capture_share above 0."
    )
    name = StrictSlugField(max_length=64, help_text="The dataset; each build is its next version.")
    start = serializers.DateTimeField(help_text="Captured requests from this time (inclusive).")
    end = serializers.DateTimeField(
        help_text="… to this time (exclusive); its attribution window must have closed (end + window before now)."
    )
    experiment = StrictCharField(
        max_length=32,
        required=False,
        allow_null=True,
        default=None,
        help_text="Only this experiment's requests (exp-12), labelled within its attribution window "
        "(default: the endpoint's requests, one hour's window).",
    )


def _endpoint(user, name: str):
    try:
        return endpoint_selectors.endpoint_get(user=user, name=name)
    except NotFound:  # another team's endpoint reads as unknown
        raise InvalidInput(
            f"endpoint: no endpoint named {name!r}.", field="endpoint", code="endpoint_not_found"
        ) from None


def _experiment(user, experiment_id):
    if experiment_id is None:
        return None
    try:
        return online_experiment_get(user=user, experiment_id=experiment_id)
    except NotFound:
        raise InvalidInput(
            f"experiment: no experiment {experiment_id!r}.", field="experiment", code="experiment_not_found"
        ) from None


@extend_schema_view(
    list=extend_schema(
        summary="Datasets of your teams, newest first",
        parameters=[
            OpenApiParameter("endpoint", str, description="Only this endpoint's datasets."),
            OpenApiParameter("name", str, description="Only this dataset's versions."),
        ],
    ),
    retrieve=extend_schema(summary="One dataset version: schema, statistics, lineage, versions trained on it"),
    create=extend_schema(
        request=DatasetBuildSerializer,
        responses={201: DatasetSerializer},
        summary="Build the next version of a dataset from an endpoint's captured requests and their clicks",
    ),
)
class DatasetViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, TeamScopedViewSet):
    serializer_class = DatasetSerializer
    lookup_value_regex = r"ds-[0-9a-f]{1,32}"
    ordering = ["-created_at"]

    def scoped_queryset(self, user):
        params = getattr(self.request, "query_params", {})
        return selectors.dataset_list(
            user=user, endpoint=params.get("endpoint") or None, name=params.get("name") or None
        )

    def get_object(self):
        return selectors.dataset_get(user=self.request.user, dataset_id=self.kwargs["pk"])

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if getattr(self, "action", None) == "list" and getattr(self, "_page", None) is not None:
            context["versions_by_dataset"] = selectors.dataset_versions_by_dataset(
                user=self.request.user, datasets=self._page
            )
        return context

    def paginate_queryset(self, queryset):
        self._page = super().paginate_queryset(queryset)
        return self._page

    def create(self, request, *args, **kwargs):
        payload = DatasetBuildSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        endpoint = _endpoint(request.user, data["endpoint"])
        dataset = dataset_request(
            user=request.user,
            endpoint=endpoint,
            experiment=_experiment(request.user, data["experiment"]),
            start=data["start"],
            end=data["end"],
            name=data["name"],
        )
        return created(DatasetSerializer(dataset, context=self.get_serializer_context()).data)
