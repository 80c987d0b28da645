"""Alert evidence rendered for people (monitoring/evidence_display.py): the judge's checks as a
table with one row per check, mappings as definition lists, numbers rounded, outcomes as
badges, everything escaped — not a Python pprint dump."""

import pytest

from monitoring.evidence_display import render
from monitoring.services.alerts import alert_raise

pytestmark = pytest.mark.django_db

EVIDENCE = {
    "verdict_id": 41,
    "outcome": "fail",
    "stable": "v1-onnx-fp32",
    "candidate": "v2-onnx-int8",
    "step_index": 1,
    "checks": [
        {
            "name": "error_rate",
            "outcome": "fail",
            "candidate": 0.0691234567,
            "stable": 0.0100001,
            "p_value": 1.234e-7,
            "progress": {"have": 312, "need": 500, "unit": "requests"},
        },
        {"name": "latency_p99", "outcome": "pass", "candidate": 4.81234, "stable": 4.5, "window": "step"},
    ],
}


def test_judge_evidence_is_a_table_of_checks(client, alice, team_a):
    alert, _ = alert_raise(
        kind="rollout_rolled_back",
        severity="critical",
        endpoint="ctr",
        rollout_id=3,
        team=team_a,
        reason="ctr: rolled back",
        evidence={**EVIDENCE, "note": "<script>alert(1)</script>"},
    )
    client.force_login(alice)
    page = client.get(f"/monitoring/alerts/{alert.pk}/").content.decode()
    section = page[page.index('id="evidence"') : page.index("Notification attempts")]
    assert "<table" in section and section.count("<tr>") == 3  # header + one row per check
    assert "<th>Name</th><th>Outcome</th>" in section  # the identifying columns first
    assert "0.06912" in section and "0.0691234567" not in section and "1.234e-07" in section  # rounded
    assert "<td>312 of 500 requests</td>" in section  # the judge's progress contract, read as a sentence
    assert '<span class="badge failed">fail</span>' in section and '<span class="badge ok">pass</span>' in section
    assert "<dt>Verdict id</dt><dd>41</dd>" in section and "<dt>Step index</dt><dd>1</dd>" in section
    assert "&lt;script&gt;" in section and "<script>alert" not in section  # escaped
    assert "{'" not in section and "'checks':" not in section  # no pprint dump


def test_scrape_outage_evidence_nests_definition_lists():
    html = render(
        {
            "targets": {
                "http://10.0.0.7:8002/metrics": {
                    "error": "URLError: refused",
                    "failing_since": "2026-11-23T12:00:00+00:00",
                }
            }
        }
    )
    assert html.count("<dl") == 3 and "<dt>Failing since</dt><dd>2026-11-23T12:00:00+00:00</dd>" in html
    assert render({}) == '<span class="muted">none</span>' and render([1.0, 2.5, None]).startswith("1, 2.5, ")
    assert (
        render({"progress": {"have": 40, "need": None, "unit": "scores"}})
        == '<dl class="props evidence"><dt>Progress</dt><dd>40 scores</dd></dl>'
    )
