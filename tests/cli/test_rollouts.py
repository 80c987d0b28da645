"""`modelplane` endpoints and rollouts against a live server, with the rollout moved by
the platform's own services: the candidate's readiness and unloading are written on the
pool-model rows (no tritonserver: a pool without processes, as harness/factories.py makes),
and the verdicts come from the real canary judge over synthetic metric samples (as
tests/monitoring/test_canary_loop.py does). The CLI runs as a child process over HTTP."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from deployments.models import PoolModelState, Rollout
from deployments.services import rollouts as rollout_services
from harness import factories
from modelplane_cli import exits
from monitoring.services import canary
from monitoring.services.store import samples_store
from tests.cli.conftest import pool_model_state, popen_cli, wait_log
from tests.monitoring.canary_feed import feed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_endpoint_pool_and_artifact_commands(rollout_setup, cli_as, alice):
    cli, pool, stable, (candidate, *_) = rollout_setup
    listed = cli("endpoint", "list")
    assert listed.code == 0 and "ctr" in listed.out and "cpu-pool" in listed.out, listed
    assert (
        cli("endpoint", "get", "ctr", "--field", "stable_variant").out.strip() == f"v{stable.version.version}-onnx-fp32"
    )
    pools = cli("pool", "list", "--json")
    assert pools.code == 0 and [p["name"] for p in pools.json()["results"]] == ["cpu-pool"], pools
    detail = cli("pool", "get", "cpu-pool")
    assert detail.code == 0 and "r0" in detail.out and stable.triton_model_name in detail.out, detail
    artifacts = cli("artifact", "list", stable.version_id, "--json")
    assert artifacts.code == 0 and artifacts.json()["results"][0]["id"] == stable.pk, artifacts
    one = cli("artifact", "get", stable.pk)
    assert one.code == 0 and "servable" in one.out and stable.triton_model_name in one.out, one

    duplicate = cli("endpoint", "create", "ctr", "--pool", "cpu-pool", "--stable-artifact", stable.pk)
    assert duplicate.code == exits.API, duplicate
    no_pool = cli("endpoint", "create", "ctr2", "--pool", "nope", "--stable-artifact", stable.pk)
    assert no_pool.code == exits.API and "pool" in no_pool.err and "pool_not_found" in no_pool.err, no_pool
    bad_steps = cli("rollout", "start", "ctr", "--candidate", stable.pk, "--steps", "50,25")
    assert bad_steps.code == exits.USAGE and "more traffic than the one before" in bad_steps.err, bad_steps
    # a developer of the team may read the endpoint but not roll out: 403, the auth exit code
    developer = cli_as(alice)
    assert developer("endpoint", "get", "ctr").code == 0
    refused = developer("rollout", "start", "ctr", "--candidate", candidate.pk)
    assert refused.code == exits.AUTH and "HTTP 403" in refused.err, refused
    assert not Rollout.objects.exists()


def test_watch_a_rollout_the_judge_rolls_back(rollout_setup, tmp_path):
    cli, pool, stable, (candidate, *_) = rollout_setup
    started = cli(
        "rollout", "start", "ctr", "--candidate", candidate.pk, "--steps", "5,100", "--step-min-seconds", "5", "--json"
    )
    assert started.code == 0, started
    rollout_id = started.json()["id"]
    assert started.json()["state"] == "loading" and started.json()["steps_bp"] == [500, 10000]

    log = tmp_path / "watch.log"
    watch = popen_cli("rollout", "watch", rollout_id, "--interval", "0.3", env=cli.env, log=log)
    try:
        wait_log(log, "pending → loading", watch)
        pool_model_state(candidate, PoolModelState.READY)
        pool_model_state(stable, PoolModelState.READY)  # and the rollout's fair-baseline copy of it
        rollout = rollout_services.rollout_reconcile(rollout_id=rollout_id)
        assert rollout.state == "canary"
        wait_log(log, "loading → canary step 1/2 (5%)", watch)

        start = rollout.traffic_started_at
        feed(rollout, ticks=12, start=start, cand_err=0.08)  # the candidate fails 8 % of requests
        result = canary.judge_rollout(Rollout.objects.get(pk=rollout_id), now=start + timedelta(seconds=12))
        assert result["verdict"] == "fail"
        wait_log(log, "judge fail", watch)
        wait_log(log, "canary step 1/2 (5%) → rolling_back", watch)
        assert watch.poll() is None  # still draining: the watch waits for the end

        rollout_services.rollout_reconcile(rollout_id=rollout_id)  # asks the pool to drain and unload
        pool_model_state(candidate, PoolModelState.UNLOADED)
        assert rollout_services.rollout_reconcile(rollout_id=rollout_id).state == "rolled_back"
        assert watch.wait(30) == exits.ROLLED_BACK, log.read_text()
    finally:
        if watch.poll() is None:
            watch.kill()
    text = log.read_text()
    lines = text.splitlines()
    assert lines[0].startswith(f"rollout #{rollout_id} on ctr: candidate v") and "steps 5/100%" in lines[0]
    verdict = next(line for line in lines if "judge fail" in line)
    assert "error_rate=fail" in verdict and "step 1/2" in verdict and "candidate error rate" in verdict
    assert lines[-1].startswith(f"rollout #{rollout_id} rolled_back: judge:")
    assert "\r" not in text and "\x1b" not in text  # not a TTY: plain lines, one per event

    again = cli("rollout", "watch", rollout_id, "--json")  # an ended rollout: its history, its exit code, its JSON
    assert again.code == exits.ROLLED_BACK and again.json()["state"] == "rolled_back", again
    assert "judge fail" in again.err and again.out.lstrip().startswith("{")
    late = cli("rollout", "rollback", rollout_id)
    assert late.code == exits.API and "illegal_transition" in late.err and "HTTP 409" in late.err, late


def test_pause_resume_promote_with_generations(rollout_setup, tmp_path):
    cli, pool, stable, (candidate, stuck, _) = rollout_setup
    log = tmp_path / "start-watch.log"
    watch = popen_cli(
        "rollout",
        "start",
        "ctr",
        "--candidate",
        candidate.pk,
        "--steps",
        "50,100",
        "--promote-grace-seconds",
        "0",
        "--watch",
        "--interval",
        "0.3",
        env=cli.env,
        log=log,
    )
    try:
        text = wait_log(log, "Started rollout #", watch)
        rollout_id = int(text.split("Started rollout #")[1].split()[0])
        pool_model_state(candidate, PoolModelState.READY)
        pool_model_state(stable, PoolModelState.READY)  # and the rollout's fair-baseline copy of it
        rollout_services.rollout_reconcile(rollout_id=rollout_id)
        wait_log(log, "→ canary step 1/2 (50%)", watch)

        seen = cli("rollout", "get", rollout_id, "--json").json()
        assert seen["state"] == "canary" and seen["traffic"] == {
            "stable_bp": 0,
            "candidate_bp": 5000,
            "baseline_bp": 5000,
            "candidate_role": "canary",
        }
        stale = cli("rollout", "pause", rollout_id, "--generation", seen["generation"] - 1)
        assert stale.code == exits.API and "stale_generation" in stale.err and "HTTP 409" in stale.err, stale
        paused = cli(
            "rollout", "pause", rollout_id, "--generation", seen["generation"], "--reason", "looking at a dashboard"
        )
        assert paused.code == 0 and "now paused" in paused.out, paused
        assert watch.wait(30) == exits.PAUSED  # the watch stops: a person has to act
    finally:
        if watch.poll() is None:
            watch.kill()
    assert "rollout resume" in log.read_text().splitlines()[-1]

    human = cli("rollout", "get", rollout_id)
    assert human.code == 0 and "paused" in human.out and "generation:" in human.out, human
    assert cli("rollout", "resume", rollout_id, "--field", "state").out.strip() == "canary"
    assert cli("rollout", "promote", rollout_id, "--field", "state").out.strip() == "promoting"
    assert rollout_services.rollout_reconcile(rollout_id=rollout_id).state == "succeeded"
    done = cli("rollout", "watch", rollout_id)
    assert done.code == 0, done
    assert "paused [dora]  looking at a dashboard" in done.out and "promoting → succeeded" in done.out
    assert cli("endpoint", "get", "ctr", "--field", "stable_artifact").out.strip() == str(candidate.pk)

    # a rollout whose candidate never loads: the watch gives up at --timeout (exit 6) and says it goes on
    blocked = cli("rollout", "start", "ctr", "--candidate", stuck.pk, "--field", "id")
    assert blocked.code == 0, blocked
    waited = cli("rollout", "watch", blocked.out.strip(), "--timeout", "1", "--interval", "0.3")
    assert waited.code == exits.TIMEOUT and "gave up waiting" in waited.err, waited

    table = cli("rollout", "list", "--endpoint", "ctr", "--state", "succeeded")
    assert table.code == 0 and len(table.out.strip().splitlines()) == 2 and "succeeded" in table.out, table
    assert len(cli("rollout", "list", "--json").json()["results"]) == 2


def test_start_without_steps_takes_the_forecasts_plan_and_says_so(rollout_setup):
    """As the endpoint page's form: no --steps is the plan the rollout forecast suggests for
    the endpoint's observed traffic (at 20 req/s, 50/100 %: a 10 % canary would get 2 req/s,
    too little for its tests to act within seconds), not the server's fixed 10/25/50/100."""
    cli, pool, stable, (candidate, *_) = rollout_setup
    idle = cli("rollout", "start", "ctr", "--candidate", candidate.pk, "--json")
    assert idle.code == 0, idle
    assert idle.json()["steps_bp"] == [2500, 5000, 10000]  # no traffic seen: the forecast's plan for that
    assert "Steps 25/50/100 % from the rollout forecast (no traffic observed yet)" in idle.err, idle
    factories.endpoint(pool, stable, name="busy", slo_p99_ms=200)
    now = timezone.now()
    for tick in range(30):  # 20 req/s over the last minute, as the collector stores it
        samples_store(rows=[("busy", "v1", "requests", 40.0)], at=now - timedelta(seconds=2 * tick))
    busy = cli("rollout", "start", "busy", "--candidate", candidate.pk, "--json")
    assert busy.code == 0, busy
    assert busy.json()["steps_bp"] == [5000, 10000]
    assert "Steps 50/100 % from the rollout forecast (20 req/s observed)" in busy.err, busy
    factories.endpoint(pool, stable, name="chosen")
    chosen = cli("rollout", "start", "chosen", "--candidate", candidate.pk, "--steps", "10,100", "--json")
    assert chosen.code == 0 and chosen.json()["steps_bp"] == [1000, 10000], chosen
    assert "forecast" not in chosen.err  # --steps: the user's plan, no forecast asked


