"""Inference keys end to end with real processes: the web app (live server) serving the
API and the route table, a Celery worker and the local pool supervisor with a real
tritonserver replica, and the gateway (`python -m gateway`) polling the route table.
Everything goes over HTTP the way a team would use it: keys and endpoints made through
the API, inference through the gateway.

A key made through the API works within the gateway's poll interval; no key, a wrong
key and another team's key are refused with the unknown endpoint's 404 (no name oracle:
gateway/v2/access.py) and counted by reason; a public endpoint needs none; a key over its
rate gets 429 with Retry-After; a revoked key is refused within ~1 s; the secret never
reaches the gateway's log.
"""

import sys
import time

import pytest
import requests
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token

from deployments.models import PoolModel, PoolModelState
from deployments.services import pools as pool_services
from harness import factories
from harness.artifacts import package_artifact
from harness.gateway import GatewayProcess
from harness.load import Load
from harness.processes import CeleryWorker, spawn, stop, wait_for
from registry.models import Role
from tests.conftest import require_service
from tests.gateway.conftest import require_triton

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
BODY = Load("").body  # a valid request of the tiny CTR model (13 dense + 26 sparse features)


def api_session(user) -> requests.Session:
    session = requests.Session()
    session.headers["Authorization"] = f"Token {Token.objects.create(user=user).key}"
    return session


