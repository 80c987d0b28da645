"""Route table contract and routing functions, without processes: the schema file, the
semantic rules, the weighted split and sticky assignment the server's hot path uses."""

import copy
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

from gateway.table.routes import SCHEMA_PATH, RouteTableError, compile_table, missing_endpoint, validate
from tests.gateway.tables import table

ROOT = Path(__file__).resolve().parents[2]
KEY = {
    "id": "k1",
    "prefix": "mpk_ab12",
    "sha256": "a" * 64,
    "team": "ads",
    "rate_per_s": 10,
    "burst": 20,
    "max_concurrency": 4,
}


def test_schema_is_a_valid_json_schema_and_accepts_the_readme_example():
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    readme = (ROOT / "docs" / "gateway.md").read_text()
    example = readme.split("```json", 1)[1].split("```", 1)[0]
    validate(json.loads(example))


BAD_SIGNATURES = {
    "batch": {"max_batch_size": 8, "inputs": [{"name": "x", "datatype": "FP32", "shape": [4, 2]}]},
    "dup": {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [2]}, {"name": "x", "datatype": "FP32", "shape": [2]}]
    },
    "dtype": {"inputs": [{"name": "x", "datatype": "FLOAT", "shape": [2]}]},
}
ENDPOINT, KEYS, DOCUMENT = "endpoint", "key", "document"


def _variant0(t, **changes):
    t["endpoints"][0]["variants"][0].update(**changes)


@pytest.mark.parametrize(
    "mutate, message, refused, code",
    [
        (lambda t: t["endpoints"][0]["variants"][1].update(weight_bp=2000), "sum to 11000", ENDPOINT, "weights_sum"),
        (
            lambda t: t["endpoints"][0]["variants"][1].update(role="stable"),
            "exactly one variant with role 'stable'",
            ENDPOINT,
            "stable_count",
        ),
        (
            lambda t: t["endpoints"][0]["variants"][1].update(name="stable"),
            "duplicate variant names",
            ENDPOINT,
            "duplicate_variant_names",
        ),
        (lambda t: _variant0(t, replicas=["ftp://x"]), "endpoints/0/variants/0/replicas/0", ENDPOINT, "invalid_entry"),
        (lambda t: _variant0(t, role="boss"), "endpoints/0/variants/0/role", ENDPOINT, "invalid_entry"),
        (
            lambda t: t["endpoints"][0]["variants"][0].pop("triton_model"),
            "'triton_model' is a required property",
            ENDPOINT,
            "invalid_entry",
        ),
        (
            lambda t: t["endpoints"].append(copy.deepcopy(t["endpoints"][0])),
            "duplicate endpoint name",
            ENDPOINT,
            "duplicate_endpoint",
        ),
        (
            lambda t: t["endpoints"][0].update(shadow_sample_rate=1.5),
            "endpoints/0/shadow_sample_rate",
            ENDPOINT,
            "invalid_entry",
        ),
        (lambda t: t.pop("version"), "'version' is a required property", DOCUMENT, None),
        (lambda t: t.update(endpoints={"ctr": {}}), "endpoints", DOCUMENT, None),
        (lambda t: t.update(extra=1), "Additional properties", DOCUMENT, None),
        (
            lambda t: t["endpoints"][0].update(auth={"keys": ["nobody"]}),
            "auth names keys that the table does not define",
            ENDPOINT,
            "unknown_keys",
        ),
        (
            lambda t: t["endpoints"][0].update(auth={"public": "yes"}),
            "endpoints/0/auth/public",
            ENDPOINT,
            "invalid_entry",
        ),
        (lambda t: t["keys"].extend([KEY, KEY]), "another key has the same id or sha256", KEYS, "duplicate_key"),
        (
            lambda t: t["keys"].extend([KEY, {**KEY, "id": "k2"}]),
            "another key has the same id or sha256",
            KEYS,
            "duplicate_key",
        ),
        (lambda t: t["keys"].append({**KEY, "sha256": "ABC"}), "keys/1/sha256", KEYS, "invalid_key"),
        (lambda t: t["keys"].append({**KEY, "rate_per_s": 0}), "keys/1/rate_per_s", KEYS, "invalid_key"),
        (
            lambda t: t["endpoints"][0].update(timeout_ms=500, min_timeout_ms=800),
            "min_timeout_ms 800 is above timeout_ms 500",
            ENDPOINT,
            "timeout_order",
        ),
        (
            lambda t: _variant0(t, signature=BAD_SIGNATURES["batch"]),
            "needs -1 as its first (batch) dimension",
            ENDPOINT,
            "invalid_signature",
        ),
        (
            lambda t: _variant0(t, signature=BAD_SIGNATURES["dup"]),
            "duplicate input names",
            ENDPOINT,
            "invalid_signature",
        ),
        (
            lambda t: _variant0(t, signature=BAD_SIGNATURES["dtype"]),
            "signature/inputs/0/datatype",
            ENDPOINT,
            "invalid_entry",
        ),
        (
            lambda t: _variant0(t, grpc_replicas=["127.0.0.1:1", "127.0.0.1:2"]),
            "grpc_replicas needs one entry per replica",
            ENDPOINT,
            "grpc_replicas_mismatch",
        ),
    ],
)
def test_a_bad_entry_or_key_is_refused_alone_and_a_bad_document_whole(mutate, message, refused, code):
    """The strict check names the place and the reason; the gateway's compiler refuses
    only the bad entry (endpoint "ctr") or key (k1) and applies the rest of the table:
    endpoint "other" and key k9 (scoped to it) are served either way."""
    doc = table()
    other = copy.deepcopy(doc["endpoints"][0])
    other.update(name="other", auth={"public": False, "keys": ["k9"]})
    doc["endpoints"].append(other)
    doc["keys"] = [{**KEY, "id": "k9", "sha256": "9" * 64}]
    mutate(doc)
    pattern = message.replace("(", r"\(").replace(")", r"\)")
    with pytest.raises(RouteTableError, match=pattern):
        validate(doc)
    if refused == DOCUMENT:
        with pytest.raises(RouteTableError, match=pattern):
            compile_table(doc, {})
        return
    compiled = compile_table(doc, {})
    assert "other" in compiled.endpoints and "9" * 64 in compiled.keys
    assert [(r.kind, r.code) for r in compiled.refusals] == [(refused, code)] * len(compiled.refusals)
    assert compiled.refusals and all(message in r.reason for r in compiled.refusals)
    if refused == ENDPOINT:
        assert "ctr" not in compiled.endpoints and compiled.refused["ctr"].code == code
    else:
        assert "ctr" in compiled.endpoints and "a" * 64 not in compiled.keys and not compiled.refused


