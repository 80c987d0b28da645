"""The rollout card offers the buttons the rollout machine allows in its state (no Pause
while it loads: rollout_pause would refuse it), and a finished rollout says who serves
instead of its last split ("candidate 100 % · baseline 0 % · stable 0 %")."""

import pytest
from django.test import Client

from deployments.rollout_machine import State
from deployments.selectors.rollout_page import rollout_actions
from harness import factories

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "state, actions",
    [
        (State.PENDING, ("rollback",)),
        (State.LOADING, ("rollback",)),
        (State.SHADOW, ("pause", "promote", "rollback")),
        (State.CANARY, ("pause", "promote", "rollback")),
        (State.PAUSED, ("resume", "promote", "rollback")),
        (State.PROMOTING, ("rollback",)),
        (State.ROLLING_BACK, ()),
        (State.SUCCEEDED, ()),
    ],
)
def test_the_buttons_are_the_machines_transitions(state, actions):
    assert rollout_actions(state) == actions


def test_a_loading_rollout_offers_no_pause_and_a_finished_one_says_who_serves(deployer, team_a, artifact_factory):
    pool = factories.pool(team_a, ready_replicas=1)
    endpoint = factories.endpoint(pool, artifact_factory(team_a, model_name="ctr"), name="ctr")
    rollout = factories.rollout(endpoint, artifact_factory(team_a, model_name="ctr"), state=State.LOADING)
    client = Client()
    client.force_login(deployer)
    card = client.get("/deployments/endpoints/ctr/").content.decode()
    card = card[card.index('id="rollout-card"') : card.index("</div>", card.index('id="rollout-card"'))]
    assert ">Roll back<" in card and ">Pause<" not in card and ">Promote<" not in card
    type(rollout).objects.filter(pk=rollout.pk).update(state=State.SUCCEEDED)
    page = client.get("/deployments/endpoints/ctr/").content.decode()
    assert "v2-onnx-fp32 is the stable now and takes 100 % of traffic" in page
    assert 'id="arm-shares"' not in page and ">Pause<" not in page
