"""REST API v1 for deployments: thin views that validate, call a service, serialize.

Serving pools: /api/v1/pools/ (CRUD by name) and the actions scale, load, unload
(POST /api/v1/pools/{name}/{action}/), plus the log tail of a replica.

Why this is one long module: every pool request's serializer (create, update, scale, load, unload) and the viewset that documents them read together.
"""

from django.contrib.auth.models import Group
from django_filters import rest_framework as filters
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from deployments.models import DeviceKind, PoolDriver, PoolModel, PoolReplica, PoolStatus, ServingPool
from deployments.selectors import pools as selectors
from deployments.services import pools as services
from kernel.serializers import ServerTextField, StrictCharField, StrictModelSerializer
from kernel.viewsets import TeamScopedViewSet
from registry.models import Role
from registry.selectors.teams import team_list


# === serving pools ===========================================================================
class PoolReplicaSerializer(StrictModelSerializer):
    last_error = ServerTextField()

    class Meta:
        model = PoolReplica
        fields = [
            "name",
            "status",
            "http_url",
            "grpc_url",
            "metrics_url",
            "pid",
            "restarts",
            "last_error",
            "started_at",
            "last_seen_at",
        ]
        read_only_fields = fields


class PoolModelSerializer(StrictModelSerializer):
    pool = StrictCharField(source="pool.name", read_only=True)
    artifact = serializers.IntegerField(source="artifact_id", read_only=True)
    variant = StrictCharField(source="artifact.variant", read_only=True)
    replica_ready = serializers.DictField(
        child=serializers.BooleanField(), read_only=True, help_text="Readiness per replica at the last check."
    )
    error = ServerTextField(help_text="Triton's message when the model failed to load.")

    class Meta:
        model = PoolModel
        fields = [
            "pool",
            "triton_model_name",
            "artifact",
            "variant",
            "state",
            "error",
            "replica_ready",
            "loaded_at",
            "updated_at",
        ]
        read_only_fields = fields


class PoolSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="name", read_only=True)
    ready_replicas = serializers.IntegerField(read_only=True)
    model_count = serializers.IntegerField(read_only=True)
    created_by = serializers.StringRelatedField()
    url = serializers.HyperlinkedIdentityField(view_name="api:pool-detail", lookup_field="name")
    model_repository = serializers.SerializerMethodField(
        help_text="Kubernetes: the object-store URL or volume claim the pool's Triton reads. Local pools: empty "
        "(their repository lies in the server's data directory, which replies never show)."
    )
    status_reason = ServerTextField()

    class Meta:
        model = ServingPool
        fields = [
            "name",
            "url",
            "team",
            "driver",
            "replicas",
            "ready_replicas",
            "model_count",
            "device_kind",
            "gpus_per_replica",
            "resources",
            "model_repository",
            "namespace",
            "image",
            "min_replicas",
            "max_replicas",
            "autoscale_metric",
            "autoscale_target",
            "repository_secret",
            "max_queue_size",
            "queue_timeout_ms",
            "cost_per_replica_hour",
            "status",
            "status_reason",
            "generation",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_model_repository(self, pool) -> str:
        return pool.model_repository if pool.driver == PoolDriver.KUBERNETES else ""


class PoolLiveSerializer(serializers.Serializer):
    readiness = serializers.DictField(
        child=serializers.DictField(child=serializers.BooleanField()),
        help_text="{model: {replica: READY?}} asked from Triton now.",
    )
    statistics = serializers.DictField(
        help_text="Triton statistics: {models: {name: {success, failure, queue_us_avg, compute_us_avg, pending, ...}}, replicas: {...}}"
    )
    error = StrictCharField(help_text="Why the driver could not answer, if it could not.")


class PoolDetailSerializer(PoolSerializer):
    replica_set = PoolReplicaSerializer(many=True, read_only=True)
    models = PoolModelSerializer(many=True, read_only=True)
    live = serializers.SerializerMethodField()

    class Meta(PoolSerializer.Meta):
        fields = [*PoolSerializer.Meta.fields, "replica_set", "models", "live"]
        read_only_fields = fields

    @extend_schema_field(PoolLiveSerializer)
    def get_live(self, pool) -> dict:
        live = selectors.pool_live(pool=pool)
        return {"readiness": live["readiness"], "statistics": live["statistics"], "error": live["error"]}


class PoolCreateSerializer(serializers.Serializer):
    name = StrictCharField(max_length=48)
    team = serializers.SlugRelatedField(slug_field="name", queryset=Group.objects.all())
    driver = serializers.ChoiceField(choices=PoolDriver.choices, default=PoolDriver.LOCAL)
    replicas = serializers.IntegerField(default=1)
    device_kind = serializers.ChoiceField(choices=DeviceKind.choices, default=DeviceKind.CPU)
    gpus_per_replica = serializers.IntegerField(required=False)
    resources = serializers.JSONField(
        required=False, help_text='Requests per replica, e.g. {"cpu": "2", "memory": "4Gi"}.'
    )
    model_repository = StrictCharField(
        required=False,
        allow_blank=True,
        help_text="Kubernetes: s3://, gs://, as:// or pvc://CLAIM[/SUBPATH]. Local: leave empty.",
    )
    namespace = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=63,
        help_text="Kubernetes: one of your team's namespaces (empty: the one the platform assigns it); never the "
        "platform's. Local pools: leave it empty.",
    )
    image = StrictCharField(
        required=False,
        max_length=255,
        help_text="Kubernetes: a Triton image the operator allows (POOL_IMAGES, POOL_TEAM_IMAGES: registry and tag "
        "pattern or digest); default nvcr.io/nvidia/tritonserver:24.10-py3.",
    )
    min_replicas = serializers.IntegerField(required=False)
    max_replicas = serializers.IntegerField(required=False)
    max_queue_size = serializers.IntegerField(
        required=False,
        help_text="Waiting requests per model before Triton rejects; 0 (default) with queue_timeout_ms 0: no Triton "
        "queue policy, which costs a 500 ms stall in Triton 2.51 (docs/pools.md).",
    )
    queue_timeout_ms = serializers.IntegerField(required=False, help_text="0 (default): no queue timeout.")
    cost_per_replica_hour = serializers.DecimalField(max_digits=10, decimal_places=4, required=False)
    autoscale_metric = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=24,
        help_text="Kubernetes: what the HPA scales on between min and max replicas: cpu (utilization %), "
        "queue_time (Triton's queue ms per request) or pending_requests (per pod). Default: cpu for CPU pools, "
        "queue_time for GPU pools.",
    )
    autoscale_target = serializers.FloatField(
        required=False, help_text="The HPA's target for autoscale_metric (default 70 %, 20 ms or 8 requests)."
    )
    repository_secret = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=253,
        help_text="Kubernetes: a Secret an admin bound to your team in the pool's namespace "
        "(/api/v1/pool-secret-bindings/); its keys become Triton's environment "
        "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, ... for s3://).",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            # Only teams the user deploys in are valid; others "do not exist".
            self.fields["team"].queryset = team_list(user=request.user, min_role=Role.DEPLOYER)


class PoolUpdateSerializer(serializers.Serializer):
    cost_per_replica_hour = serializers.DecimalField(max_digits=10, decimal_places=4, required=False)
    max_queue_size = serializers.IntegerField(required=False)
    queue_timeout_ms = serializers.IntegerField(required=False)
    resources = serializers.JSONField(required=False)
    image = StrictCharField(required=False, max_length=255, help_text="As at create: an image the operator allows.")
    min_replicas = serializers.IntegerField(required=False)
    max_replicas = serializers.IntegerField(required=False)
    autoscale_metric = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=24,
        help_text="Kubernetes: what the HPA scales on between min and max replicas: cpu (utilization %), "
        "queue_time (Triton's queue ms per request) or pending_requests (per pod). Default: cpu for CPU pools, "
        "queue_time for GPU pools.",
    )
    autoscale_target = serializers.FloatField(
        required=False, help_text="The HPA's target for autoscale_metric (default 70 %, 20 ms or 8 requests)."
    )
    repository_secret = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=253,
        help_text="Kubernetes: a Secret an admin bound to your team in the pool's namespace; empty: none.",
    )


class ScaleSerializer(serializers.Serializer):
    replicas = serializers.IntegerField(help_text="Desired replicas, 0 or more.")


class LoadSerializer(serializers.Serializer):
    artifact = serializers.IntegerField(help_text="Id of a servable artifact.")


class UnloadSerializer(serializers.Serializer):
    model = StrictCharField(help_text="Triton model name, {model}__v{version}__{variant}.")
    drain_timeout_s = serializers.FloatField(default=30.0, help_text="How long to wait for traffic to stop.")
    force = serializers.BooleanField(default=False, help_text="Unload even if traffic did not stop in time.")


class PoolFilter(filters.FilterSet):
    team = filters.CharFilter(field_name="team__name")
    driver = filters.ChoiceFilter(choices=PoolDriver.choices)
    status = filters.ChoiceFilter(choices=PoolStatus.choices)

    class Meta:
        model = ServingPool
        fields = ["team", "driver", "status"]


