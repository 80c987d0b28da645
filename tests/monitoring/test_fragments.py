"""Monitoring's fragments on other apps' pages: the judge's verdicts on an endpoint's page
come through the {% rollout_verdicts %} inclusion tag (deployments imports nothing from
monitoring), scoped to what the viewer may see."""

import pytest
from django.test import Client
from django.utils import timezone

from deployments.rollout_machine import State
from harness import factories
from monitoring.judge.evidence import ArmWindow, JudgeConfig
from monitoring.judge.p99_guardrail import check_p99_slo
from monitoring.models import Verdict

pytestmark = pytest.mark.django_db


@pytest.fixture
def rollout(team_a, artifact_factory):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    endpoint = factories.endpoint(pool, artifact_factory(team_a), name="ctr")
    return factories.rollout(
        endpoint,
        artifact_factory(team_a),
        state=State.CANARY,
        step_started_at=timezone.now(),
        steps_bp=[500, 2500, 5000, 10000],
    )


def _verdict(rollout, team, outcome, reason, checks=None, step=0):
    now = timezone.now()
    return Verdict.objects.create(
        rollout_id=rollout.pk,
        endpoint="ctr",
        step=step,
        stable_variant="v1-onnx-fp32",
        candidate_variant="v2-onnx-fp32",
        outcome=outcome,
        reason=reason,
        checks=checks or [{"name": "error_rate", "outcome": outcome, "e_value": 42.5}],
        window_start=now,
        window_end=now,
        team=team,
    )


def test_endpoint_page_shows_the_judges_verdicts_of_its_rollout(rollout, deployer, team_a, team_b):
    _verdict(rollout, team_a, "fail", "candidate errs more often")
    _verdict(rollout, team_b, "pass", "a verdict of another team's row")  # never shown to team A
    client = Client()
    client.force_login(deployer)
    page = client.get(f"/deployments/endpoints/ctr/?rollout={rollout.pk}").content.decode()
    table = page[page.index('<div id="verdicts-summary">') :]
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
        rollout_id=rollout.pk,
        endpoint="ctr",
        step=0,
        stable_variant="v1-onnx-fp32",
        candidate_variant="v2-onnx-fp32",
        outcome="inconclusive",
        reason="waiting for evidence",
        window_start=now,
        window_end=now,
        team=team_a,
        checks=[
            {
                "name": "error_rate",
                "outcome": "inconclusive",
                "progress": {"have": 312, "need": 500, "unit": "requests"},
                "eta_seconds": 18.8,
            },
            _two_slow_in_141(),
        ],
    )
    client = Client()
    client.force_login(deployer)
    page = client.get(f"/deployments/endpoints/ctr/?rollout={rollout.pk}").content.decode()
    assert "312 of 500 requests · ~19 s" in page
    assert "141 of 100" not in page and "sample complete: 141 requests" in page
    # the p99 guardrail says where its evidence stands, never a breach count
    assert "2 of 141 over 50 ms (1.4%, 1% allowed)" in page and "vs SLO" in page and "breach" not in page


def _two_slow_in_141() -> dict:
    """The p99 guardrail's evidence on the issue's case (2 of 141 candidate requests over a
    50 ms SLO, in 2 of 36 ticks), as the judge stores it."""
    per_tick = [{0.002: 4.0}] * 35 + [{0.002: 1.0}]
    per_tick[9] = per_tick[30] = {0.002: 3.0, 0.05: 0.0, 0.1: 1.0}
    candidate = ArmWindow(
        ticks=[(sum(h.values()), 0.0) for h in per_tick],
        latency_ticks=per_tick,
        latency_buckets={0.002: 139.0, 0.05: 0.0, 0.1: 2.0},
    )
    return check_p99_slo(ArmWindow(), candidate, JudgeConfig(slo_p99_ms=50.0), compare=False, seconds=72.0)


def test_verdicts_are_grouped_per_check_with_trend_progress_and_the_headers_step(rollout, deployer, team_a):
    """Fifteen one-second ticks read as one row per check: its latest outcome, its trend,
    and its progress toward a verdict from the evidence (i12b's `progress`/`eta_seconds`)."""
    for tick in range(15):
        last = tick == 14
        _verdict(
            rollout,
            team_a,
            "pass" if last else "inconclusive",
            f"tick {tick}",
            step=0,
            checks=[
                {
                    "name": "error_rate",
                    "kind": "test",
                    "outcome": "pass" if last else "inconclusive",
                    "e_value": 1.0 + tick,
                    "progress": {"have": 20 * (tick + 1), "need": 500, "unit": "requests"},
                    "eta_seconds": 40.4 - tick,
                },
                {
                    "name": "p99_slo",
                    "kind": "guardrail",
                    "outcome": "pass",
                    "statistic": 12.3456,
                },  # no progress: nothing shown
            ],
        )
    client = Client()
    client.force_login(deployer)
    page = client.get(f"/deployments/endpoints/ctr/?rollout={rollout.pk}").content.decode()
    summary = page[page.index('<div id="verdicts-summary">') :]
    summary = summary[: summary.index("</div>\n", summary.index("</table>"))]
    assert summary.count('<tr data-check="error_rate">') == 1 and summary.count('<tr data-check="p99_slo">') == 1
    assert "tick 14" in summary and "tick 13" not in summary  # the latest reason only
    assert "300 of 500 requests · ~26 s" in summary  # the newest tick's evidence
    error_row = summary[summary.index('data-check="error_rate"') : summary.index('data-check="p99_slo"')]
    assert (
        error_row.count('class="trend-inconclusive"') == 11 and error_row.count('class="trend-pass"') == 1
    )  # last 12 ticks
    p99_row = summary[summary.index('data-check="p99_slo"') :]
    assert "of" not in p99_row.split('class="progress-cell">')[1].split("</td>")[0]
    assert "statistic 12.3" in p99_row and "12.3456" not in p99_row  # rounded
    # The verdict's step is the header's: "step 1 of 4", never "step 0".
    assert f"step 1 of {len(rollout.plan.steps_bp)}" in summary and 'id="rollout-state"' in page
    assert f"canary · step 1 of {len(rollout.plan.steps_bp)}" in page[page.index('id="rollout-state"') :]
