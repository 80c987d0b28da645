"""User-affinity routing (gateway/table/affinity.py): consistent hashing with bounded loads over a
variant's replicas, on the compiled route table the server uses (pure: no processes)."""

from __future__ import annotations

import math
from collections import Counter

import orjson
import pytest

from gateway.kserve.tensors import parse_request
from gateway.table.affinity import EPSILON, MAX_KEY_BYTES, affinity_key
from gateway.table.routes import compile_table
from gateway.v2.grpc.convert import parse_infer
from tests.gateway.tables import table

REPLICAS = [f"http://127.0.0.1:{9000 + i}" for i in range(4)]
USERS = [f"user-{i}" for i in range(4000)]


def _endpoint(replicas=REPLICAS, states=None, **entry):
    doc = table(weights=(10000,))
    doc["endpoints"][0].update({"affinity": "user", **entry})
    doc["endpoints"][0]["variants"][0]["replicas"] = list(replicas)
    return compile_table(doc, {} if states is None else states).endpoints["ctr"]


def _home(ep, user: str) -> str:
    entry, placement = ep.stable.pick_for(ep.name.encode() + b"\x1f" + user.encode())
    return entry[0].base


def test_each_user_has_one_home_and_homes_spread_over_the_replicas():
    ep = _endpoint()
    homes = {user: _home(ep, user) for user in USERS}
    assert homes == {user: _home(ep, user) for user in USERS}  # the same replica every time
    shares = Counter(homes.values())
    assert set(shares) == set(REPLICAS)
    assert max(shares.values()) < 1.5 * len(USERS) / len(REPLICAS)
    # another process, another table object: the same homes (a pure function of key and URLs)
    again = _endpoint()
    assert all(_home(again, user) == home for user, home in list(homes.items())[:500])


def test_a_replica_lost_moves_only_its_own_users():
    ep = _endpoint()
    before = {user: _home(ep, user) for user in USERS}
    lost = REPLICAS[1]
    # dropped from the table (the control plane saw it unready) ...
    smaller = _endpoint([r for r in REPLICAS if r != lost])
    after = {user: _home(smaller, user) for user in USERS}
    moved = {user for user in USERS if after[user] != before[user]}
    assert moved == {user for user in USERS if before[user] == lost}
    # ... or ejected by its breaker: the same users move, to the same replicas
    states = {}
    ejected = _endpoint(states=states)
    states[(lost, "ctr__v1__onnx")].broken = True
    assert {user: _home(ejected, user) for user in USERS} == after
    # and it comes back: its users go home again
    states[(lost, "ctr__v1__onnx")].broken = False
    assert {user: _home(ejected, user) for user in USERS} == before


def test_one_users_flood_is_bounded_and_spills_along_the_ring():
    states = {}
    ep = _endpoint(states=states)
    key = ep.name.encode() + b"\x1fhot-user"
    taken = []
    for _ in range(40):  # 40 requests of one user in progress at once
        entry, placement = ep.stable.pick_for(key)
        entry[0].outstanding += 1
        taken.append((entry[0].base, placement))
    loads = Counter(base for base, _ in taken)
    assert taken[0][1] == "home" and any(p == "spilled" for _, p in taken)
    assert max(loads.values()) <= math.ceil((1 + EPSILON) * 40 / len(REPLICAS))
    assert set(loads) == set(REPLICAS)
    # another user whose home is the hot one's still gets a replica, under the same bound
    other = next(u for u in USERS if _home(_endpoint(), u) == taken[0][0])
    entry, _ = ep.stable.pick_for(ep.name.encode() + b"\x1f" + other.encode())
    assert entry[0].outstanding <= math.ceil((1 + EPSILON) * 41 / len(REPLICAS))


def test_every_replica_ejected_gives_none_and_one_replica_needs_no_ring():
    states = {}
    ep = _endpoint(states=states)
    for state in states.values():
        state.broken = True
    assert ep.stable.pick_for(b"ctr\x1fu") == (None, "none")
    single = _endpoint(REPLICAS[:1])
    assert single.stable.ring is None and single.stable.pick_for(b"ctr\x1fu")[1] == "none"
    plain = compile_table(table(weights=(10000,)), {}).endpoints["ctr"]
    assert plain.affinity_input == "" and plain.stable.ring is None  # off unless the entry asks


def _json(inputs):
    return parse_request(orjson.dumps({"inputs": inputs}), None)


def _user(value, datatype="BYTES", name="user_id"):
    return {"name": name, "datatype": datatype, "shape": [1], "data": [value]}


HISTORY = {"name": "history", "datatype": "INT64", "shape": [2], "data": [1, 2]}


@pytest.mark.parametrize(
    "inputs, sticky, expected",
    [
        ([_user("u-1"), HISTORY], None, b"u-1"),  # the model's own user id
        ([_user("u-1"), HISTORY], "header-user", b"u-1"),  # the input wins: the cache is keyed by it
        ([HISTORY], "header-user", b"header-user"),  # no input: the sticky header
        ([HISTORY], None, None),  # nothing names a user: the usual pick
        ([_user("x" * (MAX_KEY_BYTES + 1)), HISTORY], "h", None),  # too long: no key (the model refuses it)
        ([_user(""), HISTORY], None, None),
        ([_user(7, datatype="INT64"), HISTORY], "h", b"h"),  # not BYTES: not a user id
        ([_user("\x00\u2603\x7f"), HISTORY], None, "\x00\u2603\x7f".encode()),  # odd, but a key
    ],
)
def test_the_key_is_the_user_id_input_else_the_sticky_header(inputs, sticky, expected):
    ep = _endpoint()
    parsed = _json(inputs)
    key = affinity_key(ep, parsed, sticky)
    assert key == (None if expected is None else b"ctr\x1f" + expected)


def test_the_key_of_a_grpc_request_reads_typed_and_raw_contents():
    from tritonclient.grpc import service_pb2

    ep = _endpoint(affinity_input="uid")
    typed = service_pb2.ModelInferRequest(model_name="ctr")
    item = typed.inputs.add(name="uid", datatype="BYTES", shape=[1])
    item.contents.bytes_contents.append(b"grpc-user")
    assert affinity_key(ep, parse_infer(typed), None) == b"ctr\x1fgrpc-user"
    raw = service_pb2.ModelInferRequest(model_name="ctr")
    raw.inputs.add(name="uid", datatype="BYTES", shape=[1])
    raw.raw_input_contents.append(len(b"raw-user").to_bytes(4, "little") + b"raw-user")
    assert affinity_key(ep, parse_infer(raw), None) == b"ctr\x1fraw-user"