def test_keys_through_the_api_reach_the_gateway(
    live_server, subprocess_env, tmp_path, pools_dir, team_a, team_b, deployer, onnx_path
):
    require_service("postgres", "redis")
    require_triton()
    base = f"{live_server.url}/api/v1"
    gateway_user = factories.user("gateway-svc")
    gateway_user.user_permissions.add(Permission.objects.get(codename="read_routes"))
    gateway = GatewayProcess(
        tmp_path,
        {
            "GATEWAY_ROUTES_URL": f"{base}/gateway/routes",
            "GATEWAY_TOKEN": Token.objects.create(user=gateway_user).key,
            "GATEWAY_POLL_INTERVAL_MS": "300",
        },
    )
    env = {**subprocess_env, "POOLS_DIR": str(pools_dir)}
    pools = spawn(
        [sys.executable, "manage.py", "run_pools", "--interval", "0.3", "--stop-replicas-on-exit"],
        env,
        tmp_path / "pools.log",
    )
    worker = CeleryWorker(env, tmp_path / "worker.log", queues="control").start()
    team_b_deployer = factories.user("bert")
    factories.member(team_b_deployer, team_b, Role.DEPLOYER)
    ours, theirs = api_session(deployer), api_session(team_b_deployer)
    secrets_seen, metrics_text = [], ""
    try:
        stable = package_artifact(team_a, onnx_path, tmp_path)
        pool_services.pool_create(user=deployer, name="keys", team=team_a, replicas=1)
        closed = ours.post(
            f"{base}/endpoints/", json={"name": "ctr", "pool": "keys", "stable_artifact": stable.pk}, timeout=30
        )
        assert closed.status_code == 201 and closed.json()["public"] is False, closed.text
        opened = ours.post(
            f"{base}/endpoints/",
            json={"name": "open", "pool": "keys", "stable_artifact": stable.pk, "public": True},
            timeout=30,
        )
        assert opened.status_code == 201 and opened.json()["public"] is True, opened.text
        wait_for(
            lambda: PoolModel.objects.filter(artifact=stable, state=PoolModelState.READY).exists(),
            timeout=120,
            what="stable READY",
        )
        gateway.start(timeout=30)

        def infer(endpoint, key=None, header="Authorization"):
            headers = {"Content-Type": "application/json"}
            if key is not None:
                headers[header] = f"Bearer {key}" if header == "Authorization" else key
            return requests.post(f"{gateway.url}/v2/models/{endpoint}/infer", data=BODY, headers=headers, timeout=10)

        # a public endpoint needs no key; a closed one refuses anonymous callers as if it were not there
        assert infer("open").status_code == 200
        anonymous = infer("ctr")
        assert anonymous.status_code == 404 and anonymous.json()["code"] == "unknown_endpoint"
        assert "WWW-Authenticate" not in anonymous.headers

        # keys made through the API
        created = ours.post(
            f"{base}/inference-keys/",
            json={"team": "team-a", "name": "ranker", "rate_per_s": None, "max_concurrency": None},
            timeout=30,
        )
        assert created.status_code == 201, created.text
        main = created.json()
        made_at = time.monotonic()
        slow = ours.post(
            f"{base}/inference-keys/",
            json={"team": "team-a", "name": "slow", "endpoints": ["ctr"], "rate_per_s": 0.5, "burst": 2},
            timeout=30,
        ).json()
        other = theirs.post(f"{base}/inference-keys/", json={"team": "team-b", "name": "theirs"}, timeout=30).json()
        secrets_seen += [main["secret"], slow["secret"], other["secret"]]
        assert ours.get(f"{base}/inference-keys/{other['id']}/", timeout=30).status_code == 404  # another team's key
        first_ok = wait_for(
            lambda: infer("ctr", main["secret"]).status_code == 200 and time.monotonic(),
            timeout=5,
            what="the new key accepted",
            interval=0.05,
        )
        print(f"new key accepted {first_ok - made_at:.2f} s after its creation")
        served = infer("ctr", main["secret"], header="X-API-Key")
        assert served.status_code == 200 and served.headers["X-Model-Variant"] and "outputs" in served.json()

        # wrong key, another team's key
        wrong = infer("ctr", main["secret"][:-2] + "xx")
        assert wrong.status_code == 404 and wrong.json()["code"] == "unknown_endpoint"
        # the other team's key was made after ours: wait until the gateway's table has it too,
        # which only its metric tells (its caller sees the unknown endpoint's 404 either way)
        # (a list: a 404 Response is falsy, and wait_for waits for a truthy answer)
        [foreign] = wait_for(
            lambda: (
                [r := infer("ctr", other["secret"])]
                and gateway.metric("gateway_auth_rejections_total", reason="forbidden", key=other["gateway_id"]) >= 1
                and [r]
            ),
            timeout=5,
            what="the other team's key known to the gateway",
            interval=0.05,
        )
        assert foreign.status_code == 404 and foreign.json() == wrong.json() and "team-b" not in foreign.text
        assert infer("open", other["secret"]).status_code == 200  # credentials on a public endpoint are ignored

        # over its rate: burst 2, then 0.5/s
        statuses = [infer("ctr", slow["secret"]) for _ in range(3)]
        assert [r.status_code for r in statuses] == [200, 200, 429], [r.text for r in statuses]
        limited = statuses[-1]
        assert limited.json()["code"] == "rate_limited" and 1 <= int(limited.headers["Retry-After"]) <= 2

        # revoke: refused within ~1 s
        revoked = ours.post(f"{base}/inference-keys/{main['id']}/revoke/", json={"reason": "rotation"}, timeout=30)
        assert revoked.status_code == 200 and revoked.json()["active"] is False
        revoked_at = time.monotonic()
        refused_at = wait_for(
            lambda: infer("ctr", main["secret"]).status_code == 404 and time.monotonic(),
            timeout=5,
            what="the revoked key refused",
            interval=0.02,
        )
        print(f"revoked key refused {refused_at - revoked_at:.2f} s after the revoke")
        assert refused_at - revoked_at < 1.5
        assert infer("ctr", main["secret"]).json()["code"] == "unknown_endpoint"

        # each refusal and each key's requests are counted, labelled by key id (never the secret)
        for reason in ("missing_key", "invalid_key", "forbidden", "rate_limited"):
            assert gateway.metric("gateway_auth_rejections_total", endpoint="ctr", reason=reason) >= 1, reason
        assert (
            gateway.metric("gateway_auth_rejections_total", reason="forbidden", key=other["gateway_id"], team="team-b")
            == 1
        )
        assert (
            gateway.metric("gateway_tenant_requests_total", key=main["gateway_id"], endpoint="ctr", status="200") >= 2
        )
        assert gateway.metric("gateway_tenant_requests_total", key=slow["gateway_id"], status="429") == 1
        metrics_text = requests.get(f"{gateway.url}/metrics", timeout=5).text
    finally:
        gateway.stop()
        worker.stop()
        stop(pools)
    log = gateway.log.read_text(errors="replace")
    assert metrics_text and not any(secret[4:] in log or secret[4:] in metrics_text for secret in secrets_seen)
