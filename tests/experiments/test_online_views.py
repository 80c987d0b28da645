"""The experiment page people watch: live part polled with htmx and stopped with
286 once nothing moves by itself, Ship and Stop behind a confirmation with a reason,
`shipping` until the rollout succeeded (a failed ship says so), working links, table and
chart from the same analysis row, counts explained; the endpoint page shows a running
experiment and offers no rollout it would refuse."""

import json
import re

import numpy as np
import pytest
from django.test import Client
from django.utils import timezone

from deployments.rollout_machine import State
from experiments.models import Experiment, Exposure
from experiments.services import online as services
from experiments.store import default_store
from harness import factories
from registry.models import Event


@pytest.fixture
def decided(team_a, deployer, artifact_factory):
    """An experiment on `ctr-demo` decided to ship its candidate (a far better CTR)."""
    pool = factories.pool(team_a, ready_replicas=1)
    stable, candidate = artifact_factory(team_a), artifact_factory(team_a)
    endpoint = factories.endpoint(pool, stable, name="ctr-demo")
    exp = services.experiment_create(
        user=deployer, endpoint=endpoint, name="better", candidates=[candidate], baseline_rate=0.2, mde=0.05
    )
    services.experiment_start(user=deployer, experiment=exp)
    arms = {a.is_control: a for a in exp.arms.all()}
    t0 = timezone.now()
    rows = [
        {"request_id": f"{int(c)}-{u}-{j}", "experiment": exp.pk, "arm": arms[c].pk, "unit_key": f"{c}{u}", "time": t0}
        for c in (True, False)
        for u in range(400)
        for j in range(5)
    ]
    default_store().write_exposures(rows)
    rng = np.random.default_rng(0)
    events = [
        {"event_id": f"c-{r['request_id']}", "type": "click", "request_id": r["request_id"], "time": t0}
        for r in rows
        if rng.random() < (0.1 if r["request_id"].startswith("1-") else 0.3)
    ]
    default_store().write_feedback(team=team_a, endpoint_name="ctr-demo", experiments=[exp], events=events)
    return exp


def _client(user):
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_page_polls_while_running_and_stops_with_286_once_decided(decided, deployer):
    client = _client(deployer)
    page = client.get(f"/experiments/{decided.pk}/").content.decode()
    assert 'hx-trigger="every 2s"' in page and "partial=live" in page
    live = client.get(f"/experiments/{decided.pk}/?partial=live", HTTP_HX_REQUEST="true")
    assert live.status_code == 200 and 'id="experiment-live"' in live.content.decode()
    services.experiment_analyze(experiment_id=decided.pk)  # the tick decides: nothing moves by itself any more
    done = client.get(f"/experiments/{decided.pk}/?partial=live", HTTP_HX_REQUEST="true")
    body = done.content.decode()
    assert done.status_code == 286 and "decided" in body and 'id="ship-button"' in body
    assert 'hx-trigger="every 2s"' not in body


@pytest.mark.django_db
def test_table_and_chart_come_from_the_same_analysis_row(decided, deployer):
    services.experiment_analyze(experiment_id=decided.pk)
    decided.refresh_from_db()
    body = _client(deployer).get(f"/experiments/{decided.pk}/").content.decode()
    chart = json.loads(re.search(r'id="lift-chart-data" type="application/json">(.*?)</script>', body).group(1))
    cand = decided.arms.get(is_control=False).name
    lift, lower, upper = chart["series"][cand][-1]
    shown = re.search(rf'data-arm="{re.escape(cand)}".*?class="mono lift">([^<]*)<', body, re.S).group(1)
    assert shown.strip() == f"{round(lift * 100)} % [{round(lower * 100)}, {round(upper * 100)}]"
    assert "the chart&#x27;s last point" in body or "the chart's last point" in body
    assert "late" in body and "attribution window" in body and "unknown" in body and "before its impression" in body


@pytest.mark.django_db
def test_ship_from_the_page_with_a_reason_then_shipped_only_when_the_rollout_succeeds(decided, deployer):
    services.experiment_analyze(experiment_id=decided.pk)
    client = _client(deployer)
    confirm = client.get(f"/experiments/{decided.pk}/ship/").content.decode()
    assert 'name="reason"' in confirm and 'id="confirm-ship"' in confirm
    res = client.post(f"/experiments/{decided.pk}/ship/", {"reason": "clear win"})
    assert res.status_code == 302
    decided.refresh_from_db()
    assert decided.state == "shipping" and decided.rollout_id
    event = Event.objects.filter(object_id=str(decided.pk), to_state="shipping").latest("pk")
    assert "clear win" in event.reason
    page = client.get(f"/experiments/{decided.pk}/").content.decode()
    link = f"/deployments/endpoints/ctr-demo/?rollout={decided.rollout_id}"
    assert "Shipping" in page and link in page and client.get(link).status_code == 200  # the link works
    assert services.experiments_ship_follow() == 0  # the rollout is still running: still shipping
    from deployments.models import Rollout

    Rollout.objects.filter(pk=decided.rollout_id).update(state=State.SUCCEEDED)
    assert services.experiments_ship_follow() == 1
    decided.refresh_from_db()
    assert decided.state == "shipped"
    final = client.get(f"/experiments/{decided.pk}/?partial=live", HTTP_HX_REQUEST="true")
    assert final.status_code == 286 and "succeeded" in final.content.decode()


