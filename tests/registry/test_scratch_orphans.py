"""No orphans (registry/factory/scratch.py): a scratch tritonserver belongs to the build
attempt whose work dir holds it, and lives only while that attempt holds the lease.

End to end with real processes: a real Celery worker runs a build with a tune stage and is
SIGKILLed (its whole process group: no chance to clean up) while the tune's real
tritonserver runs; the server survives it (its own session: the leak this guards against).
The next attempt, on a new worker with beat (a 2 s lease, reclaimed after it lapses),
leaves no server of the first attempt; that worker is SIGKILLed mid-tune too, and the
platform's stop (what `make run` calls once its children are gone) leaves none.

And each rule on its own, against real tritonservers started as the tune stage starts them:
a server held by a live attempt is kept; one whose owner process is dead, whose lease
lapsed or whose attempt was replaced is killed with its process group; a work dir no attempt
holds is removed; nothing outside a build's work dir is touched."""

import os
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from harness import factories
from harness.processes import wait_for
from registry import storage
from registry.factory import scratch
from registry.models import Build, BuildStatus
from serving import tritonserver
from tests.registry.build_helpers import fast_build_env, upload_version

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
ROOT = Path(__file__).resolve().parents[2]


def scratch_servers() -> set[int]:
    return {pid for pid, _ in tritonserver.tritonservers_under(storage.tmp_dir())}


def steady_scratch_server() -> set[int]:
    """The scratch servers once the same ones have run for 2 s (the tune is under way: a server
    that failed to start, on a port another test took meanwhile, has been replaced by then)."""
    first = scratch_servers()
    if not first:
        return set()
    time.sleep(2.0)
    return first if scratch_servers() == first else set()


@pytest.fixture
def no_leftovers():
    """Whatever a failing test leaves under this store's tmp dir is killed at teardown."""
    yield
    for pid in scratch_servers():
        tritonserver.kill_group(pid)


def test_a_worker_killed_mid_tune_leaves_no_tritonserver_after_the_next_attempt_and_after_shutdown(
    celery_worker, subprocess_env, alice, team_a, onnx_path, tmp_path, no_leftovers
):
    try:
        tritonserver.find_binary()
    except tritonserver.TritonNotAvailable as exc:
        pytest.fail(f"tritonserver: {exc}")
    subprocess_env.update(fast_build_env())
    # A short lease and a quick reclaim; a tune long enough to be killed inside it.
    subprocess_env.update(
        BUILD_LEASE_SECONDS="2",
        BUILD_RECLAIM_INTERVAL_S="1",
        TUNE_WINDOW_S="0.5",
        TUNE_OPEN_WINDOW_S="0.5",
        TUNE_LEVELS="1,4",
        TUNE_BODIES="8",
    )
    first = celery_worker()
    version = upload_version(alice, factories.registered_model(team_a, name="tuned"), onnx_path)
    from registry.services import builds as build_services

    build, _ = build_services.build_start(
        user=alice,
        version=version,
        targets=["onnx-fp32"],
        tune={"slo_p99_ms": 500, "variants": ["onnx-fp32"], "budget_s": 300, "max_trials": 50},
    )
    orphan = wait_for(steady_scratch_server, timeout=180, what="the first attempt's scratch tritonserver, up")
    first.kill()  # SIGKILL to the worker's whole process group; the server runs in a session of its own
    time.sleep(1.0)
    assert scratch_servers() >= orphan, "the scratch server died with the worker: nothing to reap here"
    assert Build.objects.get(pk=build.pk).attempt == 1

    # The next attempt: a new worker with beat; once attempt 2 runs, attempt 1's server is gone.
    second = celery_worker(extra=["-B", "-s", str(tmp_path / "beat-schedule")])
    wait_for(lambda: Build.objects.get(pk=build.pk).attempt == 2, timeout=120, what="the second attempt")
    assert not (scratch_servers() & orphan), "attempt 1's scratch server outlived the next attempt"
    again = wait_for(lambda: scratch_servers() - orphan, timeout=180, what="the second attempt's tritonserver")
    second.kill()
    time.sleep(1.0)
    assert scratch_servers() >= again

    # The platform's stop, once its children are gone, reaps what the killed worker left.
    from config.management.commands.run_platform import reap_leftovers

    said = []
    reap_leftovers(said.append)
    assert not scratch_servers(), said
    assert said and "reaped scratch tritonservers" in said[0]
    assert not [p for p in storage.tmp_dir().iterdir() if scratch.WORK_DIR.match(p.name)]  # work dirs too


# --- each rule on its own ------------------------------------------------------------------------
def _start_detached(repository: Path, work: Path) -> int:
    """A scratch tritonserver whose starter exits at once, as a killed build process leaves it
    (parent gone, its own session); returns its pid once it is live."""
    code = (
        "import sys; from pathlib import Path; from serving.tritonserver import TritonProcess; "
        "p = TritonProcess(model_repository=Path(sys.argv[1]), work_dir=Path(sys.argv[2])).start(); "
        "p.wait_live(90); print(p.process.pid)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(repository), str(work)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(done.stdout.strip().splitlines()[-1])


@pytest.mark.django_db
def test_the_reaper_keeps_what_a_live_attempt_holds_and_ends_the_rest(alice, team_a, onnx_path, no_leftovers):
    version = upload_version(alice, factories.registered_model(team_a, name="reaped"), onnx_path)
    soon = timezone.now() + timedelta(minutes=5)
    me = f"{os.uname().nodename}:{os.getpid()}:task"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cases = {
        "held": dict(attempt=1, lease_owner=me, lease_expires_at=soon),
        "owner dead": dict(attempt=1, lease_owner=f"{os.uname().nodename}:{dead.pid}:task", lease_expires_at=soon),
        "lease lapsed": dict(attempt=1, lease_owner=me, lease_expires_at=timezone.now() - timedelta(seconds=5)),
        "replaced": dict(attempt=2, lease_owner=me, lease_expires_at=soon),  # its server is attempt 1's
    }
    servers = {}
    root = storage.tmp_dir()
    for name, lease in cases.items():
        build = Build.objects.create(version=version, targets=["onnx-fp32"], status=BuildStatus.RUNNING, **lease)
        work = root / scratch.work_dir_name(build.pk, 1, os.urandom(4).hex())
        servers[name] = _start_detached(work / "tune-onnx-fp32" / "repo", work / "tune-onnx-fp32" / "server")
    stray = root / "upload-in-progress"  # not a build's work dir: never touched
    stray.mkdir()
    outside = _start_detached(root.parent / "elsewhere" / "repo", root.parent / "elsewhere" / "server")
    try:
        done = scratch.scratch_reap()
        running = {name: tritonserver.process_state(pid) == "running" for name, pid in servers.items()}
        assert running == {"held": True, "owner dead": False, "lease lapsed": False, "replaced": False}, done
        assert sorted(done["killed"]) == sorted(servers[n] for n in ("owner dead", "lease lapsed", "replaced"))
        assert len(done["removed"]) == 3 and stray.is_dir()
        assert tritonserver.process_state(outside) == "running"
        assert not tritonserver.process_group(servers["owner dead"])  # its python stubs went with it
    finally:
        tritonserver.kill_group(outside)
        shutil.rmtree(root.parent / "elsewhere", ignore_errors=True)
