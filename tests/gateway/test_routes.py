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

from gateway.routes import SCHEMA_PATH, RouteTableError, compile_table, validate
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
    readme = (ROOT / "gateway" / "README.md").read_text()
    example = readme.split("```json", 1)[1].split("```", 1)[0]
    validate(json.loads(example))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t["endpoints"][0]["variants"][1].update(weight_bp=2000), "sum to 11000"),
        (lambda t: t["endpoints"][0]["variants"][1].update(role="stable"), "exactly one variant with role 'stable'"),
        (lambda t: t["endpoints"][0]["variants"][1].update(name="stable"), "duplicate variant names"),
        (lambda t: t["endpoints"][0]["variants"][0].update(replicas=["ftp://x"]), "endpoints/0/variants/0/replicas/0"),
        (lambda t: t["endpoints"][0]["variants"][0].update(role="boss"), "endpoints/0/variants/0/role"),
        (lambda t: t["endpoints"][0]["variants"][0].pop("triton_model"), "'triton_model' is a required property"),
        (lambda t: t["endpoints"].append(copy.deepcopy(t["endpoints"][0])), "duplicate endpoint name"),
        (lambda t: t["endpoints"][0].update(shadow_sample_rate=1.5), "endpoints/0/shadow_sample_rate"),
        (lambda t: t.pop("version"), "'version' is a required property"),
        (
            lambda t: t["endpoints"][0].update(auth={"keys": ["nobody"]}),
            "auth names keys that the table does not define",
        ),
        (lambda t: t["endpoints"][0].update(auth={"public": "yes"}), "endpoints/0/auth/public"),
        (lambda t: t.update(keys=[KEY, KEY]), "duplicate key id"),
        (lambda t: t.update(keys=[KEY, {**KEY, "id": "k2"}]), "the same sha256 as another key"),
        (lambda t: t.update(keys=[{**KEY, "sha256": "ABC"}]), "keys/0/sha256"),
        (lambda t: t.update(keys=[{**KEY, "rate_per_s": 0}]), "keys/0/rate_per_s"),
        (
            lambda t: t["endpoints"][0].update(timeout_ms=500, min_timeout_ms=800),
            "min_timeout_ms 800 is above timeout_ms 500",
        ),
        (
            lambda t: t["endpoints"][0]["variants"][0].update(
                signature={"max_batch_size": 8, "inputs": [{"name": "x", "datatype": "FP32", "shape": [4, 2]}]}
            ),
            "needs -1 as its first (batch) dimension",
        ),
        (
            lambda t: t["endpoints"][0]["variants"][0].update(
                signature={
                    "inputs": [
                        {"name": "x", "datatype": "FP32", "shape": [2]},
                        {"name": "x", "datatype": "FP32", "shape": [2]},
                    ]
                }
            ),
            "duplicate input names",
        ),
        (
            lambda t: t["endpoints"][0]["variants"][0].update(
                signature={"inputs": [{"name": "x", "datatype": "FLOAT", "shape": [2]}]}
            ),
            "signature/inputs/0/datatype",
        ),
    ],
)
def test_invalid_tables_are_rejected_with_the_place_and_reason(mutate, message):
    doc = table()
    mutate(doc)
    with pytest.raises(RouteTableError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compile_table(doc, {})


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
        "import json,sys; from tests.gateway.tables import table; from gateway.routes import compile_table;"
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
