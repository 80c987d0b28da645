import pytest
from django.test import Client

from deployments.models import PoolModel, PoolModelState, Rollout
from deployments.rollout_machine import State
from deployments.services import endpoints as endpoint_services
from deployments.services import rollouts as services
from harness import factories
from registry.models import Event

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(deployer, team_a, artifact_factory):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    stable, candidate = artifact_factory(team_a), artifact_factory(team_a)
    endpoint = endpoint_services.endpoint_create(user=deployer, name="ctr", pool=pool, stable_artifact=stable)
    PoolModel.objects.update(state=PoolModelState.READY, replica_ready={"r0": True})
    client = Client()
    client.force_login(deployer)
    return endpoint, candidate, client


def test_endpoint_pages_and_rollout_from_the_dashboard(setup):
    endpoint, candidate, client = setup
    listing = client.get("/deployments/endpoints/").content.decode()
    assert "ctr" in listing and "stable 100 %" in listing
    page = client.get("/deployments/endpoints/ctr/").content.decode()
    assert "No rollout yet" in page and 'name="candidate_artifact"' in page
    response = client.post(
        "/deployments/endpoints/ctr/rollouts/",
        {"candidate_artifact": candidate.pk, "steps_pct": "10,50,100", "step_min_seconds": "5"},
    )
    rollout = Rollout.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"?rollout={rollout.pk}")
    assert rollout.steps_bp == [1000, 5000, 10000]
    PoolModel.objects.update(state=PoolModelState.READY, replica_ready={"r0": True})
    services.rollout_reconcile(rollout_id=rollout.pk)
    page = client.get(f"/deployments/endpoints/ctr/?rollout={rollout.pk}").content.decode()
    assert (
        'id="rollout-status"' in page and "candidate <strong>10 %</strong>" in page and 'hx-trigger="every 2s"' in page
    )
    assert 'id="chart-request_rate"' in page and "rollout_charts.js" in page
    partial = client.get(f"/deployments/endpoints/ctr/?partial=status&rollout={rollout.pk}", HTTP_HX_REQUEST="true")
    assert partial.status_code == 200 and "<html" not in partial.content.decode()


def test_manual_actions_confirm_then_act_and_polling_stops_when_done(setup, deployer):
    endpoint, candidate, client = setup
    rollout = services.rollout_start(user=deployer, endpoint=endpoint, candidate=candidate)
    confirm = client.get(f"/deployments/rollouts/{rollout.pk}/rollback/")
    assert confirm.status_code == 200 and "Roll back now" in confirm.content.decode()
    assert Rollout.objects.get().state == State.LOADING  # a GET changes nothing
    response = client.post(
        f"/deployments/rollouts/{rollout.pk}/rollback/",
        {"reason": "bad offline eval", "generation": rollout.generation},
    )
    assert response.status_code == 302
    rollout.refresh_from_db()
    assert rollout.state == State.ROLLING_BACK and rollout.reason == "bad offline eval"
    assert Event.objects.filter(object_type="deployments.rollout", to_state="rolling_back", actor=deployer).exists()
    stale = client.post(f"/deployments/rollouts/{rollout.pk}/promote/", {"generation": 1}, follow=True)
    assert "changed meanwhile" in stale.content.decode()
    services.rollout_reconcile(rollout_id=rollout.pk)
    PoolModel.objects.filter(artifact=candidate).update(state=PoolModelState.UNLOADED)
    services.rollout_reconcile(rollout_id=rollout.pk)
    done = client.get(f"/deployments/endpoints/ctr/?partial=status&rollout={rollout.pk}", HTTP_HX_REQUEST="true")
    assert done.status_code == 286
    assert client.get(f"/deployments/rollouts/{rollout.pk}/explode/").status_code == 404


def test_other_teams_cannot_see_endpoints(setup, bob):
    client = Client()
    client.force_login(bob)
    assert client.get("/deployments/endpoints/ctr/").status_code == 404
    assert "ctr" not in client.get("/deployments/endpoints/").content.decode()


def test_admin_actions_call_the_rollout_services(setup, deployer, staff):
    endpoint, candidate, _ = setup
    rollout = services.rollout_start(user=deployer, endpoint=endpoint, candidate=candidate)
    admin = Client()
    admin.force_login(staff)
    assert admin.get("/admin/deployments/rollout/").status_code == 200
    assert admin.get("/admin/deployments/endpoint/").status_code == 200
    admin.post("/admin/deployments/rollout/", {"action": "rollout_roll_back", "_selected_action": [rollout.pk]})
    rollout.refresh_from_db()
    assert rollout.state == State.ROLLING_BACK and rollout.reason == "roll back from the admin console"
    assert Event.objects.filter(object_type="deployments.rollout", to_state="rolling_back", actor=staff).exists()
