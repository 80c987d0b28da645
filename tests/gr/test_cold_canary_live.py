"""A generative recommender's canary through the real gateway and two real tritonservers, judged
from what they report: the candidate starts with an empty cache while the stable's is warm, and
is compared with the fair baseline (a copy of the stable loaded with it, as cold), so its first
requests' misses do not fail it, and its cache hit rate matches the baseline's, not the stable's."""

from __future__ import annotations

import time

import pytest
import requests

from harness import gr
from harness.gateway import TOKEN, GatewayProcess, RouteServer, start_triton
from monitoring.collection import collect, gateway_samples, triton_samples
from monitoring.judge.evidence import JudgeConfig
from monitoring.judge.verdict import judge
from monitoring.judge.windows import arms_from_rows
from registry.gr.triton import request_body
from tests.gateway.conftest import require_triton

pytestmark = pytest.mark.integration

STABLE, CANDIDATE, BASELINE = "recs__v1__gr-fp32-c1", "recs__v2__gr-fp32-c1", "recs__v1__gr-fp32-c1__baseline"
NAMES = {STABLE: "v1-gr-fp32-c1", CANDIDATE: "v2-gr-fp32-c1", BASELINE: "v1-gr-fp32-c1-baseline"}
ROLES = {STABLE: ("stable", 8000), CANDIDATE: ("canary", 1000), BASELINE: ("baseline", 1000)}


def _table(replicas: list[str], models: list[str], version: str) -> dict:
    variants = [
        {
            "name": NAMES[model],
            "model_version": NAMES[model].split("-")[0][1:],
            "triton_model": model,
            "role": ROLES[model][0],
            "weight_bp": ROLES[model][1] if len(models) > 1 else 10000,
            "replicas": replicas,
            "signature": gr.kserve_signature(model),
        }
        for model in models
    ]
    endpoint = {"name": "recs", "affinity": "user", "salt": "canary-1", "auth": {"public": True}, "timeout_ms": 5000}
    return {"version": version, "endpoints": [{**endpoint, "variants": variants}]}


def _send(gateway, users: dict, rounds: int) -> None:
    with requests.Session() as session:
        for _ in range(rounds):
            for user, history in users.items():
                reply = session.post(
                    f"{gateway.url}/v2/models/recs/infer",
                    json=request_body(user, history, top_k=5),
                    headers={"X-User-Id": user},
                    timeout=30,
                )
                assert reply.status_code == 200, reply.text


def _snapshots(gateway, servers) -> tuple[dict, list[dict]]:
    return (
        gateway_samples.gateway_snapshot(requests.get(f"{gateway.control_url}/metrics", timeout=10).text),
        [triton_samples.triton_snapshot(requests.get(s.metrics_url, timeout=10).text) for s in servers],
    )


def test_a_cold_candidate_is_judged_against_an_equally_cold_baseline(gr_source, tmp_path):
    require_triton()
    repo = tmp_path / "repo"
    for model in (STABLE, CANDIDATE, BASELINE):
        gr.package(gr_source, repo, model)
    servers = [start_triton(tmp_path / f"triton-{i}", repo, [STABLE, CANDIDATE, BASELINE]) for i in range(2)]
    replicas = [s.http_url for s in servers]
    routes = RouteServer().start()
    routes.set_table(_table(replicas, [STABLE], "r1"))
    gateway = None
    try:
        gateway = GatewayProcess(
            tmp_path, {"GATEWAY_ROUTES_URL": routes.url, "GATEWAY_TOKEN": TOKEN, "GATEWAY_POLL_INTERVAL_MS": "200"}
        ).start()
        items = [int(i) for i in gr.catalog_arrays(gr_source)["item_id"]]
        users = {f"user-{u}": items[(u * 7) % 150 : (u * 7) % 150 + 8] for u in range(80)}
        _send(gateway, users, 1)  # the stable's cache is warm: every user has been seen
        routes.set_table(_table(replicas, [STABLE, CANDIDATE, BASELINE], "r2"))  # the canary starts
        time.sleep(0.6)
        start = time.monotonic()
        before = _snapshots(gateway, servers)
        _send(gateway, users, 3)
        after = _snapshots(gateway, servers)
        seconds = time.monotonic() - start
    finally:
        if gateway is not None:
            gateway.stop()
        routes.stop()
        for server in servers:
            server.stop(timeout=0.05)

    models = {model: triton_samples.TritonModelMap("recs", NAMES[model]) for model in NAMES}
    parts = [gateway_samples.gateway_deltas(before[0], after[0], seconds=seconds)]
    parts += [triton_samples.triton_deltas(b, a, seconds=seconds, models=models) for b, a in zip(before[1], after[1])]
    rows = [
        (variant, metric, None, value)
        for (endpoint, variant), totals in collect.merge(*parts).items()
        if endpoint == "recs"
        for metric, value in collect.derive(totals).items()
    ]
    arms = arms_from_rows(rows, list(NAMES.values()))
    stable, candidate, baseline = (arms[NAMES[m]] for m in (STABLE, CANDIDATE, BASELINE))

    def hit_rate(arm):
        return arm.counts["gr_cache_hits"] / arm.counts["gr_cache_lookups"]

    # the candidate's first request per user was a miss, as the baseline's; the stable's none were
    assert candidate.counts["gr_cache_lookups"] >= 12 and baseline.counts["gr_cache_lookups"] >= 12
    assert hit_rate(stable) == 1.0
    assert hit_rate(candidate) == pytest.approx(2 / 3) and hit_rate(baseline) == pytest.approx(2 / 3)
    assert candidate.counts["gr_illegal_beams"] == 0 and candidate.counts["gr_beams"] > 0

    config = JudgeConfig(min_guardrail_requests=12, min_requests=12, min_latency_samples=12)
    decision = judge(baseline, candidate, config, error_control=stable.plus(baseline), control="baseline")
    checks = {c["name"]: c for c in decision.checks}
    assert decision.outcome != "fail", decision.reason
    assert checks["gr_cache_hit_rate"]["outcome"] == "pass", checks["gr_cache_hit_rate"]
    assert checks["gr_illegal_items"]["outcome"] == "pass"
