"""`modelplane key | experiment | feedback` against a live server: a key's secret printed
once and never listed, limits and revoke; an experiment created and started, fed with
feedback from a JSON-lines file (with a line that is not JSON and an event the API
refuses, both reported while the rest counts), watched until the analysis decides to ship
(exit 0), shipped (its rollout rolled back: exit 11), and another stopped (exit 15).
Exposures are written to the platform's exposure store as the gateway's stream ingest writes
them (no gateway process here); the ship's rollout is ended in the database as the judge
would end it (no judge here)."""

import json
from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from deployments.models import InferenceKey, Rollout
from deployments.rollout_machine import State as RolloutState
from experiments.models import Experiment
from experiments.services import online as services
from experiments.store import default_store
from harness import factories
from modelplane_cli import exits
from tests.cli.conftest import popen_cli, wait_log

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def served(team_a, artifact_factory):
    pool = factories.pool(team_a, ready_replicas=1)
    stable, candidate = artifact_factory(team_a), artifact_factory(team_a)
    factories.endpoint(pool, stable, name="ctr-demo")
    factories.endpoint(pool, stable, name="ctr-two")
    return stable, candidate


def test_keys_create_once_list_revoke(cli_as, deployer, alice, served, team_a):
    cli = cli_as(deployer)
    made = cli(
        "keys", "create", "web", "--team", team_a.name, "--endpoint", "ctr-demo", "--rate-per-s", "20",
        "--max-concurrency", "none",
    )  # fmt: skip
    assert made.code == 0, made
    secret = made.out.strip()
    assert secret.startswith("mpk_") and len(secret) == 47 and "shown this once" in made.err
    key = InferenceKey.objects.get(name="web")
    assert (key.rate_per_s, key.max_concurrency, key.all_endpoints) == (20.0, None, False)

    listed = cli("key", "list")
    assert listed.code == 0 and "web" in listed.out and key.prefix in listed.out and secret not in listed.out, listed
    one = cli("key", "get", key.pk)
    assert one.code == 0 and "no limit" in one.out and "ctr-demo" in one.out and secret not in one.out, one
    bad = cli("key", "create", "x", "--team", team_a.name, "--rate-per-s", "fast")
    assert bad.code == exits.USAGE and "give a number or `none`" in bad.err, bad
    budgeted = cli(
        "key", "create", "llm", "--team", team_a.name, "--tokens-per-minute", "6000", "--token-budget", "100000/1h",
        "--token-budget", "5000000/30d",
    )  # fmt: skip
    assert budgeted.code == 0, budgeted
    assert InferenceKey.objects.get(name="llm").token_budgets == [
        {"tokens": 100000, "window_s": 3600},
        {"tokens": 5000000, "window_s": 2592000},
    ]
    too_long = cli("key", "create", "y", "--team", team_a.name, "--token-budget", "1/40d")  # past a month
    assert too_long.code != 0 and "bad_token_budgets" in too_long.err + too_long.out, too_long
    refused = cli_as(alice)("key", "create", "mine", "--team", team_a.name)  # a developer may not
    assert refused.code == exits.AUTH and "HTTP 403" in refused.err, refused

    revoked = cli("key", "revoke", key.pk, "--reason", "leaked in a log")
    assert revoked.code == 0 and f"Key {key.pk} (web" in revoked.out and "revoked at" in revoked.out, revoked
    assert [k["name"] for k in cli("keys", "list", "--active", "--json").json()["results"]] == ["llm"]
    assert [k["name"] for k in cli("keys", "list", "--revoked", "--json").json()["results"]] == ["web"]


def _expose(experiment, units, per_unit, start):
    """Exposures of `units` units per arm, as the stream ingest stores them; request ids
    `<arm initial>-<unit>-<n>` (c: control, t: candidate)."""
    rows = []
    for arm in experiment.arms.all():
        tag = "c" if arm.is_control else "t"
        for unit in range(units):
            for n in range(per_unit):
                rows.append(
                    {
                        "request_id": f"{tag}-{unit}-{n}",
                        "experiment": experiment.pk,
                        "arm": arm.pk,
                        "unit_key": f"{tag}{unit}",
                        "time": start,
                        "score": 0.5,
                    }
                )
    default_store().write_exposures(rows)
    return [r["request_id"] for r in rows]


