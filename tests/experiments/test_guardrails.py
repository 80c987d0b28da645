"""Per-arm machine guardrails of a running experiment, over the real metric store: samples
written as the collector writes them (one row per variant, metric and scrape), the
analysis tick judging each candidate arm against the control with the canary judge's
checks, the decision, the audit event, the alert, the results API and the page. The
gateway → collector → store path itself is tests/experiments/test_guardrails_live.py."""

from datetime import timedelta

import numpy as np
import pytest
from django.test import Client

from experiments.models import Experiment
from experiments.services import online as services
from harness import factories
from monitoring.collection.collect import bucket_metric
from monitoring.models import Alert
from monitoring.services.store import samples_store
from registry.models import Event

pytestmark = pytest.mark.django_db

BUCKETS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, float("inf")]


@pytest.fixture
def experiment(team_a, deployer, artifact_factory):
    """A running experiment on endpoint `gr` (p99 SLO 200 ms, error SLO 5 %): control + 2 candidates."""
    pool = factories.pool(team_a, ready_replicas=1)
    stable = artifact_factory(team_a)
    endpoint = factories.endpoint(pool, stable, name="gr", slo_p99_ms=200, slo_error_rate=0.05)
    exp = services.experiment_create(
        user=deployer,
        endpoint=endpoint,
        name="guarded",
        candidates=[artifact_factory(team_a), artifact_factory(team_a)],
        allocation_bp=[3400, 3300, 3300],
    )
    return services.experiment_start(user=deployer, experiment=exp)


def names(exp):
    arms = list(exp.arms.all())
    return arms[0].name, arms[1].name, arms[2].name


def feed(exp, behaviour: dict, *, ticks: int, start, seed: int = 0, rps: int = 60):
    """`ticks` 1-second scrapes per arm: behaviour {arm: (error rate, latency factor[, score beta (a, b)])}."""
    rng = np.random.default_rng(seed)
    for i in range(ticks):
        rows = []
        for arm, (err, slow, *shape) in behaviour.items():
            latencies = rng.lognormal(np.log(0.004 * slow), 0.35, size=rps)
            counts, _ = np.histogram(latencies, bins=[0.0, *BUCKETS])
            scores, _ = np.histogram(rng.beta(*(shape[0] if shape else (2, 6)), size=rps), bins=10, range=(0, 1))
            rows += [("gr", arm, "requests", rps), ("gr", arm, "errors", rng.binomial(rps, err))]
            rows += [("gr", arm, bucket_metric("latency_bucket", le), float(n)) for le, n in zip(BUCKETS, counts)]
            rows += [("gr", arm, f"score_bin:{b}", float(n)) for b, n in enumerate(scores) if n]
        samples_store(rows=rows, at=start + timedelta(seconds=i + 1))


def test_too_little_data_is_pending_not_pass_or_fail(experiment):
    control, a, b = names(experiment)
    feed(experiment, {control: (0.0, 1.0), a: (0.0, 1.0), b: (0.0, 1.0)}, ticks=1, start=experiment.started_at, rps=20)
    result = services.experiment_analyze(experiment_id=experiment.pk, now=experiment.started_at + timedelta(seconds=2))
    for arm in (a, b):
        g = result["guardrails"][arm]
        assert g["status"] == "pending" and g["reason"].startswith("waiting for evidence")
        # every check waits (the shared-outage check passes: no outage)
        assert {c["outcome"] for c in g["checks"] if c["name"] != "shared_outage"} <= {"inconclusive"}
        assert result["candidates"][arm]["decision"] == "continue"
    assert Experiment.objects.get(pk=experiment.pk).state == "running" and not Alert.objects.exists()


