"""A tiny generative recommender through the real factory (the build's child process, its five
stages, the beam gates) and a real tritonserver: what a build yields and what serving it does."""

import numpy as np
import pytest

from harness import gr
from registry.factory import runner
from registry.gr.triton import request_body
from registry.models import Artifact, BuildStatus
from registry.services import builds as build_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def _build(user, version, **kwargs):
    build, created = build_services.build_start(user=user, version=version, **kwargs)
    assert created
    assert runner.run(build.pk, owner="test-worker:gr") in {"published", "failed"}
    build.refresh_from_db()
    return build


def test_build_gates_every_variant_and_triton_serves_it_with_a_warm_cache(
    alice, team_a, gr_source, fast_gr_build, tmp_path
):
    version = gr.register(user=alice, team=team_a, model_name="recs", source=gr_source)
    build = _build(alice, version, targets=["gr-fp32", "gr-int8", "gr-fp16"])

    assert build.status == BuildStatus.SUCCEEDED, build.error
    assert [s["name"] for s in build.stages] == ["bundle", "variants", "gates", "benchmark", "package"]
    artifacts = {a.variant: a for a in Artifact.objects.filter(build=build)}
    assert set(artifacts) == {"gr-fp32-c1", "gr-int8-c1", "gr-fp16-c1"}
    assert artifacts["gr-fp16-c1"].status == "skipped" and "GPU" in artifacts["gr-fp16-c1"].status_reason
    fp32 = artifacts["gr-fp32-c1"]
    assert fp32.status == "servable", fp32.status_reason
    assert fp32.item_catalog_version_id == version.gr.catalog_version_id
    gates = {g["gate"]: g for g in fp32.validation["gates"]}
    assert set(gates) == {"illegal_ids", "beam_overlap", "top_in_beam", "hr_at_10"}
    assert all(g["passed"] for g in gates.values())
    assert gates["illegal_ids"]["figure"] == 0 and gates["beam_overlap"]["figure"] > 0.99  # the same graphs, optimized
    assert fp32.benchmark["beam_p50_ms"] > 0

    arrays = gr.catalog_arrays(gr_source)
    with gr.TritonGR(tmp_path / "triton") as server:
        name = server.add(fp32)
        users = [(f"user-{u}", [int(i) for i in arrays["item_id"][u * 5 : u * 5 + 12]]) for u in range(12)]
        before = server.metrics()
        first = [server.infer(name, request_body(user, history, top_k=5)) for user, history in users]
        middle = server.metrics()
        second = [server.infer(name, request_body(user, history, top_k=5)) for user, history in users]
        after = server.metrics()

    assert all(status == 200 for status, _ in first + second), first + second
    assert [reply["cache"][0] for _, reply in first] == ["miss"] * len(users)
    assert [reply["cache"][0] for _, reply in second] == ["hit"] * len(users)
    # The same beams from the cache as from a fresh encode, every item a catalog item.
    assert [reply["items"] for _, reply in first] == [reply["items"] for _, reply in second]
    assert set(np.concatenate([reply["items"] for _, reply in second]).tolist()) <= set(arrays["item_id"].tolist())
    labels = {"model": name}

    def moved(a, b, metric, **extra):
        return gr.metric_value(b, metric, **labels, **extra) - gr.metric_value(a, metric, **labels, **extra)

    assert moved(middle, after, "gr_cache_lookups_total", result="hit") == len(users)
    assert moved(before, middle, "gr_cache_lookups_total", result="miss") == len(users)
    assert gr.metric_value(after, "gr_illegal_beams_total", **labels) == 0
    assert gr.metric_value(after, "gr_duplicate_items_total", **labels) == 0
    assert moved(middle, after, "gr_prefill_items_total") == 0  # a hit encodes nothing
    # Latency: the part a cache removes is the prefill; the model's own clock (not a client's,
    # which the shared machine's scheduling blurs) says the hits' prefill took less.
    assert moved(middle, after, "gr_prefill_seconds_sum") < moved(before, middle, "gr_prefill_seconds_sum")
