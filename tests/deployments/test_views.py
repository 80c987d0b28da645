"""Dashboard pages: pool list with health, pool page with replicas, models, logs."""

import pytest
from django.urls import reverse

from deployments.models import PoolReplica
from deployments.services import pools

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(deployer, team_a):
    pool = pools.pool_create(user=deployer, name="dash", team=team_a, replicas=1, cost_per_replica_hour="0.5")
    PoolReplica.objects.create(pool=pool, name="r0", status="down", last_error="process 123 exited")
    return pool


def test_nav_shows_deployments_and_the_list_shows_health(client, deployer, pool):
    client.force_login(deployer)
    response = client.get(reverse("deployments:pool-list"))
    assert response.status_code == 200
    html = response.content.decode()
    assert ">Deployments</a>" in html
    assert "dash" in html and "pending" in html


def test_pool_page_shows_replicas_and_polls_live_parts(client, deployer, pool, pools_dir):
    log = pools_dir / "dash" / "replicas" / "r0"
    log.mkdir(parents=True)
    (log / "tritonserver.log").write_text("I1122 server is alive\nE1122 something broke here\n")
    client.force_login(deployer)
    page = client.get(reverse("deployments:pool-detail", args=["dash"])).content.decode()
    assert "process 123 exited" in page and 'hx-trigger="every 2s"' in page
    live = client.get(reverse("deployments:pool-detail", args=["dash"]) + "?partial=live", HTTP_HX_REQUEST="true")
    assert live.status_code == 200 and "<html" not in live.content.decode() and "r0" in live.content.decode()
    tail = client.get(
        reverse("deployments:pool-detail", args=["dash"]) + "?partial=log&replica=r0", HTTP_HX_REQUEST="true"
    )
    assert "something broke here" in tail.content.decode()


def test_other_teams_pool_page_is_404(client, bob, pool):
    client.force_login(bob)
    assert client.get(reverse("deployments:pool-detail", args=["dash"])).status_code == 404


def test_scale_form_reports_bad_input_without_changing_anything(client, deployer, pool):
    client.force_login(deployer)
    response = client.post(reverse("deployments:pool-scale", args=["dash"]), {"replicas": "-3"}, follow=True)
    assert "replicas" in response.content.decode() and "out of range" in response.content.decode()
    pool.refresh_from_db()
    assert pool.replicas == 1


def test_live_parts_stop_polling_once_the_pool_is_gone(client, deployer, pool):
    client.force_login(deployer)
    url = reverse("deployments:pool-detail", args=["dash"])
    pool.delete()
    assert client.get(url + "?partial=live", HTTP_HX_REQUEST="true").status_code == 286
    assert client.get(url).status_code == 404


def test_model_rows_show_state_error_and_readiness(client, deployer, pool, artifact_factory, team_a):
    from deployments.models import PoolModel

    artifact = artifact_factory(team_a)
    PoolModel.objects.create(
        pool=pool,
        artifact=artifact,
        triton_model_name=artifact.triton_model_name,
        state="failed",
        error="load failed for model: Protobuf parsing failed",
        replica_ready={"r0": False},
    )
    client.force_login(deployer)
    html = client.get(reverse("deployments:pool-detail", args=["dash"])).content.decode()
    assert artifact.triton_model_name in html and "Protobuf parsing failed" in html and "no statistics" in html


def test_admin_shows_pools_with_replicas_and_models(client, staff, pool):
    client.force_login(staff)
    assert client.get("/admin/deployments/servingpool/").status_code == 200
    page = client.get(f"/admin/deployments/servingpool/{pool.pk}/change/")
    assert page.status_code == 200 and "process 123 exited" in page.content.decode()
