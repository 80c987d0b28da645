"""A route_degraded alert on an LLM endpoint, watched in a real browser (Debian's Chromium
via Playwright): a model that failed to load leaves the endpoint out of the route table,
one critical alert names it (once: the banner does not double its name); loaded again, the
endpoint waits for its model: no critical alert while it loads, the alert resolves itself,
and the endpoint page says "loading" and follows it without a reload until it serves.

The collector's tick is called as the worker calls it (route_problems_alert); the pool's
state changes as its reconcile writes them. No processes: the gateway is not asked."""

import pytest

from deployments.models import PoolModel, PoolModelState
from deployments.routes import route_table
from deployments.services import endpoints as endpoint_services
from harness import factories
from monitoring.models import Alert, AlertStatus, Severity
from monitoring.services.route_refusals import DEGRADED, route_problems_alert
from registry.models import Event, EventAction
from tests.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _model(state: str, ready: bool = False) -> None:
    """The pool's model as the reconcile writes it (a save: the route table's cache sees the change)."""
    for model in PoolModel.objects.all():
        model.state, model.replica_ready, model.error = state, {"r0": ready}, "" if ready else "load failed"
        model.save(update_fields=["state", "replica_ready", "error"])


def test_a_route_alert_of_a_loading_llm_endpoint_resolves_once_it_serves(live_server, browser_page, deployer, team_a):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    stable = factories.llm_artifact(team_a, model_name="chat")
    endpoint_services.endpoint_create(user=deployer, name="chat", pool=pool, stable_artifact=stable, kind="llm")
    assert PoolModel.objects.get().state == PoolModelState.LOADING

    # loading: left out of the table, but nothing is wrong: no alert
    route_problems_alert()
    assert not Alert.objects.filter(kind=DEGRADED).exists()

    # the load failed: the endpoint is left out and one critical alert says why
    _model(PoolModelState.FAILED)
    route_problems_alert()
    alert = Alert.objects.get(kind=DEGRADED)
    assert (alert.severity, alert.status, alert.endpoint) == (Severity.CRITICAL, AlertStatus.OPEN, "chat")
    page = browser_page
    login(page, live_server.url, deployer.username)
    page.goto(f"{live_server.url}/deployments/endpoints/chat/")
    banner = page.inner_text("#alert-banner")
    assert "chat: The route entry of endpoint 'chat'" in banner and "chat: chat:" not in banner, banner
    assert page.is_visible("#route-degraded")

    # loaded again: it waits for its model; the alert resolves itself, the page says loading
    _model(PoolModelState.LOADING)
    route_problems_alert()
    alert.refresh_from_db()
    assert alert.status == AlertStatus.RESOLVED and alert.resolved_at is not None
    resolved = Event.objects.get(
        object_type="monitoring.alert", object_id=str(alert.pk), action=EventAction.ALERT_RESOLVED
    )
    assert resolved.actor is None and "waits for its model to load" in resolved.reason
    page.goto(f"{live_server.url}/deployments/endpoints/chat/")
    assert page.query_selector("#alert-banner") is None
    assert "waits for Triton model" in page.inner_text("#route-loading")
    page.evaluate("() => { window.__notReloaded = true; }")

    # ready: it serves, the page follows without a reload, and the alert stays resolved
    _model(PoolModelState.READY, ready=True)
    route_problems_alert()
    assert [e["name"] for e in route_table()["llm_endpoints"]] == ["chat"]
    page.wait_for_selector("#route-loading", state="detached", timeout=15_000)
    assert page.evaluate("() => window.__notReloaded === true")
    assert page.query_selector("#route-degraded") is None and page.query_selector("#alert-banner") is None
    assert not page.query_selector("#rollout-status[hx-trigger]")  # nothing in flight: it stops polling
    assert Alert.objects.get(pk=alert.pk).status == AlertStatus.RESOLVED
