"""The pure parts of serving a generative recommender: the catalog trie, semantic ids and their
collisions, the prefix cache's plan and bounds, the beam gates' decision, and trie-constrained
beam search over the tiny model's real graphs."""

import numpy as np
import pytest

from harness import gr
from registry.factory.generative.gates import Gate, Thresholds, judge, verdict
from registry.gr import runtime as rt
from registry.gr.semantic_ids import CollisionError, fit_codebook, resolve_collisions, semantic_ids
from registry.gr.trie import TrieError, check_trie, compile_trie, leaves


def unique_codes(n, levels=3, codes=6, seed=0):
    rng = np.random.default_rng(seed)
    every = np.array(np.meshgrid(*[np.arange(codes)] * levels, indexing="ij")).reshape(levels, -1).T
    return every[rng.permutation(len(every))[:n]]


def test_the_trie_holds_exactly_the_item_maps_ids():
    codes = unique_codes(50)
    trie = compile_trie(codes, codes_per_level=6)
    items = rt.ItemMap(np.arange(1000, 1050), codes)
    check_trie(trie, items)
    assert leaves(trie) == {tuple(c): row for row, c in enumerate(codes.tolist())}
    first = trie.allowed_mask(np.array([0]))[0]
    assert set(np.nonzero(first)[0].tolist()) == set(codes[:, 0].tolist())
    node = trie.step(np.array([0]), np.array([codes[0, 0]]))
    assert set(np.nonzero(trie.allowed_mask(node)[0])[0].tolist()) == set(codes[codes[:, 0] == codes[0, 0], 1].tolist())


def test_a_trie_compiled_from_other_ids_is_refused_with_counts():
    codes = unique_codes(30)
    drifted = codes.copy()
    held = {tuple(c) for c in codes.tolist()}
    drifted[0] = next(c for c in unique_codes(216).tolist() if tuple(c) not in held)  # one leaf moved to a free id
    with pytest.raises(TrieError, match="1 path\\(s\\) no item has .*, 1 item id\\(s\\) with no path"):
        check_trie(compile_trie(drifted, codes_per_level=6), rt.ItemMap(np.arange(30), codes))


def test_semantic_ids_are_unique_deterministic_and_avoid_taken_ones():
    rng = np.random.default_rng(1)
    centres = rng.standard_normal((4, 8))
    vectors = np.repeat(centres, 20, axis=0) + 0.01 * rng.standard_normal((80, 8))
    vectors[1] = vectors[0]  # two items with one embedding: one id collides for sure
    codebook = fit_codebook(vectors, levels=2, codes_per_level=10, seed=0)
    first = semantic_ids(vectors, codebook)
    assert len({tuple(c) for c in first.tolist()}) == 80
    assert np.array_equal(first, semantic_ids(vectors, codebook))
    taken = {tuple(first[0].tolist())}
    again = semantic_ids(vectors[:1], codebook, taken=taken)
    assert tuple(again[0].tolist()) not in taken


def test_more_items_than_ids_is_a_collision_error():
    codes = np.zeros((5, 2), dtype=np.int64)
    distances = np.zeros((5, 2, 2))
    with pytest.raises(CollisionError, match="names too few items"):
        resolve_collisions(codes, distances)


@pytest.mark.parametrize(
    "cached,history,expected",
    [
        (None, (1, 2, 3), ("miss", 0, 0)),
        ((1, 2, 3), (1, 2, 3), ("hit", 0, 0)),
        ((1, 2, 3), (1, 2, 3, 4, 5), ("grown", 0, 2)),
        ((2, 3), (1, 2, 3, 4), ("grown", 1, 1)),  # a client's sliding window: found further in
        ((1, 2, 3), (9, 9, 9), ("miss", 0, 0)),
        ((7, 7, 7), (7, 7, 7, 7), ("grown", 0, 1)),  # a repeated item: read as growth, as a fresh encode would
        ((1, 2, 3), tuple(range(1, 12)), ("rebased", 11 - (8 - 2), 0)),  # past max history 8: slack 2
        (None, tuple(range(20)), ("miss", 12, 0)),  # a fresh user: the last max_history items
    ],
    ids=["new", "same", "grown", "sliding", "changed", "repeated", "overflow", "long"],
)
def test_the_prefix_plan(cached, history, expected):
    assert rt.plan_prefix(cached, history, max_history=8, slack=2) == expected


def test_the_prefix_cache_is_bounded_in_bytes_and_evicts_the_least_recent():
    block = np.zeros((2, 4, 8), dtype=np.float32)  # 256 bytes each for k and v
    size = rt.PrefixCache.size("a", (1, 2), block, block)
    cache = rt.PrefixCache(max_bytes=2 * size)
    cache.put("a", (1, 2), block, block)
    cache.put("b", (1, 2), block, block)
    cache.get("a")  # a is now the most recent
    cache.put("c", (1, 2), block, block)
    assert set(cache.entries) == {"a", "c"} and cache.evictions == 1 and cache.bytes == 2 * size
    cache.put("huge", (1,) * 10_000, block, block)  # alone over the bound: never kept
    assert "huge" not in cache.entries and cache.bytes <= cache.max_bytes


