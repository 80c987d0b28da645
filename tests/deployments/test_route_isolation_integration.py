"""End to end: one bad route entry costs only its own endpoint.

Real processes: the web app (live server) serving the route table from PostgreSQL and
the gateway (`python -m gateway`) polling it every 300 ms. No Triton: the pool's replica
URL points at a port nobody listens on, so a request the gateway routes gets 503
`no_ready_backend`, and what is asserted is the gateway's routing and access decisions
(which entry it serves, who it lets in), not a model's answer.

The bad rollout of the report (`--candidate 2`, an artifact of another model whose
variant name equals the stable's) is written straight into the database and the shared
check is switched off in the route builder (monkeypatch: the live server runs in this
process), which is how an older control plane or a manual edit would send it. Then, in
the same instant, another endpoint is closed, a key is revoked and a third endpoint's
rollout starts: the gateway refuses only the bad entry (503 endpoint_refused naming the
reason) and applies everything else within about a second; the collector's scrape
raises an alert naming the refused endpoint; /healthz and the endpoint page show it.
"""

import time

import pytest
import requests
from django.contrib.auth.models import Permission
from django.test import Client
from rest_framework.authtoken.models import Token

from deployments import routes as route_builder
from deployments.models import PoolModel, PoolModelState, Rollout
from deployments.rollout_machine import State
from deployments.selectors import gateway_routes
from deployments.services import keys as key_services
from harness import factories
from harness.gateway import GatewayProcess
from harness.load import Load
from monitoring.collection.targets import ScrapeTarget
from monitoring.models import Alert
from monitoring.services.collector import metrics_collect
from tests.conftest import require_service

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
BODY = Load("").body  # a valid request of the tiny CTR model (13 dense + 26 sparse features)


def wait_until(check, timeout: float, what: str) -> float:
    """Seconds until check() is true (generous timeout for a loaded machine)."""
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - t0


