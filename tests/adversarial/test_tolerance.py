"""The tolerance the honest tenant is held to (harness/abuse.py) with its host witness: what
the host added to the direct path between the two windows widens the quiet figures by those
milliseconds, never more, and harm the direct path does not share still fails."""

from harness.abuse import harm


def figures(p50, p99, host_p50=None, host_p99=None, n=200, success_rate=1.0) -> dict:
    out = {"n": n, "success_rate": success_rate, "p50_ms": p50, "p99_ms": p99}
    if host_p50 is not None:
        out |= {"host_p50_ms": host_p50, "host_p99_ms": host_p99}
    return out


def test_without_a_witness_the_tolerance_is_as_before():
    assert harm(figures(4.2, 19), figures(8.0, 170)) == []
    assert [p[:3] for p in harm(figures(4.2, 19), figures(18, 250))] == ["p50", "p99"]


def test_a_host_that_slowed_every_path_is_not_harm():
    # a CI run: p50 4.2 -> 18 ms, p99 19 -> 250 ms, while the direct path lost as much
    alone = figures(4.2, 19, host_p50=1.0, host_p99=4.0)
    beside = figures(18, 250, host_p50=8.0, host_p99=70.0)
    assert harm(alone, beside) == []


def test_harm_the_direct_path_does_not_share_still_fails():
    alone = figures(5.0, 20, host_p50=1.0, host_p99=4.0)
    beside = figures(179, 900, host_p50=1.2, host_p99=5.0)  # the HTTP slot exhaustion of the issue
    problems = harm(alone, beside)
    assert [p[:3] for p in problems] == ["p50", "p99"], problems
    assert "host 0.2" in problems[0]


def test_a_witness_that_got_faster_narrows_nothing_and_widens_nothing():
    alone = figures(4.0, 20, host_p50=3.0, host_p99=30.0)
    assert harm(alone, figures(13.0, 180.0, host_p50=1.0, host_p99=2.0)) == []  # at the bounds: 2 x 4 + 5, 4 x 20 + 100
    assert [p[:3] for p in harm(alone, figures(13.1, 180.1, host_p50=1.0, host_p99=2.0))] == ["p50", "p99"]


def test_failures_and_too_few_requests_are_harm_whatever_the_host():
    alone = figures(4.0, 20, host_p50=1.0, host_p99=4.0)
    assert harm(alone, figures(4.0, 20, 50.0, 500.0, success_rate=0.9))[0].startswith("success rate 0.900")
    assert "made 5 requests" in harm(alone, figures(4.0, 20, 1.0, 4.0, n=5))[0]
