"""Read-only API over MLflow experiments and runs (team-scoped by experiment tag)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from experiments.selectors import training as selectors
from kernel.serializers import StrictCharField
from registry.selectors.catalog import versions_from_run


class ExperimentSerializer(serializers.Serializer):
    id = StrictCharField()
    name = StrictCharField()
    team = StrictCharField()
    run_count = serializers.IntegerField()


class RunSerializer(serializers.Serializer):
    run_id = StrictCharField()
    run_name = StrictCharField(allow_null=True)
    status = StrictCharField()
    start_time = serializers.IntegerField(allow_null=True, help_text="ms since epoch")
    end_time = serializers.IntegerField(allow_null=True)
    params = serializers.DictField(child=StrictCharField())
    metrics = serializers.DictField(child=serializers.FloatField())
    tags = serializers.DictField(child=StrictCharField())


class MetricPointSerializer(serializers.Serializer):
    step = serializers.IntegerField()
    timestamp = serializers.IntegerField(help_text="ms since epoch")
    value = serializers.FloatField()


class ArtifactFileSerializer(serializers.Serializer):
    path = StrictCharField()
    size = serializers.IntegerField(allow_null=True, help_text="bytes")


class RegisteredVersionSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    model = StrictCharField(source="model.name")
    version = serializers.IntegerField()
    source_uri = StrictCharField()
    status = StrictCharField()


class RunDetailSerializer(RunSerializer):
    metric_history = serializers.DictField(child=MetricPointSerializer(many=True))
    artifacts = ArtifactFileSerializer(many=True)
    versions = RegisteredVersionSerializer(many=True, help_text="Model versions registered from this run")


class ExperimentListView(APIView):
    @extend_schema(responses=ExperimentSerializer(many=True), summary="MLflow experiments of your teams")
    def get(self, request):
        return Response(ExperimentSerializer(selectors.experiment_list(user=request.user), many=True).data)


class RunListView(APIView):
    @extend_schema(responses=RunSerializer(many=True), summary="Runs of one experiment, newest first")
    def get(self, request, experiment_id: str):
        return Response(
            RunSerializer(selectors.run_list(user=request.user, experiment_id=experiment_id), many=True).data
        )


class RunDetailView(APIView):
    @extend_schema(
        responses=RunDetailSerializer,
        summary="One run: params, metrics with their history, artifacts, versions registered from it",
    )
    def get(self, request, experiment_id: str, run_id: str):
        run = selectors.run_get(user=request.user, run_id=run_id, experiment_id=experiment_id)
        run["metric_history"] = selectors.metric_history(run_id, run["metrics"].keys())
        run["artifacts"] = selectors.artifact_list(run_id)
        run["versions"] = versions_from_run(user=request.user, run_id=run_id)
        return Response(RunDetailSerializer(run).data)