def test_healthy_arms_pass_every_check_and_the_experiment_runs_on(experiment, deployer_api):
    control, a, b = names(experiment)
    feed(
        experiment,
        {control: (0.002, 1.0), a: (0.002, 1.0), b: (0.002, 1.0)},
        ticks=20,
        start=experiment.started_at,
        seed=5,
    )
    result = services.experiment_analyze(experiment_id=experiment.pk, now=experiment.started_at + timedelta(seconds=21))
    for arm in (a, b):
        g = result["guardrails"][arm]
        outcomes = {c["name"]: c["outcome"] for c in g["checks"]}
        assert g["status"] == "pass", g["reason"]
        assert outcomes == dict.fromkeys(
            ["shared_outage", "p99_slo", "error_slo", "psi", "error_rate", "latency", "latency_tail"], "pass"
        )
    assert Experiment.objects.get(pk=experiment.pk).state == "running" and not Alert.objects.exists()
    body = deployer_api.get(f"/api/v1/experiments/{experiment.public_id}/results/").json()
    assert body["guardrails"][a]["status"] == "pass" and body["candidates"][a]["guardrails"] == "pass"
    assert {c["name"] for c in body["guardrails"][b]["checks"]} >= {"error_rate", "latency", "p99_slo", "psi"}


def test_an_erroring_arm_stops_the_experiment_for_harm_naming_the_check(experiment, deployer):
    control, good, bad = names(experiment)
    feed(
        experiment, {control: (0.001, 1.0), good: (0.001, 1.0), bad: (0.08, 1.0)}, ticks=12, start=experiment.started_at
    )
    result = services.experiment_analyze(experiment_id=experiment.pk, now=experiment.started_at + timedelta(seconds=13))
    exp = Experiment.objects.get(pk=experiment.pk)
    assert (exp.state, exp.decision, exp.winner.name) == ("decided", "stop", control)
    assert result["guardrails"][bad]["status"] == "fail" and result["guardrails"][good]["status"] != "fail"
    assert result["candidates"][bad]["decision"] == "stop" and result["guardrails_ok"] is False
    event = Event.objects.filter(object_id=exp.pk, action="status_changed", to_state="decided").get()
    assert f"guardrail failed on {bad} (" in event.reason and "error_rate" in event.reason and good not in event.reason
    failed = event.data["guardrails"]
    assert list(failed) == [bad] and "error_rate" in {c["name"] for c in failed[bad]["checks"]}
    check = next(c for c in failed[bad]["checks"] if c["name"] == "error_rate")
    assert check["e_value"] >= check["threshold"] and check["rates"]["candidate"] > 0.05
    alert = Alert.objects.get(kind="experiment_guardrail_failed")
    assert alert.severity == "critical" and alert.endpoint == "gr" and alert.team == exp.endpoint.team
    assert experiment.public_id in alert.reason and bad in alert.reason and "error_rate" in alert.reason
    assert alert.evidence["failed"][bad]["checks"] and alert.links["experiment"].endswith(f"/experiments/{exp.pk}/")
    # the arms leave the route table: a decided experiment serves nothing
    from deployments.routes import route_table

    entry = next(e for e in route_table()["endpoints"] if e["name"] == "gr")
    assert [v["role"] for v in entry["variants"]] == ["stable"]
    # the page says which arm failed which check
    client = Client()
    client.force_login(deployer)
    page = client.get(f"/experiments/{exp.pk}/").content.decode()
    assert 'id="guardrails"' in page and "error_rate" in page and "stopped for harm" in page


