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
