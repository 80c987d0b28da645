"""Monitoring's fragments on other apps' pages: the judge's verdicts on an endpoint's page
come through the {% rollout_verdicts %} inclusion tag (deployments imports nothing from
monitoring), scoped to what the viewer may see."""

import pytest
from django.test import Client
from django.utils import timezone

from deployments.rollout_machine import State
from monitoring.models import Verdict
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def rollout(team_a, artifact_factory):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    endpoint = factories.endpoint(pool, artifact_factory(team_a), name="ctr")
    return factories.rollout(endpoint, artifact_factory(team_a), state=State.CANARY, step_started_at=timezone.now())


def _verdict(rollout, team, outcome, reason):
    now = timezone.now()
    return Verdict.objects.create(rollout_id=rollout.pk, endpoint="ctr", step=0, stable_variant="v1-onnx-fp32",
                                  candidate_variant="v2-onnx-fp32", outcome=outcome, reason=reason,
                                  checks=[{"name": "error_rate", "outcome": outcome, "e_value": 42.5}],
                                  window_start=now, window_end=now, team=team)


def test_endpoint_page_shows_the_judges_verdicts_of_its_rollout(rollout, deployer, team_a, team_b):
    _verdict(rollout, team_a, "fail", "candidate errs more often")
    _verdict(rollout, team_b, "pass", "a verdict of another team's row")  # never shown to team A
    client = Client()
    client.force_login(deployer)
    page = client.get(f"/deployments/endpoints/ctr/?rollout={rollout.pk}").content.decode()
    table = page[page.index('<table id="verdicts">'):]
    table = table[: table.index("</table>")]
    assert "candidate errs more often" in table and "error_rate: fail" in table and "e=42.50" in table
    assert "another team" not in table
    partial = client.get(f"/deployments/endpoints/ctr/?partial=status&rollout={rollout.pk}", HTTP_HX_REQUEST="true")
    assert "candidate errs more often" in partial.content.decode()  # the polled fragment carries it too


def test_no_verdicts_yet_says_so(rollout, deployer):
    client = Client()
    client.force_login(deployer)
    page = client.get(f"/deployments/endpoints/ctr/?rollout={rollout.pk}").content.decode()
    assert "No verdicts yet" in page


def test_a_waiting_check_shows_its_progress(rollout, deployer, team_a):
    now = timezone.now()
    Verdict.objects.create(
        rollout_id=rollout.pk, endpoint="ctr", step=0, stable_variant="v1-onnx-fp32", candidate_variant="v2-onnx-fp32",
        outcome="inconclusive", reason="waiting for evidence", window_start=now, window_end=now, team=team_a,
        checks=[{"name": "error_rate", "outcome": "inconclusive", "progress": {"have": 312, "need": 500, "unit": "requests"},
                 "eta_seconds": 18.8},
                {"name": "p99_slo", "outcome": "inconclusive", "breaches": 1, "failure_limit": 3,
                 "progress": {"have": 400, "need": 100, "unit": "requests"}, "eta_seconds": 0.0}])
    client = Client()
    client.force_login(deployer)
    page = client.get(f"/deployments/endpoints/ctr/?rollout={rollout.pk}").content.decode()
    assert "error_rate: inconclusive (312 of 500 requests, ~19 s)" in page
    assert "p99_slo: inconclusive (breach 1 of 3)" in page and "400 of 100" not in page
