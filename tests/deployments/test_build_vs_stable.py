"""A build's page compares its variants with the stable of each endpoint serving its model
(deployments/selectors/stable_compare.py through a template tag the registry page loads):
a version 80x slower than the stable says so; another team's endpoint is not named."""

import pytest
from django.test import Client

from harness import factories
from registry.models import Artifact

pytestmark = pytest.mark.django_db


def _bench(artifact, p50_ms: float, p99_ms: float) -> None:
    Artifact.objects.filter(pk=artifact.pk).update(
        benchmark={"batches": {"1": {"p50_ms": p50_ms, "p99_ms": p99_ms, "throughput_rps": 1000 / p50_ms}}}
    )


def test_the_build_page_says_a_version_is_80x_slower_than_the_stable(deployer, team_a, team_b, artifact_factory):
    pool = factories.pool(team_a, ready_replicas=1)
    stable = artifact_factory(team_a, model_name="ctr")
    factories.endpoint(pool, stable, name="demo-ctr")
    _bench(stable, 0.05, 0.2)
    slow = artifact_factory(team_a, model_name="ctr")  # v2, built on its own
    _bench(slow, 4.0, 9.5)
    other = factories.endpoint(factories.pool(team_b), artifact_factory(team_b, model_name="theirs"), name="theirs")
    client = Client()
    client.force_login(deployer)
    page = client.get(f"/models/builds/{slow.build_id}/").content.decode()
    table = page[page.index('id="build-vs-stable"') :]
    table = table[: table.index("</table>")]
    assert 'data-endpoint="demo-ctr"' in table and "v1-onnx-fp32" in table
    assert "4.000 vs 0.050 ms" in table and "9.500 vs 0.200 ms" in table
    assert "80.0× slower</strong> than the stable" in table
    assert other.name not in table
    own = client.get(
        f"/models/builds/{stable.build_id}/"
    ).content.decode()  # the stable's own build: nothing to compare
    assert 'id="build-vs-stable"' not in own
