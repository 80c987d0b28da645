"""Training datasets built from the platform's own traffic (experiments/datasets.py builds them)."""

import secrets

from django.conf import settings
from django.db import models


def _public_id() -> str:
    return f"ds-{secrets.token_hex(8)}"  # unguessable: a team's dataset ids tell nothing of another's


class Dataset(models.Model):
    """One version of a dataset: captured requests of an endpoint joined with their feedback inside
    the attribution window, split by time, written as Parquet and registered with MLflow."""

    public_id = models.CharField(max_length=32, unique=True, default=_public_id, editable=False)
    team = models.ForeignKey("auth.Group", on_delete=models.CASCADE, related_name="+")
    endpoint = models.ForeignKey("deployments.Endpoint", on_delete=models.CASCADE, related_name="+")
    experiment = models.ForeignKey(
        "experiments.Experiment", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.SlugField(max_length=64)
    version = models.PositiveIntegerField()
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    split_at = models.DateTimeField(help_text="Training rows' windows closed before it; validation rows start at it.")
    attribution_window_s = models.PositiveIntegerField()
    path = models.CharField(max_length=500, help_text="The Parquet folder under VAR_DIR/datasets.")
    schema = models.JSONField(default=dict)
    statistics = models.JSONField(default=dict)
    lineage = models.JSONField(default=dict, help_text="Endpoint, experiment, time range, serving versions.")
    mlflow_run_id = models.CharField(max_length=64, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["team", "name", "version"], name="dataset_version_per_team")]

    def __str__(self):
        return f"{self.name} v{self.version}"


class DatasetRequestStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class DatasetBuildRequest(models.Model):
    """A dataset build asked of the process that owns the embedded store (chdb opens its data in
    one process: `manage.py run_experiment_data`). The door that asked waits for the outcome and
    deletes the row: a refused build leaves nothing behind, a built one is its Dataset."""

    team = models.ForeignKey("auth.Group", on_delete=models.CASCADE, related_name="+")
    endpoint = models.ForeignKey("deployments.Endpoint", on_delete=models.CASCADE, related_name="+")
    experiment = models.ForeignKey(
        "experiments.Experiment", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    name = models.SlugField(max_length=64)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    status = models.CharField(max_length=16, choices=DatasetRequestStatus.choices, default=DatasetRequestStatus.QUEUED)
    dataset = models.ForeignKey(Dataset, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    error = models.JSONField(default=dict, blank=True, help_text="{detail, code, field, status} of a refused build.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]

    def __str__(self):
        return f"{self.name} ({self.status})"
