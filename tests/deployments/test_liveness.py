"""The pure judge of replica probes (deployments/drivers/liveness.py): state in, verdict out."""

import pytest

from deployments.drivers.liveness import (
    DEAD,
    READY,
    STARTING,
    UNREADY,
    LivenessPolicy,
    ProbeRecord,
    Verdict,
    exit_reason,
    observe,
)

POLICY = LivenessPolicy(unready_after=2, kill_after=3, kill_window_s=6.0, start_grace_s=60.0)
STARTED = 1_000.0
UP_28_MIN = STARTED + 28 * 60
LIVE = ProbeRecord(live_since=STARTED + 1)


def run(probes, *, record=LIVE, policy=POLICY):
    """Fold (sent_at, duration, failure) probes; every verdict in order."""
    verdicts = []
    for sent_at, duration, failure in probes:
        record, verdict = observe(
            record, failure=failure, sent_at=sent_at, now=sent_at + duration, started_at=STARTED, policy=policy
        )
        verdicts.append(verdict)
    return record, verdicts


def test_one_missed_probe_of_a_long_running_replica_neither_kills_nor_unreadies_it():
    record, verdicts = run([(UP_28_MIN, 2.0, "timeout after 2.0 s")])
    assert verdicts[0].status == READY
    assert "1 probe failed over 2.0 s: timeout after 2.0 s" in verdicts[0].reason
    assert record.failures == 1
    record, verdicts = run([(UP_28_MIN + 3, 0.01, "")], record=record)
    assert verdicts == [Verdict(READY)] and record.failures == 0 and record.failing_since is None


def test_consecutive_failures_unready_then_kill_with_the_real_reason():
    probes = [(UP_28_MIN + i * 3.1, 2.0, "timeout after 2.0 s") for i in range(3)]
    _, verdicts = run(probes)
    assert [v.status for v in verdicts] == [READY, UNREADY, DEAD]
    assert verdicts[1].reason == "not answering: 2 probes failed over 5.1 s: timeout after 2.0 s"
    assert verdicts[2].reason == "not live: 3 probes failed over 8.2 s: timeout after 2.0 s"
    assert "after start" not in verdicts[2].reason


def test_three_quick_failures_are_not_enough_without_the_window():
    probes = [(UP_28_MIN + i * 0.5, 0.01, "connection refused") for i in range(5)]
    _, verdicts = run(probes)
    assert [v.status for v in verdicts] == [READY, UNREADY, UNREADY, UNREADY, UNREADY]
    _, verdicts = run([*probes, (UP_28_MIN + 6.0, 0.01, "connection refused")])
    assert verdicts[-1].status == DEAD
    assert verdicts[-1].reason == "not live: 6 probes failed over 6.0 s: connection refused"


def test_a_success_between_failures_restarts_the_count():
    probes = [
        (UP_28_MIN, 2.0, "timeout after 2.0 s"),
        (UP_28_MIN + 3, 2.0, "timeout after 2.0 s"),
        (UP_28_MIN + 6, 0.01, ""),
        (UP_28_MIN + 7, 2.0, "timeout after 2.0 s"),
        (UP_28_MIN + 10, 2.0, "HTTP 503"),
    ]
    _, verdicts = run(probes)
    assert [v.status for v in verdicts] == [READY, UNREADY, READY, READY, UNREADY]
    assert verdicts[-1].reason == "not answering: 2 probes failed over 5.0 s: HTTP 503"


def test_a_replica_never_live_gets_its_start_grace_then_says_so():
    record = ProbeRecord()
    _, verdicts = run([(STARTED + 5, 0.01, "connection refused")], record=record)
    assert verdicts[0].status == STARTING and "not live yet 5 s after start" in verdicts[0].reason
    probes = [(STARTED + t, 0.01, "connection refused") for t in (1, 30, 59, 61)]
    _, verdicts = run(probes, record=record)
    assert [v.status for v in verdicts] == [STARTING, STARTING, STARTING, DEAD]
    assert verdicts[-1].reason == "not live 60 s after start: 4 probes failed over 60.0 s: connection refused"
    record, verdicts = run([(STARTED + 10, 0.01, "")], record=record)
    assert verdicts[0].status == READY and record.live_since == STARTED + 10.01


def test_the_record_survives_the_state_file():
    record, _ = run([(UP_28_MIN, 2.0, "timeout after 2.0 s")])
    assert ProbeRecord.from_dict(record.to_dict()) == record
    assert ProbeRecord.from_dict(None) == ProbeRecord()


@pytest.mark.parametrize("fields", [dict(unready_after=0), dict(unready_after=4, kill_after=3), dict(kill_window_s=-1)])
def test_a_policy_that_cannot_be_judged_is_refused(fields):
    with pytest.raises(ValueError):
        LivenessPolicy(**fields)


def test_exit_reasons():
    assert exit_reason(-9) == "killed by SIGKILL"
    assert exit_reason(-15) == "killed by SIGTERM"
    assert exit_reason(1) == "exited with code 1"
    assert exit_reason(None).startswith("exit status unknown")
