"""An alias set on a version registered from an MLflow registered model (`models:/name/N`)
is mirrored to MLflow's registry (set, moved, deleted), so `models:/name@alias` means the
same in MLflow as in the platform."""

import pytest

from harness import factories
from registry.models import ModelVersion, VersionSource
from registry.services import aliases

pytestmark = pytest.mark.django_db


def test_alias_is_mirrored_to_mlflow(mlflow_store, alice, team_a, django_capture_on_commit_callbacks):
    client = mlflow_store
    client.create_registered_model("ctr-mlflow")
    for _ in range(2):
        client.create_model_version("ctr-mlflow", source="file:///tmp/model")
    model = factories.registered_model(team_a, name="ctr")
    v1, v2 = (
        ModelVersion.objects.create(
            model=model, version=n, source=VersionSource.MLFLOW, source_uri=f"models:/ctr-mlflow/{n}"
        )
        for n in (1, 2)
    )
    with django_capture_on_commit_callbacks(execute=True):
        aliases.alias_set(user=alice, model=model, name="champion", version=v1)
    assert client.get_model_version_by_alias("ctr-mlflow", "champion").version == 1
    with django_capture_on_commit_callbacks(execute=True):
        aliases.alias_set(user=alice, model=model, name="champion", version=v2)
    assert client.get_model_version_by_alias("ctr-mlflow", "champion").version == 2
    with django_capture_on_commit_callbacks(execute=True):
        aliases.alias_delete(user=alice, model=model, name="champion")
    assert client.get_registered_model("ctr-mlflow").aliases == {}