def test_on_a_terminal_the_watch_is_a_live_view_redrawn_in_place(rollout_setup):
    """Under a pseudo-terminal the watch redraws a block below the event lines with what the
    endpoint page shows: state and step, step timer, generation, every arm's share (the
    stable, the fair baseline copy and the candidate), the judge's guardrails and the last
    decision with its reason."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    from tests.cli.conftest import ROOT

    cli, pool, stable, (candidate, *_) = rollout_setup
    rollout_id = int(
        cli(
            "rollout",
            "start",
            "ctr",
            "--candidate",
            candidate.pk,
            "--steps",
            "5,100",
            "--step-min-seconds",
            "5",
            "--field",
            "id",
        ).out
    )
    pool_model_state(candidate, PoolModelState.READY)
    pool_model_state(stable, PoolModelState.READY)  # and the rollout's fair-baseline copy of it
    rollout = rollout_services.rollout_reconcile(rollout_id=rollout_id)
    feed(rollout, ticks=3, start=rollout.traffic_started_at)  # too little evidence yet: inconclusive
    canary.judge_rollout(Rollout.objects.get(pk=rollout_id), now=rollout.traffic_started_at + timedelta(seconds=3))

    leader, follower = pty.openpty()
    # a terminal 200 columns wide, whatever COLUMNS the run inherited (the lines fit it)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {k: v for k, v in cli.env.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "modelplane_cli",
            "rollout",
            "watch",
            str(rollout_id),
            "--timeout",
            "2",
            "--interval",
            "0.3",
        ],
        cwd=ROOT,
        env=env,
        stdout=follower,
        stderr=follower,
        stdin=subprocess.DEVNULL,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(30) == exits.TIMEOUT
    screen = b"".join(chunks).decode()
    view = rf"rollout #{rollout_id} ctr · canary step 1/2 \(5%\) · step timer \ds/5s · gen 3\r?\n"
    # every arm with its role, in the API's `arms` order (the endpoint page's): candidate, baseline, stable
    view += rf"  candidate +v{candidate.version.version}-onnx-fp32 +5%\r?\n"
    view += rf"  baseline +{stable_variant(stable)}-baseline +5%\r?\n"
    view += rf"  stable +{stable_variant(stable)} +90%\r?\n"
    view += r"guardrails: judge \x1b\[33minconclusive\x1b\[0m at \d\d:\d\d:\d\d \(step 1/2 \(5%\)\)  shared_outage=\w+ p99_slo=\w+"
    assert re.search(view, screen), screen
    assert re.search(r"last decision: \d\d:\d\d:\d\d  loading → canary step 1/2 \(5%\)  candidate READY", screen)
    assert "\r\x1b[5A\x1b[J" in screen  # the six-line view goes back to its first line and is drawn again
    assert screen.count("gen 3") >= 3  # redrawn at each poll (the step timer moves), not appended as lines
    assert "traffic:" not in screen  # a terminal has the live view; the traffic lines are for logs


def stable_variant(artifact) -> str:
    return f"v{artifact.version.version}-onnx-fp32"


def test_ctrl_c_stops_watching_and_leaves_the_rollout_alone(rollout_setup, tmp_path):
    import signal

    cli, pool, stable, (candidate, *_) = rollout_setup
    rollout_id = int(cli("rollout", "start", "ctr", "--candidate", candidate.pk, "--field", "id").out)
    log = tmp_path / "watch.log"
    watch = popen_cli("rollout", "watch", rollout_id, "--interval", "0.3", env=cli.env, log=log)
    try:
        wait_log(log, "pending → loading", watch)
        watch.send_signal(signal.SIGINT)
        assert watch.wait(30) == exits.INTERRUPTED
    finally:
        if watch.poll() is None:
            watch.kill()
    assert "interrupted: stopped waiting (the server carries on)" in log.read_text()
    assert Rollout.objects.get(pk=rollout_id).state == "loading"
