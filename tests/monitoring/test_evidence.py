"""Alert evidence rendered for people (monitoring/display/evidence.py): the
figures that decided first (candidate vs control, threshold, p-/e-value, sample sizes)
with units, epoch seconds as UTC times, the rest folded in a <details> as one small
definition list per check (never a table with a column per key), everything escaped."""

import re

import pytest

from monitoring.display.evidence import evidence_summary, render
from monitoring.services.alerts import alert_raise

pytestmark = pytest.mark.django_db

# The shapes the judge stores (monitoring/judge/verdict.py, guardrails.py, p99_guardrail.py).
EVIDENCE = {
    "verdict_id": 41,
    "outcome": "fail",
    "stable": "ctr-v1-onnx-fp32__baseline",
    "candidate": "ctr-v2-onnx-int8",
    "step_index": 1,
    "checks": [
        {
            "name": "error_rate",
            "kind": "test",
            "outcome": "fail",
            "test": "mixture e-process (conditional binomial LR, Ville)",
            "samples": {"stable": 4810.0, "candidate": 1212.0},
            "errors": {"stable": 48.0, "candidate": 84.0},
            "rates": {"stable": 0.0099792, "candidate": 0.0693069},
            "statistic": 0.0593277,
            "e_value": 1.8e9,
            "threshold": 20.0,
            "min_samples": 500,
            "margin": 0.01,
            "progress": {"have": 1212, "need": 500, "unit": "requests"},
            "eta_seconds": 0.0,
        },
        {
            "name": "psi",
            "kind": "guardrail",
            "outcome": "inconclusive",
            "samples": {"stable": 900.0, "candidate": 300.0},
            "statistic": 0.31,
            "threshold": 0.25,
            "breaches": 2,
            "breach_since": 1795554625.3,
            "breach_held_s": 4.01,
            "failure_limit": 3,
            "sustain_s": 10.0,
        },
        {
            "name": "latency",
            "kind": "test",
            "outcome": "pass",
            "samples": {"stable": 4810.0, "candidate": 1212.0},
            "quantiles_ms": {
                "stable": {"p50": 2.1, "p95": 3.9, "p99": 5.2},
                "candidate": {"p50": 2.2, "p95": 4.0, "p99": 5.4},
            },
            "statistic": 123456.0,
            "p_value": 0.4,
            "threshold": 0.001,
        },
    ],
}


def test_the_figures_that_decided_come_first_with_units():
    summary = evidence_summary(EVIDENCE)
    assert [c["name"] for c in summary["checks"]] == ["error_rate"]  # the check that failed, not every check
    figures = dict(summary["checks"][0]["figures"])
    assert figures["Rates"] == "candidate 6.93 % vs stable 0.998 %"
    assert figures["Samples"] == "candidate 1212 vs stable 4810"
    assert figures["Error-rate difference"] == "5.93 %" and figures["e-value needed"] == "20"
    assert figures["e-value"] == "1.8e+09"
    assert "Test" not in figures and "Margin" not in figures  # folded, not decisive
    assert ("Candidate", "ctr-v2-onnx-int8") in summary["facts"] and summary["more"] == 2


def test_an_inconclusive_guardrail_reads_its_breach_time_as_a_time():
    html = str(render(EVIDENCE))
    assert "2026-11-24 21:10:25 UTC" in html  # breach_since, never "1,795,554,625.3"
    assert "1,795,554,625" not in html and "1795554625" not in html
    assert "<table" not in html and html.count('class="evidence-record"') == 3  # one small list per check
    assert "<dt>Breach held s</dt><dd>4.01 s</dd>" in html and "<dt>Progress</dt><dd>1212 of 500 requests</dd>" in html
    summary = evidence_summary({"checks": EVIDENCE["checks"][1:]})  # nothing failed: the inconclusive one decides
    assert [c["name"] for c in summary["checks"]] == ["psi"]
    assert dict(summary["checks"][0]["figures"])["Breaches"] == "2 (fails at 3, held 10 s)"


def test_alert_page_shows_the_summary_and_folds_the_rest(client, alice, team_a):
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
    summary, folded = section.split('<details id="evidence-all">')
    assert 'data-check="error_rate"' in summary and 'data-check="latency"' not in summary
    assert "<dt>Rates</dt><dd>candidate 6.93 % vs stable 0.998 %</dd>" in summary
    assert "2 other checks passed or had nothing to say" in summary
    assert "<summary>All evidence</summary>" in folded and "<table" not in section
    assert "&lt;script&gt;" in section and "<script>alert" not in section  # escaped
    assert "{'" not in section and "'checks':" not in section  # no pprint dump
    assert not re.search(r"\d{1,3}(,\d{3}){3}", section)  # no 10-digit figure (an epoch) anywhere


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
    assert html.count("<dl") == 3 and "<dt>Failing since</dt><dd>2026-11-23 12:00:00 UTC</dd>" in html
    assert render({}) == '<span class="muted">none</span>' and render([1.0, 2.5, None]).startswith("1, 2.5, ")
    assert (
        render({"progress": {"have": 40, "need": None, "unit": "scores"}})
        == '<dl class="props evidence"><dt>Progress</dt><dd>40 scores</dd></dl>'
    )
    summary = evidence_summary({"endpoint": "ctr", "code": "bad_weight", "served": "stable"})
    assert summary["checks"] == [] and ("Code", "bad_weight") in summary["facts"]


def test_units_come_from_snake_case_words_only():
    html = render(
        {
            "failed": {
                "ctr-separate-towers": {"samples": 1200, "error_rate": 0.02},
                "http://hooks.example.test/rate": {"attempts": 3},
            },
            "rates": {"control": 0.01, "treatment": 0.015},
        }
    )
    assert "<dt>Samples</dt><dd>1200</dd>" in html and "<dt>Error rate</dt><dd>2 %</dd>" in html
    assert "<dt>Attempts</dt><dd>3</dd>" in html and "<dt>Treatment</dt><dd>1.5 %</dd>" in html


def test_clean_makes_every_kind_of_number_json_friendly():
    import json

    import numpy as np

    from monitoring.judge.evidence import clean

    raw = {
        "f": 1.5, "inf": float("inf"), "-inf": float("-inf"), "nan": float("nan"), "np": np.float64(2.5),
        "npinf": np.float32("inf"), "i": np.int64(7), "b": True, "none": None, "s": "x",
        "nested": [(1, np.float64("nan")), {"k": [np.int32(3), -float("inf")]}],
    }  # fmt: skip
    got = clean(raw)
    assert got == {
        "f": 1.5, "inf": 1e308, "-inf": -1e308, "nan": None, "np": 2.5, "npinf": 1e308, "i": 7, "b": True,
        "none": None, "s": "x", "nested": [[1, None], {"k": [3, -1e308]}],
    }  # fmt: skip
    assert type(got["np"]) is float and type(got["i"]) is int and got["b"] is True
    json.dumps(got, allow_nan=False)  # strict JSON
