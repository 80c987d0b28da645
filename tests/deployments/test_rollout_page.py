"""The endpoint page from one source of truth (deployments.selectors.rollout_page) and the
rollout form that helps (deployments.forms.RolloutStartForm)."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from deployments.models import PoolModel, PoolModelState, Rollout
from deployments.rollout_machine import State
from deployments.selectors.rollout_page import chart_config, endpoint_page, rollout_arms
from deployments.services import endpoints as endpoint_services
from deployments.services import rollouts as services
from harness import factories
from registry.models import Artifact, Build

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(deployer, team_a, artifact_factory):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    stable = artifact_factory(team_a, model_name="ctr")
    endpoint = endpoint_services.endpoint_create(user=deployer, name="demo-ctr", pool=pool, stable_artifact=stable)
    PoolModel.objects.update(state=PoolModelState.READY, replica_ready={"r0": True})
    client = Client()
    client.force_login(deployer)
    return endpoint, client


def _canary(deployer, endpoint, candidate, steps_bp=(2000, 5000, 10000)):
    rollout = services.rollout_start(user=deployer, endpoint=endpoint, candidate=candidate, steps_bp=list(steps_bp))
    PoolModel.objects.update(state=PoolModelState.READY, replica_ready={"r0": True})
    services.rollout_reconcile(rollout_id=rollout.pk)
    rollout.refresh_from_db()
    assert rollout.state == State.CANARY
    return rollout


def _part(html: str, marker: str) -> str:
    start = html.index(marker)
    return html[start : html.index("</span>", start)]


def test_header_card_and_table_say_the_same_step(setup, deployer, team_a, artifact_factory):
    endpoint, client = setup
    rollout = _canary(deployer, endpoint, artifact_factory(team_a, model_name="ctr"))
    Rollout.objects.filter(pk=rollout.pk).update(step_index=1)
    page = client.get(f"/deployments/endpoints/demo-ctr/?partial=status&rollout={rollout.pk}", HTTP_HX_REQUEST="true")
    assert page.status_code == 200
    html = page.content.decode()
    assert "canary · step 2 of 3" in _part(html, 'id="endpoint-status"')
    assert "canary · step 2 of 3" in _part(html, 'id="rollout-state"')
    assert "canary · step 2 of 3" in _part(html, f'id="rollout-row-{rollout.pk}"')
    assert "<strong>50.0 %</strong>" in html  # the current step is the highlighted weight
    assert 'id="alert-banner-slot" hx-swap-oob="true"' in html  # the banner refreshes with the rest
    assert 'hx-preserve="true"' in html  # the charts are kept across refreshes, not redrawn


def test_timer_stops_when_the_rollout_is_over(setup, deployer, team_a, artifact_factory):
    endpoint, client = setup
    rollout = _canary(deployer, endpoint, artifact_factory(team_a, model_name="ctr"))
    started = timezone.now() - timedelta(seconds=42)
    Rollout.objects.filter(pk=rollout.pk).update(step_started_at=started)
    running = endpoint_page(user=deployer, endpoint=endpoint)["status"].timer
    assert running.running and 41 <= running.seconds <= 60
    services.rollout_rollback(user=deployer, rollout=Rollout.objects.get(pk=rollout.pk), reason="operator says no")
    PoolModel.objects.filter(artifact=rollout.candidate_artifact).update(state=PoolModelState.UNLOADED)
    services.rollout_reconcile(rollout_id=rollout.pk)
    assert Rollout.objects.get(pk=rollout.pk).state == State.ROLLED_BACK
    later = timezone.now() + timedelta(minutes=10)
    frozen = [
        endpoint_page(user=deployer, endpoint=endpoint, now=now)["status"].timer for now in (timezone.now(), later)
    ]
    assert frozen[0] == frozen[1] and not frozen[0].running and 41 <= frozen[0].seconds <= 60
    done = client.get(f"/deployments/endpoints/demo-ctr/?partial=status&rollout={rollout.pk}", HTTP_HX_REQUEST="true")
    html = done.content.decode()
    assert done.status_code == 286 and "hx-trigger" not in html  # polling stops, this last swap shows the end
    assert "rolled back" in _part(html, 'id="rollout-state"') and "rolled back" in _part(
        html, f'id="rollout-row-{rollout.pk}"'
    )
    assert "serving" in _part(html, 'id="endpoint-status"')
    assert 'data-running="false"' in html and "step timer stopped at" in html


def test_form_offers_only_this_models_artifacts_the_pool_can_serve(setup, team_a, artifact_factory):
    endpoint, client = setup
    fits = artifact_factory(team_a, model_name="ctr", variant="onnx-int8")
    gpu_only = artifact_factory(team_a, model_name="ctr", variant="tensorrt")
    other_model = artifact_factory(team_a, model_name="fraud", variant="onnx-fp32")
    html = client.get("/deployments/endpoints/demo-ctr/").content.decode()
    select = html[
        html.index('name="candidate_artifact"') : html.index("</select>", html.index('name="candidate_artifact"'))
    ]
    assert f'value="{fits.pk}"' in select
    assert f'value="{gpu_only.pk}"' not in select and f'value="{other_model.pk}"' not in select
    assert f'value="{endpoint.stable_artifact_id}"' not in select
    assert "1 GPU variant hidden" in html and "(CPU)" in html
    # A hand-made POST of what is not offered is refused as such, and nothing starts.
    response = client.post(
        "/deployments/endpoints/demo-ctr/rollouts/",
        {"candidate_artifact": other_model.pk, "steps_pct": "5,100", "step_min_seconds": "30"},
    )
    assert response.status_code == 400 and "Choose one of the listed candidates." in response.content.decode()
    assert not Rollout.objects.exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("steps_pct", "50, 25, 100", "Steps must increase, e.g. 5, 25, 50, 100."),
        (
            "steps_pct",
            "5, ten, 100",
            "&#x27;ten&#x27; is not a number: give percentages separated by commas, e.g. 5, 25, 50, 100.",
        ),
        ("steps_pct", "5, 150", "Each step is a percentage above 0 and at most 100"),
        ("step_min_seconds", "half a minute", "Minimum seconds per step must be a number, e.g. 30."),
        ("step_min_seconds", "-3", "Minimum seconds per step cannot be negative."),
    ],
)
def test_bad_input_gets_a_human_message_and_keeps_what_was_typed(
    setup, team_a, artifact_factory, field, value, message
):
    _, client = setup
    candidate = artifact_factory(team_a, model_name="ctr", variant="onnx-int8")
    typed = {
        "candidate_artifact": str(candidate.pk),
        "steps_pct": "5, 25, 50, 100",
        "step_min_seconds": "12",
        "shadow_seconds": "7",
    }
    typed[field] = value
    response = client.post("/deployments/endpoints/demo-ctr/rollouts/", typed)
    html = response.content.decode()
    assert response.status_code == 400 and message in html
    assert "could not convert" not in html and "steps_bp" not in html and "10000" not in html  # no internals
    assert f'value="{value}"' in html  # what was typed is still there
    assert 'value="7"' in html and f'<option value="{candidate.pk}" selected' in html
    assert not Rollout.objects.exists()


def test_a_good_form_starts_the_rollout(setup, team_a, artifact_factory):
    _, client = setup
    candidate = artifact_factory(team_a, model_name="ctr", variant="onnx-int8")
    response = client.post(
        "/deployments/endpoints/demo-ctr/rollouts/",
        {"candidate_artifact": candidate.pk, "steps_pct": "5%, 25, 50.5, 100", "step_min_seconds": "12"},
    )
    rollout = Rollout.objects.get()
    assert (
        response.status_code == 302 and rollout.steps_bp == [500, 2500, 5050, 10000] and rollout.step_min_seconds == 12
    )


def test_events_name_steps_like_the_header(setup, deployer, team_a, artifact_factory):
    endpoint, client = setup
    rollout = _canary(deployer, endpoint, artifact_factory(team_a, model_name="ctr"))
    html = client.get(f"/deployments/endpoints/demo-ctr/?rollout={rollout.pk}").content.decode()
    events = html[html.index("<h2>Events</h2>") :]
    assert "loading → canary · step 1 of 3" in events and "canary[0]" not in events


def test_every_arm_has_its_share_the_baseline_included(setup, deployer, team_a, artifact_factory, api_for):
    """Step 1 read "candidate 50 % · stable 0 %", the other 50 % (the baseline) unlabelled.
    One selector (rollout_arms) gives the page and the API's `arms` field."""
    endpoint, client = setup
    rollout = _canary(deployer, endpoint, artifact_factory(team_a, model_name="ctr"), steps_bp=(2500, 5000, 10000))
    assert rollout.baseline_model  # the fair baseline is on by default
    arms = rollout_arms(rollout)
    assert [(a["role"], a["weight_bp"]) for a in arms] == [("candidate", 2500), ("baseline", 2500), ("stable", 5000)]
    assert arms[1]["variant"] == "v1-onnx-fp32-baseline" and arms[2]["variant"] == "v1-onnx-fp32"
    html = client.get(f"/deployments/endpoints/demo-ctr/?rollout={rollout.pk}").content.decode()
    shares = html[html.index('id="arm-shares"') : html.index("steps ", html.index('id="arm-shares"'))]
    text = " ".join(re.sub(r"<[^>]+>", " ", shares).split())
    assert "candidate 25 % · baseline 25 % · stable 50 %" in text
    listing = client.get("/deployments/endpoints/").content.decode()
    assert "candidate 25 % · baseline 25 % · stable 50 %" in listing  # the endpoints list says the same
    body = api_for(deployer).get(f"/api/v1/rollouts/{rollout.pk}/").json()
    assert body["arms"] == arms and sum(a["weight_bp"] for a in body["arms"]) == 10000
    Rollout.objects.filter(pk=rollout.pk).update(step_index=1)  # 50 %: the baseline takes what the stable had
    rollout.refresh_from_db()
    assert [(a["role"], a["weight_bp"]) for a in rollout_arms(rollout)] == [
        ("candidate", 5000),
        ("baseline", 5000),
        ("stable", 0),
    ]


