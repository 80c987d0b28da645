"""`modelplane rollout abort | retry | undo`, the exit code of a rollback a person made (14)
against the judge's (11, tests/cli/test_rollouts.py), the watch's one conditional request
per poll (ETag / 304, counted by a recording proxy in front of the live server), and the
token never sent to another origin than the configured one (a `next` link or a redirect
naming another port goes unfollowed: a second real server records that nothing reached it).

Rollouts are moved by the platform's own services, as in test_rollouts.py."""

import pytest

from deployments.models import PoolModelState, Rollout
from deployments.services import rollouts as rollout_services
from harness import factories
from harness.http_recorder import RecordingServer
from modelplane_cli import exits
from registry.models import Event
from tests.cli.conftest import cli_env, pool_model_state, popen_cli, run_cli, wait_log

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _to_canary(rollout_id, candidate, stable):
    pool_model_state(candidate, PoolModelState.READY)
    pool_model_state(stable, PoolModelState.READY)  # and the fair-baseline copy of it
    return rollout_services.rollout_reconcile(rollout_id=rollout_id)


def _drain(rollout_id, candidate):
    rollout_services.rollout_reconcile(rollout_id=rollout_id)  # asks the pool to unload
    pool_model_state(candidate, PoolModelState.UNLOADED)
    return rollout_services.rollout_reconcile(rollout_id=rollout_id)


def test_abort_exits_14_and_retry_starts_the_same_plan_again(rollout_setup, tmp_path):
    cli, pool, stable, (candidate, *_) = rollout_setup
    rollout_id = int(
        cli("rollout", "start", "ctr", "--candidate", candidate.pk, "--steps", "20,100", "--field", "id").out
    )
    assert _to_canary(rollout_id, candidate, stable).state == "canary"
    not_yet = cli("rollout", "retry", rollout_id)
    assert not_yet.code == exits.API and "not_retryable" in not_yet.err and "HTTP 409" in not_yet.err, not_yet

    log = tmp_path / "abort.log"
    abort = popen_cli(
        "rollout",
        "abort",
        rollout_id,
        "--reason",
        "bad dashboards",
        "--watch",
        "--interval",
        "0.3",
        env=cli.env,
        log=log,
    )
    try:
        wait_log(log, "rolling_back", abort)
        assert _drain(rollout_id, candidate).state == "rolled_back"
        assert abort.wait(30) == exits.ABORTED, log.read_text()
    finally:
        if abort.poll() is None:
            abort.kill()
    text = log.read_text()
    assert text.startswith(f"Aborted rollout #{rollout_id}: now rolling_back.")
    assert text.splitlines()[-1] == f"rollout #{rollout_id} rolled_back by dora: bad dashboards"
    again = cli("rollout", "watch", rollout_id, "--json")  # an ended rollout: its history and the same exit code
    assert again.code == exits.ABORTED and again.json()["state"] == "rolled_back", again
    assert "canary step 1/2 (20%) → rolling_back [dora]  bad dashboards" in again.err

    retried = cli("rollout", "retry", rollout_id, "--json")
    assert retried.code == 0, retried
    body = retried.json()
    assert body["id"] != rollout_id and body["candidate_artifact"] == candidate.pk
    assert body["steps_bp"] == [2000, 10000] and body["state"] == "loading"
    assert f"retried as rollout #{body['id']}" in retried.err
    created = Event.objects.get(object_type="deployments.rollout", object_id=str(body["id"]), action="created")
    assert created.data["retry_of"] == rollout_id and created.actor.username == "dora"


def test_undo_brings_back_the_previous_stable_or_says_there_is_none(rollout_setup):
    cli, pool, stable, (candidate, *_) = rollout_setup
    none = cli("rollout", "undo", "ctr")
    assert none.code == exits.API and "no_previous_stable" in none.err and "HTTP 409" in none.err, none
    assert "has no previous stable" in none.err

    rollout_id = int(
        cli("rollout", "start", "ctr", "--candidate", candidate.pk, "--steps", "50,100", "--field", "id").out
    )
    _to_canary(rollout_id, candidate, stable)
    cli("rollout", "promote", rollout_id)
    Rollout.objects.filter(pk=rollout_id).update(promote_grace_seconds=0)
    assert rollout_services.rollout_reconcile(rollout_id=rollout_id).state == "succeeded"
    pool_model_state(stable, PoolModelState.UNLOADED)  # the old stable drained and went (the pool's report)
    assert cli("endpoint", "get", "ctr", "--field", "stable_artifact").out.strip() == str(candidate.pk)

    undone = cli("rollout", "undo", "ctr", "--reason", "v2 hurts revenue", "--json")
    assert undone.code == 0, undone
    body = undone.json()
    assert body["candidate_artifact"] == stable.pk and body["baseline_artifact"] == candidate.pk
    assert body["steps_bp"] == [10000] and body["state"] == "loading"
    assert f"rollout #{body['id']} brings back v{stable.version.version}-onnx-fp32" in undone.err
    trail = Event.objects.get(object_type="deployments.endpoint", action="updated", data__undo=True)
    assert trail.reason == f"v2 hurts revenue (rollout #{body['id']})" and trail.actor.username == "dora"
    busy = cli("rollout", "undo", "ctr")  # one rollout per endpoint at a time
    assert busy.code == exits.API and "rollout_in_progress" in busy.err, busy


