"""The explicit policy for a step that stays inconclusive: per endpoint (default pause,
which never rolls a healthy candidate back), overridable per rollout; API and form."""

from datetime import timedelta

import pytest
from django.urls import reverse

from deployments.models import PoolModel, PoolModelState, Rollout
from deployments.rollout_machine import State
from deployments.services import endpoints as endpoint_services
from deployments.services import rollouts as services
from harness import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoint(deployer, team_a, artifact_factory):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    return endpoint_services.endpoint_create(
        user=deployer, name="ctr", pool=pool, stable_artifact=artifact_factory(team_a)
    )


def _to_canary(rollout):
    PoolModel.objects.filter(pool=rollout.endpoint.pool).update(state=PoolModelState.READY, replica_ready={"r0": True})
    return services.rollout_reconcile(rollout_id=rollout.pk)


def test_endpoint_policy_is_the_rollouts_default_and_a_rollout_may_override_it(
    deployer_api, endpoint, artifact_factory, team_a
):
    assert deployer_api.get("/api/v1/endpoints/ctr/").json()["on_inconclusive"] == "pause"
    bad = deployer_api.patch("/api/v1/endpoints/ctr/", {"on_inconclusive": "ignore"}, format="json")
    assert bad.status_code == 400 and "on_inconclusive" in str(bad.json())
    assert (
        deployer_api.patch("/api/v1/endpoints/ctr/", {"on_inconclusive": "promote"}, format="json").json()[
            "on_inconclusive"
        ]
        == "promote"
    )
    first = deployer_api.post(
        "/api/v1/endpoints/ctr/rollouts/", {"candidate_artifact": artifact_factory(team_a).pk}, format="json"
    )
    assert first.status_code == 201 and first.json()["on_inconclusive"] == "promote"
    deployer_api.post(f"/api/v1/rollouts/{first.json()['id']}/rollback/", {}, format="json")

    Rollout.objects.filter(pk=first.json()["id"]).update(state=State.ROLLED_BACK)
    own = deployer_api.post(
        "/api/v1/endpoints/ctr/rollouts/",
        {"candidate_artifact": artifact_factory(team_a).pk, "on_inconclusive": "rollback"},
        format="json",
    )
    assert own.json()["on_inconclusive"] == "rollback"


def test_promote_policy_goes_on_at_the_deadline_and_pause_holds(deployer, endpoint, artifact_factory, team_a):
    endpoint_services.endpoint_update(user=deployer, endpoint=endpoint, on_inconclusive="promote")
    endpoint.refresh_from_db()
    rollout = _to_canary(
        services.rollout_start(
            user=deployer,
            endpoint=endpoint,
            candidate=artifact_factory(team_a),
            steps_bp=[500, 10000],
            step_min_seconds=5,
            step_deadline_seconds=60,
        )
    )
    r, decision = services.rollout_apply_verdict(
        rollout_id=rollout.pk,
        outcome="inconclusive",
        reason="waiting",
        step_requests=40,
        now=rollout.step_started_at + timedelta(seconds=61),
    )
    assert (r.state, r.step_index) == (State.CANARY, 1) and "promote" in decision.reason
    services.rollout_rollback(user=deployer, rollout=r)

    Rollout.objects.filter(pk=r.pk).update(state=State.ROLLED_BACK)
    paused = _to_canary(
        services.rollout_start(
            user=deployer,
            endpoint=endpoint,
            candidate=artifact_factory(team_a),
            on_inconclusive="pause",
            step_deadline_seconds=60,
        )
    )
    r, _ = services.rollout_apply_verdict(
        rollout_id=paused.pk,
        outcome="inconclusive",
        reason="waiting",
        step_requests=40,
        now=paused.step_started_at + timedelta(seconds=61),
    )
    assert r.state == State.PAUSED


def test_the_start_form_sends_the_policy_and_the_baseline_choice(client, deployer, endpoint, artifact_factory, team_a):
    client.force_login(deployer)
    candidate = artifact_factory(team_a)
    page = client.get(reverse("deployments:endpoint-detail", args=["ctr"])).content.decode()
    assert (
        'name="on_inconclusive"' in page
        and '<option value="pause" selected>' in page
        and 'name="fair_baseline"' in page
    )
    response = client.post(
        reverse("deployments:rollout-start", args=["ctr"]),
        {
            "candidate_artifact": candidate.pk,
            "steps_pct": "10,100",
            "step_min_seconds": "30",
            "on_inconclusive": "promote",
            "fair_baseline_present": "1",
        },
    )  # the box unticked
    assert response.status_code == 302

    rollout = Rollout.objects.get(candidate_artifact=candidate)
    assert rollout.on_inconclusive == "promote" and rollout.baseline_model == ""
