"""Registering a generative recommender version: the bundle is checked (never unpickled or run),
its catalog version must be the team's with the model's id shape, and nothing is stored when
anything is refused."""

import json
import pickle
import shutil

import numpy as np
import pytest

from harness import factories, gr
from kernel.errors import InvalidInput, NotFound
from registry import storage
from registry.models import ModelVersion, Task
from registry.services.catalog import model_create
from registry.services.gr_versions import gr_version_create
from registry.services.item_catalogs import item_catalog_create, item_catalog_version_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalog_version(alice, team_a, gr_source):
    arrays = gr.catalog_arrays(gr_source)
    catalog = item_catalog_create(user=alice, team=team_a, name="items", levels=3, codes_per_level=8)
    return item_catalog_version_create(
        user=alice, catalog=catalog, item_id=arrays["item_id"], semantic_id=arrays["semantic_id"]
    )


@pytest.fixture
def recs(alice, team_a):
    return model_create(user=alice, name="recs", team=team_a, task=Task.GENERATIVE_REC)


def _bundle(gr_source, tmp_path, change=None):
    copy = tmp_path / f"bundle-{len(list(tmp_path.glob('bundle-*')))}"
    shutil.copytree(gr_source / "bundle", copy)
    if change:
        change(copy)
    return copy


def _stored_dirs():
    root = storage.root() / "dirs"
    return sorted(p.name for p in root.glob("*/*")) if root.exists() else []


def test_a_bundle_registers_with_its_spec_and_catalog(alice, recs, catalog_version, gr_source, tmp_path):
    version = gr_version_create(
        user=alice, model=recs, bundle_dir=_bundle(gr_source, tmp_path), catalog_version=catalog_version
    )
    assert version.source == "gr_bundle" and version.gr.catalog_version == catalog_version
    assert (version.gr.levels, version.gr.codes_per_level, version.gr.max_history) == (3, 8, 24)
    assert [i["name"] for i in version.signature["inputs"]] == ["user_id", "history", "top_k", "beam_width"]
    assert storage.absolute(version.file_path).is_dir()


@pytest.mark.parametrize(
    "change,says",
    [
        (lambda d: (d / "codebook.npz").unlink(), "missing codebook.npz"),
        (lambda d: (d / "weights.pt").write_bytes(pickle.dumps({"w": 1})), "unexpected weights.pt"),
        (lambda d: (d / "decode.onnx").write_bytes(pickle.dumps({"w": 1})), "pickle"),
        (lambda d: np.savez(d / "codebook.npz", centroids=np.array([object()], dtype=object)), "needs pickle"),
        (lambda d: (d / "manifest.json").write_text(json.dumps({"format": "modelplane-gr/1", "levels": 99})), "levels"),
        (lambda d: shutil.copy(d / "encode.onnx", d / "decode.onnx"), "decode.onnx takes"),
        (
            lambda d: np.savez(
                d / "holdout.npz", history=np.array([[5, -1]]), length=np.array([1]), next_item=np.array([5])
            ),
            "not in items c1",
        ),
    ],
    ids=[
        "missing-file",
        "extra-file",
        "pickled-graph",
        "object-array",
        "bad-manifest",
        "wrong-graph",
        "unknown-holdout-items",
    ],
)
def test_a_bundle_that_is_refused_leaves_nothing_stored(
    alice, recs, catalog_version, gr_source, tmp_path, change, says
):
    before = _stored_dirs()
    with pytest.raises(InvalidInput, match=says):
        gr_version_create(
            user=alice, model=recs, bundle_dir=_bundle(gr_source, tmp_path, change), catalog_version=catalog_version
        )
    assert not ModelVersion.objects.exists() and _stored_dirs() == before


def test_the_catalog_must_be_the_teams_and_of_the_models_shape(alice, bob, team_a, team_b, recs, gr_source, tmp_path):
    theirs = factories.item_catalog_version(team_b, "their-items", 1)
    with pytest.raises(NotFound):
        gr_version_create(user=alice, model=recs, bundle_dir=_bundle(gr_source, tmp_path), catalog_version=theirs)
    wide = factories.item_catalog_version(
        team_a, "wide-items", 1, codes=64
    )  # rows only: refused before its files are read

    with pytest.raises(InvalidInput, match="names items with 3 x 64 codes; the bundle's model generates 3 x 8"):
        gr_version_create(user=alice, model=recs, bundle_dir=_bundle(gr_source, tmp_path), catalog_version=wide)


def test_a_ranker_model_takes_no_bundle(alice, team_a, catalog_version, gr_source, tmp_path):
    ranker = model_create(user=alice, name="ranker", team=team_a)
    with pytest.raises(InvalidInput, match="task is 'generative_rec'"):
        gr_version_create(
            user=alice, model=ranker, bundle_dir=_bundle(gr_source, tmp_path), catalog_version=catalog_version
        )


def test_a_generative_recommender_takes_no_single_onnx_file(alice_api, recs, onnx_path):
    with open(onnx_path, "rb") as fh:
        response = alice_api.post("/api/v1/models/recs/versions/", {"file": fh}, format="multipart")
    assert response.status_code == 400 and response.json()["code"] == "model_is_generative_rec"
