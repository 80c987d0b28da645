"""The cross-team matrix: every API resource x every role.

Roles: anonymous, a member of another team (B), and viewer / developer / deployer /
admin of the owning team (A). Expected: anonymous 401; team B 404 (another team's object
"does not exist"); a role below the action's minimum 403; at or above it, anything but
401/403/404/5xx (a state conflict such as cancelling a finished build is a 409, which
is an allowed caller meeting the object's state).
"""

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from deployments.services.keys import inference_key_create
from experiments.models import Dataset
from harness import factories
from monitoring.models import NotificationChannel
from monitoring.services.alerts import alert_raise
from registry.models import Event, Role

pytestmark = pytest.mark.django_db

V, DEV, DEP, ADM = Role.VIEWER, Role.DEVELOPER, Role.DEPLOYER, Role.ADMIN

# (resource action, method, path template, body, minimum role in the owning team)
ACTIONS = [
    ("model.get", "get", "/api/v1/models/{model}/", None, V),
    ("model.update", "patch", "/api/v1/models/{model}/", {"description": "changed"}, DEV),
    ("model.versions", "get", "/api/v1/models/{model}/versions/", None, V),
    ("version.get", "get", "/api/v1/versions/{version}/", None, V),
    ("version.archive", "post", "/api/v1/versions/{version}/archive/", None, DEV),
    ("version.builds", "get", "/api/v1/versions/{version}/builds/", None, V),
    ("version.artifacts", "get", "/api/v1/versions/{version}/artifacts/", None, V),
    ("build.get", "get", "/api/v1/builds/{build}/", None, V),
    ("build.cancel", "post", "/api/v1/builds/{build}/cancel/", {}, DEV),
    ("artifact.get", "get", "/api/v1/artifacts/{artifact}/", None, V),
    ("pool.get", "get", "/api/v1/pools/{pool}/", None, V),
    ("pool.log", "get", "/api/v1/pools/{pool}/log/?replica=r0", None, V),
    ("pool.scale", "post", "/api/v1/pools/{pool}/scale/", {"replicas": 1}, DEP),
    ("endpoint.get", "get", "/api/v1/endpoints/{endpoint}/", None, V),
    ("endpoint.update", "patch", "/api/v1/endpoints/{endpoint}/", {"public": False}, DEP),
    ("endpoint.rollouts", "get", "/api/v1/endpoints/{endpoint}/rollouts/", None, V),
    ("rollout.get", "get", "/api/v1/rollouts/{rollout}/", None, V),
    ("rollout.rollback", "post", "/api/v1/rollouts/{rollout}/rollback/", {}, DEP),
    ("alert.get", "get", "/api/v1/alerts/{alert}/", None, V),
    ("alert.acknowledge", "post", "/api/v1/alerts/{alert}/acknowledge/", {}, DEV),
    ("channel.delete", "delete", "/api/v1/notification-channels/{channel}/", None, ADM),
    ("key.get", "get", "/api/v1/inference-keys/{key}/", None, V),
    ("key.revoke", "post", "/api/v1/inference-keys/{key}/revoke/", {}, DEP),
    ("event.get", "get", "/api/v1/events/{event}/", None, V),
    ("dataset.get", "get", "/api/v1/datasets/{dataset}/", None, V),
]
ROLES = ["anonymous", "team-b", V, DEV, DEP, ADM]


@pytest.fixture
def world(onnx_path, tmp_path):
    team_a, team_b = factories.team("matrix-a"), factories.team("matrix-b")
    owner = factories.user("matrix-owner")
    factories.member(owner, team_a, ADM)
    stable = factories.artifact(team_a, onnx_path, tmp_path, model_name="matrix-model")
    candidate = factories.artifact(team_a, onnx_path, tmp_path, model_name="matrix-model", variant="onnx-int8")
    pool = factories.pool(team_a, name="matrix-pool", ready_replicas=1)
    endpoint = factories.endpoint(pool, stable, name="matrix-endpoint")
    rollout = factories.rollout(endpoint, candidate)
    alert, _ = alert_raise(
        kind="canary_rollback", reason="p99 over SLO", endpoint=endpoint.name, rollout_id=rollout.pk, team=team_a
    )
    channel = NotificationChannel.objects.create(team=team_a, kind="email", target="ops@example.com")
    key, _ = inference_key_create(user=owner, team=team_a, name="matrix-key")
    now = timezone.now()
    dataset = Dataset.objects.create(
        team=team_a, endpoint=endpoint, name="matrix-ds", version=1, window_start=now, window_end=now,
        split_at=now, attribution_window_s=60, path="matrix-ds",
    )  # fmt: skip
    ids = {
        "model": "matrix-model",
        "version": stable.version.pk,
        "build": stable.build.pk,
        "artifact": stable.pk,
        "pool": pool.name,
        "endpoint": endpoint.name,
        "rollout": rollout.pk,
        "alert": alert.pk,
        "channel": channel.pk,
        "key": key.pk,
        "event": Event.objects.filter(team=team_a).latest("pk").pk,
        "dataset": dataset.public_id,
    }
    return team_a, team_b, ids


def _client(role, team_a, team_b) -> APIClient:
    client = APIClient()
    if role == "anonymous":
        return client
    user = factories.user(f"matrix-{role}")
    factories.member(user, team_b if role == "team-b" else team_a, DEV if role == "team-b" else role)
    client.force_authenticate(user)
    return client


@pytest.mark.parametrize("role", ROLES)
def test_cross_team_matrix(world, role):
    """One role against every action (one world per role keeps it fast); every cell that
    disagrees is listed."""
    team_a, team_b, ids = world
    client = _client(role, team_a, team_b)
    wrong = []
    for name, method, template, body, minimum in ACTIONS:
        call = getattr(client, method)
        response = (
            call(template.format(**ids), body, format="json") if body is not None else call(template.format(**ids))
        )
        got = response.status_code
        if role == "anonymous":
            expected, ok = "401", got == 401
        elif role == "team-b":
            expected, ok = "404", got == 404
        elif Role.rank(role) < Role.rank(minimum):
            expected, ok = "403", got == 403
        else:
            expected, ok = "allowed", got not in (401, 403, 404) and got < 500
        if got != 204 and not response["Content-Type"].startswith("application/json"):
            ok = False
        if not ok:
            wrong.append(f"{name} as {role}: expected {expected}, got {got} {getattr(response, 'data', '')}")
    assert not wrong, "\n".join(wrong)