@extend_schema_view(
    list=extend_schema(summary="List serving pools of your teams"),
    retrieve=extend_schema(summary="A pool with its replicas, models, readiness per model and Triton statistics"),
    create=extend_schema(
        request=PoolCreateSerializer, responses={201: PoolSerializer}, summary="Create a serving pool"
    ),
    partial_update=extend_schema(
        request=PoolUpdateSerializer,
        responses={200: PoolSerializer},
        summary="Change cost, queue limits, resources, image, autoscaling bounds",
    ),
    update=extend_schema(request=PoolUpdateSerializer, responses={200: PoolSerializer}),
    destroy=extend_schema(responses={202: PoolSerializer}, summary="Stop the pool's replicas and delete it"),
)
class PoolViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TeamScopedViewSet,
):
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9][a-z0-9-]*"
    filterset_class = PoolFilter
    ordering_fields = ["name", "created_at", "updated_at"]
    ordering = ["name"]
    search_fields = ["name"]

    def get_serializer_class(self):
        return PoolDetailSerializer if self.action == "retrieve" else PoolSerializer

    def scoped_queryset(self, user):
        return selectors.pool_list(user=user)

    def retrieve(self, request, *args, **kwargs):
        return Response(PoolDetailSerializer(self._pool(), context=self.get_serializer_context()).data)

    def _pool(self) -> ServingPool:
        return selectors.pool_get(user=self.request.user, name=self.kwargs["name"])

    def _fresh(self, pool: ServingPool) -> dict:
        return PoolSerializer(
            selectors.pool_list(user=self.request.user).get(pk=pool.pk), context=self.get_serializer_context()
        ).data

    def create(self, request, *args, **kwargs):
        payload = PoolCreateSerializer(data=request.data, context=self.get_serializer_context())
        payload.is_valid(raise_exception=True)
        pool = services.pool_create(user=request.user, **payload.validated_data)
        return Response(self._fresh(pool), status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        pool = self._pool()
        payload = PoolUpdateSerializer(data=request.data, partial=True)
        payload.is_valid(raise_exception=True)
        pool = services.pool_update(user=request.user, pool=pool, **payload.validated_data)
        return Response(self._fresh(pool))

    def destroy(self, request, *args, **kwargs):
        pool = services.pool_delete(user=request.user, pool=self._pool())
        return Response(self._fresh(pool), status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        request=ScaleSerializer, responses={202: PoolSerializer}, summary="Set the desired number of replicas"
    )
    @action(detail=True, methods=["post"])
    def scale(self, request, name=None):
        payload = ScaleSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        pool = services.pool_scale(user=request.user, pool=self._pool(), replicas=payload.validated_data["replicas"])
        return Response(self._fresh(pool), status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        request=LoadSerializer,
        responses={202: PoolModelSerializer},
        summary="Load a servable artifact on every replica (READY when all say so)",
    )
    @action(detail=True, methods=["post"])
    def load(self, request, name=None):
        pool = self._pool()
        payload = LoadSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        artifact = selectors.artifact_get(user=request.user, artifact_id=payload.validated_data["artifact"])
        pool_model = services.pool_load_request(user=request.user, pool=pool, artifact=artifact)
        return Response(PoolModelSerializer(pool_model).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        request=UnloadSerializer,
        responses={202: PoolModelSerializer},
        summary="Drain, then unload a model from every replica",
    )
    @action(detail=True, methods=["post"])
    def unload(self, request, name=None):
        pool = self._pool()
        payload = UnloadSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        pool_model = services.pool_unload_request(
            user=request.user,
            pool=pool,
            model_name=data["model"],
            drain_timeout_s=data["drain_timeout_s"],
            force=data["force"],
        )
        return Response(PoolModelSerializer(pool_model).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        parameters=[OpenApiParameter("replica", str, required=True), OpenApiParameter("lines", int, required=False)],
        responses={200: inline_serializer("ReplicaLog", {"replica": StrictCharField(), "log": StrictCharField()})},
        summary="The tail of one replica's tritonserver log",
    )
    @action(detail=True, methods=["get"])
    def log(self, request, name=None):
        pool = self._pool()
        replica = request.query_params.get("replica", "")
        try:
            lines = max(1, min(1000, int(request.query_params.get("lines", 100))))
        except ValueError:
            lines = 100
        return Response(
            {"replica": replica, "log": selectors.replica_log_tail(pool=pool, replica=replica, lines=lines)}
        )