def test_a_bad_entry_is_refused_alone_while_every_other_change_applies(
    live_server, deployer, team_a, artifact_factory, onnx_path, tmp_path, monkeypatch, settings
):
    require_service("postgres")
    gateway_user = factories.user("gateway-svc")
    gateway_user.user_permissions.add(Permission.objects.get(codename="read_routes"))
    gateway = GatewayProcess(
        tmp_path,
        {
            "GATEWAY_ROUTES_URL": f"{live_server.url}/api/v1/gateway/routes",
            "GATEWAY_TOKEN": Token.objects.create(user=gateway_user).key,
            "GATEWAY_POLL_INTERVAL_MS": "300",
        },
    )
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    stable, candidate = artifact_factory(team_a), artifact_factory(team_a)  # model "ctr" v1, v2
    foreign = factories.artifact(team_a, onnx_path, tmp_path / "f", model_name="demo-ctr")  # v1-onnx-fp32 too
    ux = factories.endpoint(pool, stable, name="ux-cli", public=True)
    demo = factories.endpoint(pool, stable, name="demo-ctr", public=True)
    factories.endpoint(pool, stable, name="keyed")  # closed: only the key may call it
    rolling = factories.endpoint(pool, stable, name="rolling", public=True)
    for artifact in (stable, candidate, foreign):
        PoolModel.objects.create(
            pool=pool,
            artifact=artifact,
            triton_model_name=artifact.triton_model_name,
            state=PoolModelState.READY,
            replica_ready={"r0": True},
        )
    key, secret = key_services.inference_key_create(user=deployer, team=team_a, name="ranker", endpoints=["keyed"])

    def infer(name, secret=None):
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        return requests.post(f"{gateway.url}/v2/models/{name}/infer", data=BODY, headers=headers, timeout=10)

    def status():
        return requests.get(f"{gateway.url}/status", timeout=5).json()

    gateway.start(timeout=30)
    try:
        assert status()["routes"]["refused"] == [] and set(status()["endpoints"]) == {
            "ux-cli",
            "demo-ctr",
            "keyed",
            "rolling",
        }
        assert infer("demo-ctr").json()["code"] == "no_ready_backend"  # open: routed (to a dead replica)
        assert infer("keyed", secret).json()["code"] == "no_ready_backend"  # the key may call it

        # the bad rollout, around the check; and at once three changes of other objects
        monkeypatch.setattr(route_builder, "_fits", lambda endpoint, artifacts: True)
        factories.rollout(ux, foreign, state=State.CANARY, step_index=0, steps_bp=[1000, 10000])
        demo.public = False
        demo.save(update_fields=["public"])  # as the services write it (a save marks the route change)
        key_services.inference_key_revoke(user=deployer, key=key)
        factories.rollout(rolling, candidate, state=State.CANARY, step_index=0, steps_bp=[1000, 10000])
        changed_at = time.monotonic()

        def all_applied():
            detail = status()
            roles = sorted(v["role"] for v in detail["endpoints"].get("rolling", {}).get("variants", {}).values())
            return (
                [(r["name"], r["code"]) for r in detail["routes"]["refused"]] == [("ux-cli", "duplicate_variant_names")]
                and infer("demo-ctr").status_code == 404  # closed: as if unknown without a key
                and infer("keyed", secret).status_code == 404  # a revoked key: likewise
                and roles == ["canary", "stable"]
            )

        wait_until(all_applied, 10, "refusal of ux-cli and the other three changes")
        applied_s = time.monotonic() - changed_at
        print(f"bad entry refused and close, revocation and rollout applied {applied_s:.2f} s after the change")
        assert applied_s < 5  # ~ one 300 ms poll; generous for a loaded 2-core machine
        refused = infer("ux-cli")
        assert refused.status_code == 503 and refused.json()["code"] == "endpoint_refused"
        assert "duplicate variant names" in refused.json()["error"] and "ux-cli" in refused.json()["error"]
        assert infer("demo-ctr").json()["code"] == "unknown_endpoint"  # closed now, no key: as if unknown
        assert status()["routes"]["stale"] is False  # the rest of the table is current
        metrics_text = requests.get(f"{gateway.url}/metrics", timeout=5).text
        assert 'gateway_route_refused{code="duplicate_variant_names",kind="endpoint",name="ux-cli"} 1.0' in metrics_text

        # the collector's scrape of the gateway's /metrics raises an alert naming the endpoint and why
        summary = metrics_collect(
            targets=[ScrapeTarget(kind="gateway", url=f"{gateway.url}/metrics", endpoint_teams={"ux-cli": team_a.pk})]
        )
        assert summary["route_refused"] == 1
        alert = Alert.objects.get(kind="route_refused")
        assert alert.endpoint == "ux-cli" and alert.team_id == team_a.pk and alert.severity == "critical"
        assert "'ux-cli'" in alert.reason and "duplicate_variant_names" in alert.reason

        # /healthz and the endpoint page: the table the gateway has not applied, and why
        settings.HEALTHZ_EXPECT = [f"gateway={gateway.url}"]
        settings.HEALTHZ_TOKEN = "health-token-for-tests"  # the components are for staff and the token
        client = Client(HTTP_AUTHORIZATION="Bearer health-token-for-tests")
        health = client.get("/healthz")
        assert health.status_code == 503 and health.json()["components"]["gateway"]["state"] == "up"
        routes = health.json()["components"]["routes"]
        assert routes["state"] == "down" and "ux-cli (duplicate_variant_names)" in routes["error"]
        monkeypatch.setenv("GATEWAY_STATUS_URL", f"{gateway.url}/status")
        gateway_routes._cache["at"] = 0.0
        client.force_login(deployer)
        page = client.get("/deployments/endpoints/ux-cli/").content.decode()
        assert "refused this endpoint&#x27;s route entry" in page or "refused this endpoint's route entry" in page
        assert "duplicate_variant_names" in page

        # rolled back: the entry is accepted again and nothing is left refused
        for rollout in Rollout.objects.filter(endpoint=ux):
            rollout.state = State.ROLLED_BACK
            rollout.save(update_fields=["state"])  # as the services write it
        wait_until(lambda: status()["routes"]["refused"] == [], 10, "ux-cli served again")
        assert infer("ux-cli").json()["code"] == "no_ready_backend"
        assert client.get("/healthz").json()["components"]["routes"]["state"] == "up"
    finally:
        gateway.stop()