def test_a_refused_endpoint_answers_503_naming_the_reason_and_unknown_ones_404():
    doc = table()
    bad = copy.deepcopy(doc["endpoints"][0])
    bad["name"] = "ux-cli"
    bad["variants"][1]["name"] = bad["variants"][0]["name"]
    doc["endpoints"].append(bad)
    compiled = compile_table(doc, {})
    assert missing_endpoint(compiled, "ux-cli")[:2] == (503, "endpoint_refused")
    assert "duplicate variant names" in missing_endpoint(compiled, "ux-cli")[2]
    assert missing_endpoint(compiled, "nope")[:2] == (404, "unknown_endpoint")
    assert missing_endpoint(None, "ctr")[:2] == (503, "no_routes")


def test_shadow_with_weight_is_rejected():
    doc = table(shadow=True)
    doc["endpoints"][0]["variants"][-1]["weight_bp"] = 10
    with pytest.raises(RouteTableError, match="must have weight_bp 0"):
        validate(doc)


@pytest.mark.parametrize("weights", [(9000, 1000), (5000, 3000, 2000), (9900, 100)])
def test_weighted_split_over_20k_requests_is_within_one_point(weights):
    ep = compile_table(table(weights), {}).endpoints["ctr"]
    counts = Counter(ep.choose(None).name for _ in range(20000))
    for variant in ep.live:
        share = counts[variant.name] / 20000
        assert abs(share - variant.weight_bp / 10000) <= 0.01, (variant.name, share)


def test_weighted_split_interleaves_variants():
    """The canary's requests are spread out, not served in one block."""
    ep = compile_table(table((9000, 1000)), {}).endpoints["ctr"]
    picks = [ep.choose(None).name for _ in range(1000)]
    positions = [i for i, name in enumerate(picks) if name == "canary"]
    assert max(b - a for a, b in zip(positions, positions[1:])) <= 20


def test_sticky_share_matches_weights_and_is_stable_for_a_key():
    ep = compile_table(table((8000, 2000)), {}).endpoints["ctr"]
    keys = [f"user-{i}" for i in range(20000)]
    assignment = {k: ep.choose(k).name for k in keys}
    share = Counter(assignment.values())["canary"] / len(keys)
    assert abs(share - 0.20) <= 0.01
    again = compile_table(table((8000, 2000)), {}).endpoints["ctr"]  # a "restart"
    assert all(again.choose(k).name == assignment[k] for k in keys[:2000])


