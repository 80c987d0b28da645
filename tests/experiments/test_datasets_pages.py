"""The dashboard's datasets: the list (filtered in place by endpoint with htmx) and one dataset's
page with its lineage, statistics and links to the versions trained on it; team-scoped."""

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from experiments.services.datasets import dataset_build
from registry.models import ModelVersion
from tests.experiments.captured import traffic


@pytest.fixture
def dataset(column_store, served, deployer, tmp_path, settings, mlflow_store):
    settings.VAR_DIR = tmp_path
    endpoint, experiment = served
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
    traffic(column_store, endpoint, experiment, start, n=60)
    built = dataset_build(
        user=deployer, endpoint=endpoint, experiment=experiment, start=start, end=start + timedelta(hours=1),
        name="clicks", store=column_store,
    )  # fmt: skip
    trained = experiment.arms.exclude(is_control=True).get().artifact.version
    ModelVersion.objects.filter(pk=trained.pk).update(tags={"dataset": built.public_id}, metrics={"auc": 0.6123})
    return built, trained


@pytest.mark.django_db
def test_list_and_detail_show_lineage_statistics_and_trained_versions(
    client, deployer, bob, dataset, django_assert_max_num_queries
):
    built, trained = dataset
    client.force_login(deployer)
    with django_assert_max_num_queries(12):
        page = client.get(reverse("experiments:dataset-list"))
    text = page.content.decode()
    assert page.status_code == 200 and "clicks v1" in text and built.public_id in text
    assert reverse("registry:version-detail", args=[trained.pk]) in text
    rows = client.get(reverse("experiments:dataset-list"), {"endpoint": "nowhere"}, HTTP_HX_REQUEST="true")
    assert (
        rows.status_code == 200
        and "<html" not in rows.content.decode()
        and "No dataset of nowhere" in rows.content.decode()
    )

    detail = client.get(reverse("experiments:dataset-detail", args=[built.public_id])).content.decode()
    for shown in (
        built.endpoint.name,
        built.experiment.public_id,
        "60 (",
        f"{100 * built.statistics['label_rate']:.2f}".rstrip("0").rstrip(".") + " % clicked",
        *built.lineage["serving_versions"],
        "sparse",
        "0.6123",
        reverse("registry:version-detail", args=[trained.pk]),
        reverse("experiments:run-detail", args=[built.mlflow_run_id]),
    ):
        assert shown in detail, shown

    client.force_login(bob)
    assert client.get(reverse("experiments:dataset-detail", args=[built.public_id])).status_code == 404
    assert built.public_id not in client.get(reverse("experiments:dataset-list")).content.decode()