def test_a_p99_breach_fails_an_arm_only_with_evidence_against_the_slo_and_the_control(experiment):
    """Both the control and arm A over the 200 ms SLO: A is shown over it, with evidence
    against the SLO, yet no worse than the control (a slow pool is not the arm's fault): it
    never fails. Then the control recovers and A does not: A holds (no pass: the host's tail
    no longer covers it). An arm over the SLO beside a fast control from the start fails
    (tests/monitoring/test_p99_guardrail.py); one whose earlier windows were no worse than
    its control's carries that evidence, so it fails later (the comparison is per window
    over the whole experiment)."""
    control, a, b = names(experiment)
    start = experiment.started_at
    feed(experiment, {control: (0.0, 60.0), a: (0.0, 60.0), b: (0.0, 1.0)}, ticks=20, start=start, seed=2)
    for at in (6, 12, 21):
        result = services.experiment_analyze(experiment_id=experiment.pk, now=start + timedelta(seconds=at))
        p99 = next(c for c in result["guardrails"][a]["checks"] if c["name"] == "p99_slo")
        assert result["guardrails"][a]["status"] != "fail" and p99["outcome"] != "fail"
    assert p99["e_value"] >= p99["e_threshold"] > p99["e_value_control"] and p99["windows_over"] >= 3
    assert Experiment.objects.get(pk=experiment.pk).state == "running"
    feed(
        experiment, {control: (0.0, 1.0), a: (0.0, 60.0), b: (0.0, 1.0)}, ticks=10, start=start + timedelta(seconds=20)
    )
    result = services.experiment_analyze(experiment_id=experiment.pk, now=start + timedelta(seconds=31))
    p99 = next(c for c in result["guardrails"][a]["checks"] if c["name"] == "p99_slo")
    assert p99["outcome"] == "inconclusive" and result["guardrails"][a]["status"] == "pending"
    assert not p99["host_tail"]


def test_results_api_matches_its_documented_schema_key_for_key(experiment, deployer_api):
    control, a, b = names(experiment)
    feed(experiment, {control: (0.0, 1.0), a: (0.0, 1.0), b: (0.0, 1.0)}, ticks=3, start=experiment.started_at)
    before = deployer_api.get(f"/api/v1/experiments/{experiment.public_id}/results/").json()
    assert before["guardrails"][a] == {
        "status": "pending",
        "checks": [],
        "reason": "not judged yet: the experiment has not run an analysis tick",
    }
    services.experiment_analyze(experiment_id=experiment.pk, now=experiment.started_at + timedelta(seconds=4))
    body = deployer_api.get(f"/api/v1/experiments/{experiment.public_id}/results/").json()
    schema = deployer_api.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    components = schema["components"]["schemas"]
    op = schema["paths"]["/api/v1/experiments/{id}/results/"]["get"]["responses"]["200"]["content"]["application/json"][
        "schema"
    ]
    assert op == {"$ref": "#/components/schemas/ExperimentResults"}
    assert set(body) == set(components["ExperimentResults"]["properties"])
    for arm in (a, b):
        assert set(body["guardrails"][arm]) == set(components["ArmGuardrails"]["properties"])
        assert body["guardrails"][arm]["status"] in components["GuardrailStatusEnum"]["enum"]
        assert set(body["candidates"][arm]) == set(components["CandidateResult"]["properties"])
    assert set(body["arms"][control]) == set(components["ArmResult"]["properties"])


@pytest.mark.parametrize("guardrail_psi", [True, False])
def test_prediction_drift_of_an_arm_fails_sustained_unless_the_experiment_turns_the_psi_guardrail_off(
    experiment, guardrail_psi
):
    """An arm that predicts a different distribution (PSI ~0.5, as a trained model against a
    random one): a sustained breach fails it; with `guardrail_psi` off the PSI is shown, never failed."""
    Experiment.objects.filter(pk=experiment.pk).update(guardrail_psi=guardrail_psi)
    control, a, b = names(experiment)
    start = experiment.started_at
    feed(experiment, {control: (0.0, 1.0), a: (0.0, 1.0, (5, 3)), b: (0.0, 1.0)}, ticks=20, start=start, seed=4)
    for at in (6, 12, 22):
        result = services.experiment_analyze(experiment_id=experiment.pk, now=start + timedelta(seconds=at))
    psi = next(c for c in result["guardrails"][a]["checks"] if c["name"] == "psi")
    assert psi["statistic"] > 0.25
    exp = Experiment.objects.get(pk=experiment.pk)
    if guardrail_psi:
        assert psi["outcome"] == "fail" and psi["breaches"] == 3 and result["guardrails"][a]["status"] == "fail"
        assert exp.state == "decided" and "prediction drift PSI" in exp.evidence["guardrails"][a]["reason"]
    else:
        assert psi["outcome"] == "skipped" and "guardrail_psi off" in psi["why"]
        assert result["guardrails"][a]["status"] == "pass" and exp.state == "running"