def test_changing_weights_moves_the_fewest_users():
    keys = [f"user-{i}" for i in range(20000)]
    before = compile_table(table((9000, 1000)), {}).endpoints["ctr"]
    after = compile_table(table((8000, 2000)), {}).endpoints["ctr"]
    moved = [(before.choose(k).name, after.choose(k).name) for k in keys]
    changes = Counter(m for m in moved if m[0] != m[1])
    assert set(changes) == {("stable", "canary")}  # nobody leaves the arm that grew
    assert abs(sum(changes.values()) / len(keys) - 0.10) <= 0.01  # the minimum: 10% of users

    # Adding a third arm (80/20 -> 60/20/20): the new arm gets its 20% from both old
    # arms; weighted rendezvous also shifts a few stable users to the canary (its share
    # relative to stable grew), so the total moved is close to, not exactly, the 20% minimum.
    three = compile_table(table((6000, 2000, 2000)), {}).endpoints["ctr"]
    moved = Counter((after.choose(k).name, three.choose(k).name) for k in keys)
    assert ("canary", "stable") not in moved and ("arm-c", "stable") not in moved
    total = sum(n for (old, new), n in moved.items() if old != new) / len(keys)
    assert 0.19 <= total <= 0.25, total


def test_salt_reshuffles_and_endpoint_scopes_assignment():
    keys = [f"user-{i}" for i in range(4000)]
    a = compile_table(table((5000, 5000), salt="exp-1"), {}).endpoints["ctr"]
    b = compile_table(table((5000, 5000), salt="exp-2"), {}).endpoints["ctr"]
    same = sum(a.choose(k).name == b.choose(k).name for k in keys) / len(keys)
    assert 0.4 < same < 0.6  # independent assignment under a new salt


def test_sticky_assignment_is_the_same_in_another_process():
    """Pure function of (key, endpoint, salt): no per-process hash seed or state."""
    keys = [f"user-{i}" for i in range(300)]
    here = [compile_table(table((7000, 3000)), {}).endpoints["ctr"].choose(k).name for k in keys]
    code = (
        "import json,sys; from tests.gateway.tables import table; from gateway.table.routes import compile_table;"
        "ep=compile_table(table((7000,3000)),{}).endpoints['ctr'];"
        "print(json.dumps([ep.choose(f'user-{i}').name for i in range(300)]))"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == here


def test_replica_state_survives_a_reload_and_least_outstanding_is_picked():
    states = {}
    doc = table()
    doc["endpoints"][0]["variants"][0]["replicas"] = ["http://127.0.0.1:9000", "http://127.0.0.1:9001/"]
    first = compile_table(doc, states)
    stable = first.endpoints["ctr"].stable
    a, b = (entry[0] for entry in stable.replicas)
    a.outstanding = 3
    assert all(stable.pick()[0] is b for _ in range(5))
    b.broken = True
    assert stable.pick()[0] is a
    second = compile_table(doc, states)
    assert second.endpoints["ctr"].stable.replicas[1][0] is b and b.broken
    a.broken = True
    assert second.endpoints["ctr"].stable.pick() is None


def test_keys_auth_floor_and_signatures_compile():
    doc = table()
    doc["keys"] = [KEY, {**KEY, "id": "k2", "sha256": "b" * 64, "team": "search"}]
    doc["endpoints"][0].update(auth={"keys": ["k1"]}, timeout_ms=800, min_timeout_ms=50)
    sig = {"max_batch_size": 64, "inputs": [{"name": "dense", "datatype": "FP32", "shape": [-1, 13]}]}
    for v in doc["endpoints"][0]["variants"]:
        v["signature"] = sig
    compiled = compile_table(doc, {})
    ep = compiled.endpoints["ctr"]
    assert ep.auth.public is False and ep.auth.allowed == {"k1"} and ep.min_timeout_s == 0.05
    assert set(compiled.keys) == {"a" * 64, "b" * 64} and compiled.keys["b" * 64].team == "search"
    assert ep.variants[0].signature is ep.variants[1].signature  # one object per distinct signature
    # reload: a key keeps its live state (bucket, in-flight) by id
    compiled.keys["a" * 64].in_flight = 3
    doc["keys"][0] = {**KEY, "rate_per_s": 99}
    again = compile_table(doc, {}, keys=compiled.keys)
    assert again.keys["a" * 64] is compiled.keys["a" * 64] and again.keys["a" * 64].in_flight == 3
    assert again.keys["a" * 64].rate_per_s == 99


def test_an_endpoint_without_auth_is_closed_and_min_timeout_defaults_to_timeout():
    ep = compile_table(table(), {}).endpoints["ctr"]
    assert ep.auth.public is False and not ep.auth.allowed
    assert ep.min_timeout_s == ep.timeout_s == 1.0