def test_arms_of_a_shadow_and_of_a_rollout_without_baseline(setup, deployer, team_a, artifact_factory):
    endpoint, _ = setup
    candidate = artifact_factory(team_a, model_name="ctr")
    shadow = factories.rollout(endpoint, candidate, state=State.SHADOW, steps_bp=[10000])
    assert [(a["role"], a["weight_bp"]) for a in rollout_arms(shadow)] == [("shadow", 0), ("stable", 10000)]
    Rollout.objects.filter(pk=shadow.pk).update(state=State.ROLLED_BACK)
    plain = factories.rollout(endpoint, candidate, state=State.CANARY, steps_bp=[1000, 10000])
    assert [(a["role"], a["weight_bp"]) for a in rollout_arms(plain)] == [("candidate", 1000), ("stable", 9000)]
    config = chart_config(plain)
    assert {a["role"]: a["color"] for a in config["arms"]} == {"candidate": "#f79009", "stable": "#2f5bea"}
    assert config["until"] is None  # live: the range ends now


def test_a_version_built_twice_is_offered_once(setup, deployer, team_a, artifact_factory):
    endpoint, client = setup
    candidate = artifact_factory(team_a, model_name="ctr")
    rebuilt = Build.objects.create(version=candidate.version, targets=["onnx-fp32"], status="succeeded")
    newer = Artifact.objects.create(
        version=candidate.version,
        build=rebuilt,
        variant="onnx-fp32",
        status=candidate.status,
        triton_model_name=candidate.triton_model_name,
        path=candidate.path,
        sha256=candidate.sha256,
    )
    html = client.get("/deployments/endpoints/demo-ctr/").content.decode()
    assert html.count("ctr v2 · onnx-fp32") == 1 and f'value="{newer.pk}"' in html
    # another build of the stable's own version and variant is no candidate either
    stable = endpoint.stable_artifact
    stable_rebuilt = Artifact.objects.create(
        version=stable.version,
        build=Build.objects.create(version=stable.version, targets=["onnx-fp32"], status="succeeded"),
        variant=stable.variant,
        status=stable.status,
        triton_model_name=stable.triton_model_name,
        path=stable.path,
        sha256=stable.sha256,
    )
    html = client.get("/deployments/endpoints/demo-ctr/").content.decode()
    form = html[html.index('name="candidate_artifact"') :].split("</select>")[0]  # the candidates offered
    assert f'value="{stable_rebuilt.pk}"' not in form and f'value="{newer.pk}"' in form
