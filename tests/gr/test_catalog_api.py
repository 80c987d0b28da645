"""The item catalog API (/api/v1/item-catalogs/): catalogs of a team, versions from NPZ uploads
(never unpickled), new items encoded with a model version's codebook, and what is refused."""

import io
import pickle

import numpy as np
import pytest

from harness import gr
from registry import storage
from registry.gr import catalog_files
from registry.models import ItemCatalogVersion

pytestmark = pytest.mark.django_db


def npz(**arrays) -> io.BytesIO:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    buffer.seek(0)
    buffer.name = "items.npz"
    return buffer


def _catalog(api, name="items", levels=3, codes=8):
    return api.post(
        "/api/v1/item-catalogs/",
        {"name": name, "team": "team-a", "levels": levels, "codes_per_level": codes},
        format="json",
    )


def _upload(api, name="items", **fields):
    return api.post(f"/api/v1/item-catalogs/{name}/versions/", fields, format="multipart")


def test_a_catalog_version_from_ids_stores_its_items_and_a_checked_trie(alice_api):
    assert _catalog(alice_api).status_code == 201
    ids = np.arange(100, 140, dtype=np.int64)
    codes = np.stack([np.arange(40) // 16, (np.arange(40) // 4) % 4, np.arange(40) % 4], axis=1)
    response = _upload(alice_api, file=npz(item_id=ids, semantic_id=codes))
    assert response.status_code == 201, response.content
    assert response.json()["version"] == 1 and response.json()["items"] == 40
    stored = storage.absolute(ItemCatalogVersion.objects.get().path)
    items = catalog_files.read_items(stored)
    trie = catalog_files.read_trie(stored)
    assert items.items_of(codes[:3]).tolist() == ids[:3].tolist()
    assert trie.allowed_mask(np.array([0]))[0].sum() == 3  # first codes 0, 1, 2 under the root
    listed = alice_api.get("/api/v1/item-catalogs/items/versions/").json()
    assert [v["version"] for v in listed["results"]] == [1]
    assert alice_api.get("/api/v1/item-catalogs/items/").json()["latest_version"] == 1


@pytest.mark.parametrize(
    "arrays,code,says",
    [
        (
            {"item_id": np.arange(3), "semantic_id": np.array([[0, 0, 1], [0, 0, 1], [1, 2, 3]])},
            "catalog_collision",
            "share a semantic id",
        ),
        ({"item_id": np.arange(2), "semantic_id": np.array([[0, 0, 9], [0, 0, 1]])}, "catalog_code_range", "0..7"),
        (
            {"item_id": np.array([5, 5]), "semantic_id": np.array([[0, 0, 0], [0, 0, 1]])},
            "catalog_duplicate_item",
            "repeat",
        ),
        ({"item_id": np.arange(2), "semantic_id": np.array([[0, 0], [0, 1]])}, "catalog_invalid", "[2, 3]"),
        ({"semantic_id": np.array([[0, 0, 0]])}, "invalid", "item_id"),
    ],
    ids=["collision", "code-range", "duplicate-item", "wrong-levels", "no-ids"],
)
def test_a_version_that_cannot_be_a_catalog_is_a_400_naming_why(alice_api, arrays, code, says):
    _catalog(alice_api)
    response = _upload(alice_api, file=npz(**arrays))
    assert response.status_code == 400, response.content
    assert response.json()["code"] == code and says in response.json()["detail"]
    assert not ItemCatalogVersion.objects.exists()


def test_a_pickle_or_an_object_array_is_refused_unread(alice_api):
    _catalog(alice_api)
    pickled = io.BytesIO(pickle.dumps({"item_id": [1]}))
    pickled.name = "items.npz"
    assert _upload(alice_api, file=pickled).json()["code"] == "data_format"
    objects = npz(item_id=np.array([object()], dtype=object), semantic_id=np.zeros((1, 3), dtype=np.int64))
    response = _upload(alice_api, file=objects)
    assert response.status_code == 400 and response.json()["code"] == "data_format"
    assert "pickle" in response.json()["detail"]


def test_another_teams_catalog_is_a_404_and_its_name_is_not_told(alice_api, bob_api):
    _catalog(alice_api)
    assert bob_api.get("/api/v1/item-catalogs/items/").status_code == 404
    assert _upload(bob_api, file=npz(item_id=np.arange(1), semantic_id=np.zeros((1, 3)))).status_code == 404
    taken = bob_api.post(
        "/api/v1/item-catalogs/", {"name": "items", "team": "team-b", "levels": 3, "codes_per_level": 8}, format="json"
    )
    assert taken.status_code == 409 and taken.json()["code"] == "name_unavailable"


def test_new_items_get_semantic_ids_from_a_model_versions_codebook_without_retraining(
    alice, team_a, alice_api, gr_source
):
    version = gr.register(user=alice, team=team_a, model_name="recs", source=gr_source)
    catalog = version.gr.catalog_version.catalog
    arrays = gr.catalog_arrays(gr_source)
    rng = np.random.default_rng(3)
    fresh = arrays["embedding"][:12] + 0.05 * rng.standard_normal(arrays["embedding"][:12].shape).astype(np.float32)
    new_ids = np.arange(9_000_000, 9_000_012, dtype=np.int64)

    response = _upload(
        alice_api, name=catalog.name, file=npz(item_id=new_ids, embedding=fresh), base=1, encode_with=version.pk
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["version"] == 2 and body["parent"] == 1 and body["items"] == len(arrays["item_id"]) + 12
    assert body["codebook_sha256"] == version.gr.codebook_sha256
    items = catalog_files.read_items(storage.absolute(ItemCatalogVersion.objects.get(version=2).path))
    assert np.array_equal(items.item_ids[: len(arrays["item_id"])], arrays["item_id"])  # kept as they were
    assert len({tuple(c) for c in items.semantic_ids.tolist()}) == len(items)  # every id unique
    again = _upload(
        alice_api, name=catalog.name, file=npz(item_id=new_ids[:1], embedding=fresh[:1]), base=2, encode_with=version.pk
    )
    assert again.status_code == 409 and again.json()["code"] == "item_exists"
    no_codebook = _upload(alice_api, name=catalog.name, file=npz(item_id=new_ids[:1] + 1, embedding=fresh[:1]), base=2)
    assert no_codebook.status_code == 400 and no_codebook.json()["code"] == "codebook_required"


def test_builds_of_a_generative_recommender_take_its_targets_and_its_catalogs_versions(
    alice, team_a, alice_api, gr_source, onnx_path
):
    version = gr.register(user=alice, team=team_a, model_name="recs", source=gr_source)
    url = f"/api/v1/versions/{version.pk}/builds/"
    onnx_targets = alice_api.post(url, {"targets": ["onnx-fp32"]}, format="json")
    assert onnx_targets.status_code == 400 and "gr-fp32, gr-int8, gr-fp16" in onnx_targets.json()["detail"]
    missing = alice_api.post(url, {"catalog_version": 7}, format="json")
    assert missing.status_code == 404 and missing.json()["code"] == "catalog_version_not_found"
    started = alice_api.post(url, {"catalog_version": 1}, format="json")
    assert started.status_code == 201, started.content
    assert started.json()["targets"] == ["gr-fp32", "gr-int8"]
    assert [s["name"] for s in started.json()["stages"]] == ["bundle", "variants", "gates", "benchmark", "package"]
    detail = alice_api.get(f"/api/v1/versions/{version.pk}/").json()
    assert detail["gr"]["catalog"] == "recs-items" and detail["gr"]["catalog_version"] == 1
