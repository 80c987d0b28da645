"""Every rollout kind finishes, and a shared outage is nobody's fault, on real processes: the web
app (live server), a Celery worker and beat, the local pool supervisor with one real
tritonserver, the gateway and an open-loop load, at the judge's defaults. One stack, in order:

1. a twin of the stable is promoted in one step at 100 % (a one-step plan: the SLO guardrails
   judge it, no control is waited for), so the endpoint has a previous stable;
2. `undo` with traffic: the one 100 % step is judged by the SLO guardrails and finishes;
3. a shared outage: a rollout holds its first step, then the pool's only tritonserver, which
   serves the stable, its fair baseline and the candidate alike, is SIGKILLed. The candidate's
   attempts fail over and fail on the stable too: the rollout is not rolled back, no
   "rolled back" alert is raised, a verdict says "shared outage: not judged" and a warning
   alert names the pool. The pool supervisor restarts the replica; while the candidate's model
   is served again after the stable's (loading, or the gateway's breaker still backing off),
   its failed-over attempts are the outage's recovery, not its errors; the rollout is then
   rolled back by hand (the end of the case);
4. `undo` without traffic (the load stopped): nothing to judge, so the step is done after
   30 s without a request and the undo finishes.

Ship's one step at 100 % (UNDO_PLAN's policy: no requests needed) runs on real processes, with
and without traffic, in tests/experiments/test_ship_real.py; tests/monitoring/test_judge_issue_cases.py
covers the 100 % step's rules without processes.

Slow (minutes of real rollouts on a loaded 2-core host): it runs in `make test-slow`, not in
`make test` (marker `slow`).
"""

import os
import signal

import pytest

from deployments.models import Endpoint, PoolModel, PoolModelState, Rollout
from deployments.rollout_machine import TERMINAL, State
from deployments.services import rollout_restarts
from deployments.services import rollouts as rollout_services
from harness.artifacts import package_artifact
from harness.closed_loop import ClosedLoop
from harness.processes import wait_for
from monitoring.judge.guardrails import NO_CONTROL
from monitoring.judge.outage import NOT_JUDGED
from monitoring.models import Alert, Verdict
from serving import tritonserver
from tests.conftest import require_service

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _finished(rollout, timeout: float, what: str) -> Rollout:
    return wait_for(
        lambda: (r := Rollout.objects.get(pk=rollout.pk)).state in TERMINAL and r, timeout=timeout, what=what
    )


def _unloaded(artifact) -> None:
    """The pool drains a replaced stable before it unloads it, and loads it again only after
    (services/pools.py: a 409 while it drains): an undo waits for that, as a person would."""
    wait_for(
        lambda: not PoolModel.objects.filter(artifact=artifact, state=PoolModelState.DRAINING).exists(),
        timeout=120,
        what=f"artifact {artifact.pk} drained",
    )