def test_watch_sends_one_conditional_request_per_poll(rollout_setup, live_server, tmp_path):
    """Through a recording proxy: every poll is one GET of the rollout's status; after the
    first, each carries If-None-Match and gets a bodiless 304 while nothing changes, and a
    200 with a new ETag once the rollout moves."""
    cli, pool, stable, (candidate, *_) = rollout_setup
    rollout_id = int(cli("rollout", "start", "ctr", "--candidate", candidate.pk, "--field", "id").out)
    with RecordingServer(upstream=live_server.url) as proxy:
        env = {**cli.env, "MODELPLANE_URL": proxy.url}
        waited = run_cli(
            "rollout", "watch", rollout_id, "--interval", "0.3", "--timeout", "3", env=env
        )  # >= 4 polls on a busy host
        assert waited.code == exits.TIMEOUT, waited
        polls = list(proxy.requests)
        assert len(polls) >= 4, polls
        assert {(r["method"], r["path"]) for r in polls} == {("GET", f"/api/v1/rollouts/{rollout_id}/status/")}
        assert polls[0]["status"] == 200 and "If-None-Match" not in polls[0]["headers"]
        assert all(r["status"] == 304 and r["headers"]["If-None-Match"] for r in polls[1:]), polls

        default = run_cli("rollout", "watch", rollout_id, "--timeout", "3", env=env)  # the default interval: 2 s
        assert default.code == exits.TIMEOUT, default
        times = [r["at"] for r in proxy.requests[len(polls) :]]
        assert len(times) == 3 and all(later - earlier >= 1.9 for earlier, later in zip(times, times[1:])), times

    # the same through the API: 304 without a body while unchanged, 200 with a new ETag after a transition
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get(user__username='dora').key}")
    first = api.get(f"/api/v1/rollouts/{rollout_id}/status/")
    etag = first["ETag"]
    assert first.status_code == 200 and first.json()["rollout"]["state"] == "loading"
    same = api.get(f"/api/v1/rollouts/{rollout_id}/status/", HTTP_IF_NONE_MATCH=etag)
    assert same.status_code == 304 and same.content == b"" and same["ETag"] == etag
    _to_canary(rollout_id, candidate, stable)
    moved = api.get(f"/api/v1/rollouts/{rollout_id}/status/", HTTP_IF_NONE_MATCH=etag)
    assert moved.status_code == 200 and moved["ETag"] != etag
    status = moved.json()
    assert status["rollout"]["state"] == "canary" and status["rolled_back_by"] is None
    assert [e["to_state"] for e in status["events"]] == ["pending", "loading", "canary[0]"]


def test_the_token_never_goes_to_another_origin(rollout_setup, live_server, settings, cli_home):
    """A proxy that names another host:port (X-Forwarded-Host, trusted by the server) makes
    the API's `next` link point there; a server redirecting elsewhere does the same with
    Location. The CLI refuses both with a clear error, and the other server, a real one
    recording every connection, gets nothing, let alone the token."""
    cli, pool, stable, _ = rollout_setup
    factories.endpoint(pool, stable, name="second")
    token = cli.token
    whole = cli("endpoint", "list", "--page-size", "1", "--all", "--json")  # same origin: the next page is read
    assert whole.code == 0 and [e["name"] for e in whole.json()["results"]] == ["ctr", "second"], whole

    settings.USE_X_FORWARDED_HOST = True
    with RecordingServer() as elsewhere:
        host = elsewhere.url.removeprefix("http://")
        with RecordingServer(upstream=live_server.url, add_headers={"X-Forwarded-Host": host}) as proxy:
            env = cli_env(cli_home, MODELPLANE_URL=proxy.url, MODELPLANE_TOKEN=token)
            paged = run_cli("endpoint", "list", "--page-size", "1", "--all", env=env)
            assert paged.code == exits.ERROR, paged
            assert f"the next page's link points to http://{host}/api/v1/endpoints/" in paged.err
            assert "not to the configured server http://127.0.0.1:" in paged.err
            assert "refusing to send the token there" in paged.err
            assert proxy.requests[0]["headers"]["Authorization"] == f"Token {token}"  # the configured server has it
        with RecordingServer(redirect_to=f"{elsewhere.url}/api/v1/endpoints/") as mover:
            env = cli_env(cli_home, MODELPLANE_URL=mover.url, MODELPLANE_TOKEN=token)
            moved = run_cli("endpoint", "list", env=env)
            assert moved.code == exits.ERROR, moved
            assert (
                f"the server's redirect (302) from {mover.url}/api/v1/endpoints/ points to {elsewhere.url}" in moved.err
            )
        assert elsewhere.connections == 0 and elsewhere.requests == []
