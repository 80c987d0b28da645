"""monitoring.selectors.verdicts: the judge's ticks as one row per check (pure functions)."""

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from monitoring.selectors.verdicts import detail, eta_text, progress_text, summarize

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _verdict(seconds, checks):
    return SimpleNamespace(created_at=T0 + timedelta(seconds=seconds), checks=checks)


def test_progress_is_rendered_from_the_evidence_only():
    assert progress_text({"progress": {"have": 312, "need": 500, "unit": "requests"}, "eta_seconds": 40.2}) == (
        "312 of 500 requests · ~40 s",
        0.624,
    )
    assert progress_text({"progress": {"have": 80, "need": None, "unit": "scores"}}) == ("80 scores", None)
    assert progress_text({"progress": {"have": 900, "need": 500, "unit": "samples"}, "eta_seconds": None}) == (
        "sample complete: 900 samples",
        1.0,
    )
    assert progress_text({"name": "psi", "outcome": "pass"}) == ("", None)  # absent: nothing invented
    assert progress_text({"progress": "lots"}) == ("", None)
    assert [eta_text(s) for s in (0.4, 89, 600, 7200, -1, None)] == ["~0 s", "~89 s", "~10 min", "~2.0 h", "", ""]


def test_one_row_per_check_in_the_latest_order_with_a_bounded_trend():
    ticks = [
        _verdict(
            i,
            [
                {"name": "error_rate", "outcome": "inconclusive" if i < 19 else "fail"},
                *([{"name": "psi", "outcome": "pass"}] if i % 2 else []),
            ],
        )
        for i in range(20)
    ]
    rows = summarize(list(reversed(ticks)), trend_length=5)  # newest first, as stored
    assert [r.name for r in rows] == ["error_rate", "psi"]
    assert rows[0].outcome == "fail" and [t["symbol"] for t in rows[0].trend] == ["·", "·", "·", "·", "✗"]
    assert rows[0].trend[-1]["at"] == T0 + timedelta(seconds=19)
    assert rows[1].outcome == "pass" and len(rows[1].trend) == 5  # its own last five appearances


def test_a_skipped_check_reads_as_skipped_not_unknown():
    rows = summarize(
        [
            _verdict(1, [{"name": "latency", "outcome": "skipped"}]),
            _verdict(0, [{"name": "latency", "outcome": "pass"}]),
        ]
    )
    assert [t["symbol"] for t in rows[0].trend] == ["✓", "–"]


def test_breach_counts_are_worded_for_what_they_mean():
    """Never "breach 3 of 3 needed to fail" while the check has not failed."""
    psi = {"name": "psi", "failure_limit": 3, "sustain_s": 10.0}
    assert detail({**psi, "outcome": "inconclusive", "breaches": 1}) == "breach 1 of 3 needed to fail"
    held = detail({**psi, "outcome": "inconclusive", "breaches": 3, "breach_held_s": 4.2})
    assert held == "breaching at 3 looks for 4 s of 10 s needed to fail"
    assert detail({**psi, "outcome": "fail", "breaches": 4}) == "failed after 4 breaches"
    p99 = {"name": "p99_slo", "failure_limit": 3, "over": {"candidate": 0}, "share_over": {"candidate": 0.0}}
    assert "over in 1 of 3 windows needed to fail" in detail({**p99, "outcome": "inconclusive", "windows_over": 1})
    assert "3 needed to fail: met" in detail({**p99, "outcome": "inconclusive", "windows_over": 3})
    assert "over in 3 windows" in detail({**p99, "outcome": "fail", "windows_over": 3})
