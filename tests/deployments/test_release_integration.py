"""One flow from a build request to a canary, with real processes: the web app (live
server), Celery workers (a build worker and a control worker) and beat on the real broker,
the local pool supervisor with a real tritonserver, the gateway polling the route table and
steady traffic through it.

1. A release of version 2: the build (in its box) validates the variant and tunes it on a
   scratch tritonserver against the SLO, the canary of what it made runs against the
   stable with the fair baseline, the judge promotes it, and the endpoint serves it.
2. A release whose config was tuned for a looser p99 than the endpoint's SLO (the tune is
   told 2 s, the endpoint allows 1 ms): the judge rejects the canary (its p99 guardrail, or
   a latency test when that fires first) and the release ends rolled back like any
   candidate, the stable untouched.
"""

import pytest

from deployments.models import Endpoint, Release, ReleaseState, Rollout
from deployments.services import endpoints as endpoint_services
from deployments.services import releases as release_services
from harness import factories
from harness.closed_loop import ClosedLoop
from harness.processes import wait_for
from registry.models import Artifact, Build
from serving import tritonserver
from tests.conftest import require_service
from tests.registry.build_helpers import fast_build_env, upload_version

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True), pytest.mark.timeout(900)]

TUNE_ENV = {
    "TUNE_WINDOW_S": "0.3",
    "TUNE_OPEN_WINDOW_S": "0.4",
    "TUNE_OPEN_WINDOWS": "2",
    "TUNE_LEVELS": "1,4,16",
    "TUNE_BODIES": "16",
}
CANARY = {
    "steps_bp": [5000, 10000],
    "step_min_seconds": 3,
    "step_min_requests": 50,
    "step_deadline_seconds": 120,
    "promote_grace_seconds": 1,
}


def _ended(release_id: int):
    release = Release.objects.get(pk=release_id)
    return release if release.state not in ReleaseState.active() else None


def test_build_tune_canary_promoted_then_a_config_over_the_slo_rolled_back(
    live_server, subprocess_env, tmp_path, pools_dir, team_a, deployer, onnx_path
):
    require_service("postgres", "redis")
    tritonserver.find_binary()
    with ClosedLoop(
        live_server.url,
        subprocess_env,
        tmp_path,
        pools_dir,
        env={**fast_build_env(), **TUNE_ENV},
        queues=("control", "build-cpu"),
        beat_args=(),
    ) as loop:
        # at the product's latency defaults (the judge compares latency window by window)
        stable, pool, endpoint = loop.serve(team_a, deployer, onnx_path, pool="rel")
        load = loop.load("ctr", rate=80, threads=2, warm=30)

        # 1. build -> tune -> canary -> promoted ------------------------------------------------------
        v2 = upload_version(deployer, stable.version.model, onnx_path)
        release = release_services.release_start(
            user=deployer,
            endpoint=endpoint,
            version=v2,
            variant="onnx-fp32",
            tune_budget_s=8,
            max_trials=3,
            rollout_options=CANARY,
        )
        done = wait_for(lambda: _ended(release.pk), timeout=420, what="the first release to end", interval=1)
        build = Build.objects.get(pk=release.build_id)
        assert done.state == ReleaseState.PROMOTED, (done.reason, build.error)
        tune_stage = next(s for s in build.stages if s["name"] == "tune")
        assert tune_stage["status"] == "succeeded" and "#0 default" in tune_stage["log"]
        artifacts = {a.variant: a for a in Artifact.objects.filter(build=build)}
        tuned = artifacts["onnx-fp32-tuned"]
        assert tuned.benchmark["tune"]["default"]["throughput_rps"] >= 0 and tuned.benchmark["tune"]["stop_reason"]
        expected = tuned if tuned.status == "servable" else artifacts["onnx-fp32"]
        assert done.candidate_artifact_id == expected.pk  # the tuned config when the tune made one
        assert ("tuned:" in done.reason or "untuned onnx-fp32" in done.reason) and "succeeded" in done.reason
        rollout = Rollout.objects.get(pk=done.rollout_id)
        assert rollout.baseline_model  # judged against the fair baseline, as any canary
        assert Endpoint.objects.get(pk=endpoint.pk).stable_artifact_id == expected.pk
        wait_for(
            lambda: load.variants[-1] == f"v2-{expected.variant}", timeout=15, what="the gateway serving the release"
        )

        # 2. a config tuned for a looser p99 than the endpoint's SLO: the canary rolls it back ---------
        endpoint_services.endpoint_update(user=deployer, endpoint=Endpoint.objects.get(pk=endpoint.pk), slo_p99_ms=1)
        v3 = upload_version(deployer, stable.version.model, onnx_path)
        release = release_services.release_start(
            user=deployer,
            endpoint=Endpoint.objects.get(pk=endpoint.pk),
            version=v3,
            variant="onnx-fp32",
            slo_p99_ms=2000,
            tune_budget_s=8,
            max_trials=3,
            # one step at 100 %: below it the p99 guardrail also asks that the candidate be worse than
            # the baseline copy, and here both are over a 1 ms SLO; alone, the SLO applies
            rollout_options={**CANARY, "steps_bp": [10000], "step_min_seconds": 60},
        )
        assert release.slo_p99_ms == 2000
        done = wait_for(lambda: _ended(release.pk), timeout=420, what="the second release to end", interval=1)
        assert done.state == ReleaseState.ROLLED_BACK, done.reason
        assert (
            "judge:" in done.reason
        )  # whichever check failed first (the p99 SLO guardrail, sustained 10 s, or a latency test)
        assert Endpoint.objects.get(pk=endpoint.pk).stable_artifact_id == expected.pk  # the stable stays
        page = factories.user("viewer-of-a")
        factories.member(page, team_a, "viewer")
        from django.test import Client

        client = Client()
        client.force_login(page)
        card = client.get("/deployments/endpoints/ctr/release/").content.decode()
        assert "Rolled back" in card and "Measured by the canary" in card