FIGURES = {
    "users": 100,
    "width": 32,
    "beams": 3200,
    "illegal_ids": 0,
    "overlap": 0.9,
    "top_in_beam": 1.0,
    "hr_at_10": 0.30,
    "hr_at_10_reference": 0.31,
}
LIMITS = Thresholds(min_overlap=0.86, min_top_in_beam=0.95, max_hr_drop=0.02)


@pytest.mark.parametrize(
    "change,failed",
    [
        ({}, set()),
        ({"illegal_ids": 3}, {Gate.ILLEGAL_IDS}),
        ({"overlap": 0.85}, {Gate.BEAM_OVERLAP}),
        ({"top_in_beam": 0.9}, {Gate.TOP_IN_BEAM}),
        ({"hr_at_10": 0.28}, {Gate.HR_AT_10}),
        ({"hr_at_10": 0.40}, set()),  # better than fp32 is not a failure
        ({"overlap": 0.5, "illegal_ids": 1}, {Gate.BEAM_OVERLAP, Gate.ILLEGAL_IDS}),
    ],
    ids=["pass", "illegal", "overlap", "top", "hr-drop", "hr-better", "two"],
)
def test_the_beam_gates_decide_from_the_figures(change, failed):
    results = judge({**FIGURES, **change}, LIMITS)
    assert {r.gate for r in results if not r.passed} == failed
    servable, reason = verdict(results)
    assert servable == (not failed)
    assert all(r.reason in reason for r in results if not r.passed)


@pytest.fixture(scope="module")
def tiny(gr_source):
    arrays = gr.catalog_arrays(gr_source)
    graphs = rt.Graphs({role: gr_source / "bundle" / name for role, name in rt.GRAPH_FILES.items()})
    codes = int(arrays["semantic_id"].max()) + 1
    return graphs, arrays, compile_trie(arrays["semantic_id"], codes_per_level=codes), codes


def test_extending_a_cached_prefix_equals_encoding_it_whole(tiny):
    graphs, arrays, _, _ = tiny
    codes = arrays["semantic_id"][:10]
    whole = graphs.encode(None, None, codes)
    part = graphs.encode(*graphs.encode(None, None, codes[:6]), codes[6:])
    assert np.allclose(whole[0], part[0], atol=1e-5) and np.allclose(whole[1], part[1], atol=1e-5)


def test_the_trie_keeps_every_beam_an_item_and_without_it_beams_wander(tiny):
    graphs, arrays, trie, codes = tiny
    items = rt.ItemMap(arrays["item_id"], arrays["semantic_id"])
    illegal = {True: 0, False: 0}
    for user in range(8):
        past = graphs.encode(None, None, arrays["semantic_id"][user * 3 : user * 3 + 8])
        for constrained in (True, False):
            _, _, bad, duplicates, tuples = rt.recommend(
                graphs,
                *past,
                width=32,
                top_k=10,
                levels=3,
                codes_per_level=codes,
                trie=trie if constrained else None,
                items=items,
            )
            illegal[constrained] += bad
            assert duplicates == 0 and len(tuples) == 32
    assert illegal[True] == 0
    assert illegal[False] > 0  # the tiny catalog holds 160 of 512 ids: an open beam finds the others


def test_a_served_user_hits_the_cache_and_gets_the_same_items(tiny):
    graphs, arrays, trie, codes = tiny
    items = rt.ItemMap(arrays["item_id"], arrays["semantic_id"])
    recommender = rt.Recommender(
        graphs, trie=trie, items=items, levels=3, codes_per_level=codes, max_history=24, cache=rt.PrefixCache(1 << 20)
    )
    history = tuple(int(i) for i in arrays["item_id"][:10])
    first = recommender.serve("u1", history, width=16, top_k=5)
    second = recommender.serve("u1", history, width=16, top_k=5)
    grown = recommender.serve("u1", history + (int(arrays["item_id"][20]),), width=16, top_k=5)
    fresh = rt.Recommender(graphs, trie=trie, items=items, levels=3, codes_per_level=codes, max_history=24).serve(
        None, history + (int(arrays["item_id"][20]),), width=16, top_k=5
    )
    assert (first["cache"], second["cache"], grown["cache"]) == ("miss", "hit", "grown")
    assert (first["encoded"], second["encoded"], grown["encoded"]) == (10, 0, 1)
    assert first["items"].tolist() == second["items"].tolist()
    assert grown["items"].tolist() == fresh["items"].tolist()  # the cache never changes an answer