@pytest.mark.django_db
def test_a_ship_that_waits_for_traffic_says_so_at_once_on_the_page_the_results_and_watch(decided, deployer):
    """Read from the rollout at each poll, not at the next analysis tick (15 s of a 30 s wait)."""
    from deployments.models import Rollout
    from modelplane_cli.commands.experiments import results_lines

    services.experiment_analyze(experiment_id=decided.pk)
    services.experiment_ship(user=deployer, experiment=Experiment.objects.get(pk=decided.pk))
    decided.refresh_from_db()
    client = _client(deployer)
    results = client.get(f"/api/v1/experiments/{decided.public_id}/results/").json()
    assert results["ship"] == {"rollout": decided.rollout_id, "state": "started", "waiting": ""}
    assert 'id="ship-waiting"' not in client.get(f"/experiments/{decided.pk}/").content.decode()
    waits = "waiting for traffic: no request has reached the candidate yet; every check needs live traffic"
    Rollout.objects.filter(pk=decided.rollout_id).update(state=State.CANARY, reason=waits)
    live = client.get(f"/experiments/{decided.pk}/?partial=live", HTTP_HX_REQUEST="true").content.decode()
    assert re.search(r'id="ship-waiting">The rollout is waiting for traffic: no request', live), live
    results = client.get(f"/api/v1/experiments/{decided.public_id}/results/").json()
    assert results["ship"]["waiting"] == waits
    assert f"  ship: rollout #{decided.rollout_id} {waits}" in results_lines(results)
    Rollout.objects.filter(pk=decided.rollout_id).update(reason="the candidate gets requests: the judge is judging")
    assert 'id="ship-waiting"' not in client.get(f"/experiments/{decided.pk}/").content.decode()
    Rollout.objects.filter(pk=decided.rollout_id).update(state=State.SUCCEEDED, reason="promotion held")
    assert services.experiments_ship_follow() == 1
    results = client.get(f"/api/v1/experiments/{decided.public_id}/results/").json()
    assert results["state"] == "shipped" and "waiting" not in results["ship"], results["ship"]


@pytest.mark.django_db
def test_a_failed_ship_says_so_and_may_be_tried_again(decided, deployer):
    from deployments.models import Rollout

    services.experiment_analyze(experiment_id=decided.pk)
    services.experiment_ship(user=deployer, experiment=Experiment.objects.get(pk=decided.pk))
    decided.refresh_from_db()
    Rollout.objects.filter(pk=decided.rollout_id).update(state=State.ROLLED_BACK, reason="p99 breached the SLO")
    assert services.experiments_ship_follow() == 1
    decided.refresh_from_db()
    assert decided.state == "decided" and decided.evidence["ship"]["state"] == "rolled_back"
    page = _client(deployer).get(f"/experiments/{decided.pk}/").content.decode()
    assert "Ship failed" in page and "p99 breached the SLO" in page and 'id="ship-button"' in page


@pytest.mark.django_db
def test_stop_from_the_page_needs_a_confirmation_and_keeps_the_reason(decided, deployer, bob):
    client = _client(deployer)
    assert 'id="confirm-stop"' in client.get(f"/experiments/{decided.pk}/stop/").content.decode()
    assert _client(bob).post(f"/experiments/{decided.pk}/stop/", {"reason": "x"}).status_code == 404
    client.post(f"/experiments/{decided.pk}/stop/", {"reason": "wrong audience"})
    decided.refresh_from_db()
    assert decided.state == "stopped"
    assert Event.objects.filter(object_id=str(decided.pk), to_state="stopped", reason="wrong audience").exists()


@pytest.mark.django_db
def test_endpoint_page_shows_the_running_experiment_and_offers_no_rollout(decided, deployer):
    client = _client(deployer)
    page = client.get("/deployments/endpoints/ctr-demo/").content.decode()
    assert 'id="endpoint-experiment"' in page and f"/experiments/{decided.pk}/" in page
    assert "50.0 %" in page and 'id="rollout-form"' not in page and "Rollouts wait" in page
    services.experiment_stop(user=deployer, experiment=decided)
    page = client.get("/deployments/endpoints/ctr-demo/").content.decode()
    assert 'id="endpoint-experiment"' not in page
    assert Exposure.objects.filter(experiment=decided).exists()
