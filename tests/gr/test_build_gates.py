"""Builds a generative recommender must not pass: a catalog whose trie disagrees with its item
map, and an int8 variant whose beams drift from fp32's (through the real factory)."""

import shutil

import pytest
from django.urls import reverse

from harness import gr
from registry import storage
from registry.factory import runner
from registry.gr import catalog_files
from registry.gr.trie import compile_trie, save_trie
from registry.models import Artifact, BuildStatus, ItemCatalogVersion
from registry.services import builds as build_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def _build(user, version, **kwargs):
    build, _ = build_services.build_start(user=user, version=version, **kwargs)
    assert runner.run(build.pk, owner="test-worker:gr") in {"published", "failed"}
    build.refresh_from_db()
    return build


def test_a_candidate_whose_catalog_trie_disagrees_with_its_items_is_stopped_at_build(
    alice, team_a, gr_source, fast_gr_build, tmp_path
):
    """The broken catalog version is written to the store directly: the API compiles every trie
    from its items, so this stands for a corrupted or drifted catalog reaching a build."""
    good = gr.register(user=alice, team=team_a, model_name="recs", source=gr_source)
    arrays = gr.catalog_arrays(gr_source)
    codes = arrays["semantic_id"]
    staged = tmp_path / "broken"
    catalog_files.write_catalog(staged, arrays["item_id"], codes, codes_per_level=int(codes.max()) + 1)
    drifted = codes.copy()
    drifted[:, -1] = (drifted[:, -1] + 1) % (int(codes.max()) + 1)  # every leaf one code over
    save_trie(compile_trie(drifted, codes_per_level=int(codes.max()) + 1), staged / catalog_files.TRIE)
    rel, sha = storage.put_dir(staged)
    broken = ItemCatalogVersion.objects.create(
        catalog=good.gr.catalog_version.catalog, version=2, path=rel, sha256=sha, items=len(codes)
    )

    build = _build(alice, good, catalog_version=broken.version)

    assert build.status == BuildStatus.FAILED
    assert build.stages[0]["name"] == "bundle" and build.stages[0]["status"] == "failed"
    assert "trie does not match the item map" in build.error and "path(s) no item has" in build.error
    assert not Artifact.objects.filter(build=build).exists()


def test_an_int8_variant_under_the_overlap_gate_is_not_servable(
    alice, team_a, gr_source, fast_gr_build, tmp_path, client
):
    """The real int8 keeps ~99 % of the tiny model's beams, so the bundle is degraded the way
    outlier channels degrade per-tensor int8 (harness.gr.outlier_bundle: fp32 unchanged)."""
    source = tmp_path / "outlier"
    source.mkdir()
    shutil.copy(gr_source / "catalog.npz", source / "catalog.npz")
    gr.outlier_bundle(gr_source / "bundle", source / "bundle")
    version = gr.register(user=alice, team=team_a, model_name="recs", source=source)

    build = _build(alice, version, targets=["gr-fp32", "gr-int8"])

    assert build.status == BuildStatus.SUCCEEDED, build.error
    artifacts = {a.variant: a for a in Artifact.objects.filter(build=build)}
    assert artifacts["gr-fp32-c1"].status == "servable", artifacts["gr-fp32-c1"].status_reason
    int8 = artifacts["gr-int8-c1"]
    assert int8.status == "rejected" and not int8.path
    assert "beam-set overlap with fp32 is" in int8.status_reason and "(at least 86%)" in int8.status_reason
    gates = {g["gate"]: g for g in int8.validation["gates"]}
    assert gates["beam_overlap"]["figure"] < 0.86 and not gates["beam_overlap"]["passed"]
    assert gates["illegal_ids"]["passed"]  # the trie still holds: every beam is an item, just the wrong ones

    client.force_login(alice)
    page = client.get(reverse("registry:build-detail", args=[build.pk])).content.decode()
    table = page[page.index('id="beam-gates"') :]
    row = table[table.index("gr-int8-c1") :]
    assert f"{gates['beam_overlap']['figure']:.3f}" in row and "&gt;= 0.86" in row and "✗" in row
    assert "no: beam gates failed: beam-set overlap with fp32 is" in row
