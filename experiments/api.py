"""Read-only API over MLflow experiments and runs (team-scoped by experiment tag)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from experiments import selectors


class ExperimentSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    team = serializers.CharField()
    run_count = serializers.IntegerField()


class RunSerializer(serializers.Serializer):
    run_id = serializers.CharField()
    run_name = serializers.CharField(allow_null=True)
    status = serializers.CharField()
    start_time = serializers.IntegerField(allow_null=True, help_text="ms since epoch")
    end_time = serializers.IntegerField(allow_null=True)
    params = serializers.DictField(child=serializers.CharField())
    metrics = serializers.DictField(child=serializers.FloatField())
    tags = serializers.DictField(child=serializers.CharField())


class ExperimentListView(APIView):
    @extend_schema(responses=ExperimentSerializer(many=True), summary="MLflow experiments of your teams")
    def get(self, request):
        return Response(ExperimentSerializer(selectors.experiment_list(user=request.user), many=True).data)


class RunListView(APIView):
    @extend_schema(responses=RunSerializer(many=True), summary="Runs of one experiment, newest first")
    def get(self, request, experiment_id: str):
        return Response(RunSerializer(selectors.run_list(user=request.user, experiment_id=experiment_id), many=True).data)
