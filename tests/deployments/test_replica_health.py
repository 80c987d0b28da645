"""Health that tells the truth: a real `run_pools` supervisor and a real
tritonserver replica; /healthz and the pool page read what the supervisor recorded.

Frozen (SIGSTOP): not ready within seconds, named on /healthz, and not killed on one
missed probe; SIGCONT: ready again, same process. Frozen for longer than the kill window:
killed and restarted with the real reason ("not live: N probes failed over 12.4 s:
timeout …"), not "not live 60s after start". SIGKILL: on /healthz within seconds and
restarted with "killed by SIGKILL". The kill window is 20 s here (6 s by default) so the
test can watch a frozen replica that is not killed on a loaded machine.
"""

import os
import re
import signal
import sys
import time

import pytest
from django.urls import reverse

from deployments.models import PoolReplica, ReplicaStatus
from deployments.services import pools as pool_services
from harness.processes import spawn, stop, wait_for
from registry.models import Event
from serving import tritonserver
from tests.conftest import require_service

pytestmark = pytest.mark.integration
KILL_WINDOW_S = 20.0  # long enough for two missed probes to be recorded on a busy machine


def _replica(pool_name: str) -> PoolReplica | None:
    return PoolReplica.objects.filter(pool__name=pool_name, name="r0").first()


def _health(client) -> tuple[int, dict]:
    response = client.get("/healthz")
    return response.status_code, response.json()["components"]["pools"]


def _watch_health(client, pool_name: str, needle: str, timeout: float) -> tuple[float, str]:
    """Poll /healthz until it names r0 of the pool with `needle`; (seconds, what it said)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        status, pools = _health(client)
        said = pools.get("not_ready", {}).get(pool_name, {}).get("r0", "")
        if status == 503 and needle in said:
            return time.monotonic() - started, said
        time.sleep(0.02)
    raise TimeoutError(f"/healthz never named {pool_name}/r0 with {needle!r}; last: {status} {pools}")


def _healthy(client, pool_name: str) -> PoolReplica | None:
    replica = _replica(pool_name)
    ok = replica and replica.status == ReplicaStatus.READY and _health(client)[0] == 200
    return replica if ok else None


def test_frozen_and_killed_replicas_show_on_healthz_and_are_judged_on_several_probes(
    client, settings, subprocess_env, pools_dir, tmp_path, deployer, team_a
):
    require_service("postgres", "redis")
    try:
        tritonserver.find_binary()
    except tritonserver.TritonNotAvailable as exc:
        pytest.skip(str(exc))
    settings.HEALTHZ_EXPECT = ["pools"]
    env = {**subprocess_env, "POOLS_DIR": str(pools_dir), "POOL_PROBE_KILL_WINDOW_S": str(KILL_WINDOW_S)}
    log_path = tmp_path / "run_pools.log"
    supervisor = spawn(
        [sys.executable, "manage.py", "run_pools", "--interval", "0.3", "--stop-replicas-on-exit"], env, log_path
    )
    client.force_login(deployer)
    settings.HEALTHZ_TOKEN = "health-token-for-tests"  # the components are for staff and the token
    client.defaults["HTTP_AUTHORIZATION"] = "Bearer health-token-for-tests"
    frozen = None
    try:
        pool_services.pool_create(user=deployer, name="truth", team=team_a, replicas=1)
        first = wait_for(lambda: _healthy(client, "truth"), timeout=120, what="replica r0 ready, /healthz 200")
        page = reverse("deployments:pool-detail", args=["truth"]) + "?partial=live"

        # Frozen: not ready within seconds, named on /healthz and the pool page, not killed.
        frozen = first.pid
        os.kill(frozen, signal.SIGSTOP)
        seen_s, said = _watch_health(client, "truth", "not answering", timeout=KILL_WINDOW_S)
        assert re.search(r"down: not answering: \d probes failed over [\d.]+ s: timeout after 2\.0 s", said), said
        html = client.get(page).content.decode()
        assert "badge failed" in html and "not answering" in html, html[:3000]
        replica = _replica("truth")
        assert replica.pid == frozen and replica.restarts == 0  # several probes missed, not killed
        assert tritonserver.process_state(frozen) == "running"
        print(f"frozen replica on /healthz after {seen_s:.1f} s")

        os.kill(frozen, signal.SIGCONT)
        back = wait_for(lambda: _healthy(client, "truth"), timeout=60, what="r0 ready again after SIGCONT")
        assert back.pid == frozen and back.restarts == 0
        assert Event.objects.filter(action="replica_down", reason__startswith="not answering").exists()

        # Frozen past the kill window: killed and restarted, with the real reason.
        os.kill(frozen, signal.SIGSTOP)
        restarted = wait_for(
            lambda: (r := _healthy(client, "truth")) and r.restarts == 1 and r,
            timeout=KILL_WINDOW_S + 90,
            what="the frozen r0 killed and restarted",
        )
        frozen = None
        assert restarted.pid != first.pid
        reason = Event.objects.filter(action="replica_down", reason__contains="not live").latest("pk").reason
        match = re.fullmatch(
            rf"process {first.pid} not live: (\d+) probes failed over ([\d.]+) s: timeout after 2\.0 s; killed", reason
        )
        assert match and int(match[1]) >= 3 and float(match[2]) >= KILL_WINDOW_S, reason
        assert "after start" not in reason
        assert f"replica r0 down: process {first.pid} not live: " in log_path.read_text()

        # Killed: on /healthz within seconds, restarted with "killed by SIGKILL".
        killed_at = time.monotonic()
        os.kill(restarted.pid, signal.SIGKILL)
        seen_s, said = _watch_health(client, "truth", "killed by SIGKILL", timeout=30)
        assert re.match(rf"down: process {restarted.pid} exited after [\d.]+ s up: killed by SIGKILL", said), said
        again = wait_for(
            lambda: (r := _healthy(client, "truth")) and r.restarts == 2 and r, timeout=90, what="r0 restarted"
        )
        assert again.pid != restarted.pid and "killed by SIGKILL" in again.last_error
        print(
            f"killed replica on /healthz after {seen_s:.1f} s; serving again after {time.monotonic() - killed_at:.1f} s"
        )
    finally:
        if frozen:
            os.kill(frozen, signal.SIGCONT)
        stop(supervisor)