def test_undo_finishes_with_and_without_traffic_and_a_shared_outage_is_nobodys_fault(
    live_server, subprocess_env, tmp_path, pools_dir, team_a, deployer, onnx_path
):
    require_service("postgres", "redis")
    tritonserver.find_binary()
    with ClosedLoop(live_server.url, subprocess_env, tmp_path, pools_dir) as loop:
        stable, pool, endpoint = loop.serve(team_a, deployer, onnx_path, pool="shared")
        load = loop.load("ctr", rate=40, threads=2, warm=40)

        # 1. a one-step plan at 100 %: promoted by the SLO guardrails ----------------------------------
        twin = package_artifact(team_a, onnx_path, tmp_path)
        rollout = rollout_services.rollout_start(
            user=deployer, endpoint=endpoint, candidate=twin, steps_bp=[10000], promote_grace_seconds=1
        )
        done = _finished(rollout, 240, "one-step rollout finished")
        assert done.state == State.SUCCEEDED, done.reason
        assert Endpoint.objects.get(pk=endpoint.pk).stable_artifact_id == twin.pk

        # 2. undo with traffic: the 100 % step judged by the SLO guardrails, finished ---------------------
        _unloaded(stable)
        undo = rollout_restarts.rollout_undo(user=deployer, endpoint=Endpoint.objects.get(pk=endpoint.pk))
        done = _finished(undo, 240, "undo with traffic finished")
        assert done.state == State.SUCCEEDED, done.reason
        assert Endpoint.objects.get(pk=endpoint.pk).stable_artifact_id == stable.pk
        judged = Verdict.objects.filter(rollout_id=undo.pk)
        assert judged.exists() and not judged.filter(outcome="fail").exists()
        needs_control = [c for v in judged for c in v.checks if (c.get("why") or "").startswith(NO_CONTROL)]
        assert needs_control, [v.checks for v in judged]  # what needs a control said so instead of waiting

        # 3. the one tritonserver serving both arms killed: not the candidate's fault -------------------
        held = package_artifact(team_a, onnx_path, tmp_path)
        rollout = rollout_services.rollout_start(
            user=deployer,
            endpoint=Endpoint.objects.get(pk=endpoint.pk),
            candidate=held,
            steps_bp=[5000, 10000],
            step_min_seconds=900,
            step_deadline_seconds=1200,
        )
        wait_for(lambda: Verdict.objects.filter(rollout_id=rollout.pk).count() >= 3, timeout=180, what="judged at 50 %")
        (pid, _), *others = tritonserver.tritonservers_under(pools_dir)
        assert not others  # one replica: the stable, its baseline copy and the candidate on one server
        os.kill(pid, signal.SIGKILL)
        verdict = wait_for(
            lambda: Verdict.objects.filter(rollout_id=rollout.pk, reason__startswith=NOT_JUDGED).first(),
            timeout=60,
            what="a verdict that sets the outage aside",
        )
        alert = wait_for(
            lambda: Alert.objects.filter(kind="shared_outage", rollout_id=rollout.pk).first(),
            timeout=30,
            what="the shared-outage alert",
        )
        assert (
            alert.severity == "warning" and f"pool {pool.name}" in alert.reason and alert.evidence["pool"] == pool.name
        )
        wait_for(  # the supervisor brings the replica back; the rollout is judged again
            lambda: (
                Verdict.objects.filter(rollout_id=rollout.pk, pk__gt=verdict.pk)
                .exclude(reason__startswith=NOT_JUDGED)
                .exists()
            ),
            timeout=180,
            what="judged again after the replica restarted",
        )
        after = Rollout.objects.get(pk=rollout.pk)
        assert after.state == State.CANARY and after.step_index == 0, (after.state, after.reason)
        assert not Alert.objects.filter(rollout_id=rollout.pk, kind="rollout_rolled_back").exists()
        assert not Verdict.objects.filter(rollout_id=rollout.pk, outcome="fail").exists()
        rollout_services.rollout_rollback(user=deployer, rollout=after, reason="end of the shared-outage case")
        _finished(rollout, 120, "held rollout rolled back by hand")

        # 4. undo without traffic: done after 30 s with no request ---------------------------------------
        wait_for(
            lambda: PoolModel.objects.filter(artifact=stable, state=PoolModelState.READY).exists(),
            timeout=120,
            what="stable READY again",
        )
        load.stop()
        _unloaded(twin)
        undo = rollout_restarts.rollout_undo(user=deployer, endpoint=Endpoint.objects.get(pk=endpoint.pk))
        done = _finished(undo, 240, "undo without traffic finished")
        assert done.state == State.SUCCEEDED, done.reason
        assert Endpoint.objects.get(pk=endpoint.pk).stable_artifact_id == twin.pk
        waiting = Verdict.objects.filter(rollout_id=undo.pk, reason__startswith="waiting for traffic")
        assert waiting.exists()  # what it said while it waited