def test_experiment_start_feedback_watch_ship_and_stop(cli_as, deployer, served, tmp_path):
    stable, candidate = served
    cli = cli_as(deployer)
    plan = ["--baseline-rate", "0.2", "--exposures-per-unit", "4", "--mde", "0.05", "--attribution-window-s", "600"]
    made = cli(
        "experiment", "create", "ctr-demo", "better-ctr", "--candidate", candidate.pk, *plan, "--start", "--json"
    )
    assert made.code == 0, made
    exp_id = made.json()["id"]
    assert made.json()["state"] == "running" and exp_id.startswith("exp-")
    listed = cli("experiments", "list")
    assert listed.code == 0 and exp_id in listed.out and "running" in listed.out, listed
    experiment = Experiment.objects.get(pk=int(exp_id[4:]))

    request_ids = _expose(experiment, 400, 5, timezone.now() - timedelta(seconds=60))
    rng = np.random.default_rng(0)
    lines = [
        json.dumps({"event_id": f"c-{rid}", "type": "click", "request_id": rid})
        for rid in request_ids
        if rng.random() < (0.1 if rid.startswith("c-") else 0.3)  # the candidate is far better
    ]
    clicks = len(lines)
    lines.insert(2, "{not json")
    lines.insert(700, json.dumps({"event_id": "x-1", "type": "like", "request_id": request_ids[0]}))
    (tmp_path / "feedback.jsonl").write_text("\n".join(lines) + "\n")

    log = tmp_path / "watch.log"
    watch = popen_cli("experiment", "watch", exp_id, "--interval", "0.3", env=cli.env, log=log)
    try:
        wait_log(log, f"experiment {exp_id} · running", watch)
        sent = cli("feedback", "send", "ctr-demo", "--file", tmp_path / "feedback.jsonl", "--batch-size", "500")
        assert sent.code == exits.API, sent  # something was refused
        assert f"Sent {clicks} events to ctr-demo in " in sent.out
        assert f"received {clicks}, duplicates 0, attributed {clicks}, late 0, unknown 0; refused 2." in sent.out
        assert "refused line 3: not JSON" in sent.out
        assert 'refused line 701: type: "like" is not one of' in sent.out, sent.out
        services.experiment_analyze(experiment_id=experiment.pk)  # the analysis tick
        assert watch.wait(30) == exits.OK, log.read_text()
    finally:
        if watch.poll() is None:
            watch.kill()
    text = log.read_text()
    assert "· decided · decision ship" in text and f"{candidate.version.model.name}" not in text.splitlines()[0]
    assert "lift +" in text and "guardrails" in text  # the figures, one line per arm (not a terminal)
    again = cli("feedback", "send", "ctr-demo", "--event", lines[0], "--json")  # a resend counts once
    assert again.code == 0 and again.json()["duplicates"] == 1 and again.json()["refused"] == [], again

    shipped = cli("experiment", "ship", exp_id, "--reason", "clear win")
    assert shipped.code == 0 and f"Experiment {exp_id}: shipping (rollout #" in shipped.out, shipped
    # the ship's rollout rolls back (as the judge would end it): watch exits 11, not 0
    log = tmp_path / "shipping.log"
    watch = popen_cli("experiment", "watch", exp_id, "--interval", "0.3", env=cli.env, log=log)
    try:
        wait_log(log, f"experiment {exp_id} · shipping", watch)
        experiment.refresh_from_db()
        Rollout.objects.filter(pk=experiment.rollout_id).update(
            state=RolloutState.ROLLED_BACK, reason="p99 latency over the SLO"
        )
        assert services.experiments_ship_follow(experiment_ids=[experiment.pk]) == 1
        assert watch.wait(30) == exits.ROLLED_BACK, log.read_text()
    finally:
        if watch.poll() is None:
            watch.kill()
    assert f"the ship's rollout #{experiment.rollout_id} did not succeed" in log.read_text()

    other = cli("experiment", "create", "ctr-two", "other", "--candidate", candidate.pk, *plan, "--field", "id")
    assert other.code == 0 and Experiment.objects.get(pk=int(other.out.strip()[4:])).state == "draft", other
    started = cli("experiment", "start", other.out.strip())
    assert started.code == 0 and f"Experiment {other.out.strip()} started: running." in started.out, started
    stopped = cli("experiment", "stop", other.out.strip(), "--reason", "wrong audience")
    assert stopped.code == 0 and "stopped" in stopped.out, stopped
    ended = cli("experiment", "watch", other.out.strip())
    assert ended.code == exits.EXPERIMENT_STOPPED and "· stopped" in ended.out, ended
    missing = cli("experiment", "start", "exp-999999")
    assert missing.code == exits.API and "HTTP 404" in missing.err, missing
