"""One place that points MLflow at the configured tracking store."""

import os
from functools import lru_cache

from django.conf import settings


@lru_cache(maxsize=1)
def configure() -> str:
    import mlflow

    uri = settings.MLFLOW_TRACKING_URI
    os.environ.setdefault("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    return uri


def client():
    from mlflow.tracking import MlflowClient

    configure()
    return MlflowClient(tracking_uri=settings.MLFLOW_TRACKING_URI, registry_uri=settings.MLFLOW_TRACKING_URI)


def experiment_id(name: str) -> str:
    """Get or create an experiment whose artifacts live under MLFLOW_ARTIFACT_ROOT
    (a sqlite:// store would otherwise put them in ./mlruns of the current directory)."""
    tracking = client()
    existing = tracking.get_experiment_by_name(name)
    if existing is not None:
        return existing.experiment_id
    root = settings.MLFLOW_ARTIFACT_ROOT
    location = root if "://" in root else f"file://{os.path.abspath(root)}"
    return tracking.create_experiment(name, artifact_location=f"{location.rstrip('/')}/{name}")
