"""User-affinity routing: which replica of the chosen variant serves a user, for endpoints
whose route entry says `"affinity": "user"` (generative recommenders: each replica keeps its
own per-user KV cache, so a user's requests should reach the replica that holds theirs).

The rule is consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam,
"Consistent Hashing with Bounded Loads", SODA 2018): the replicas' points on a hash ring
(`VNODES` each, from their base URLs); a user's key hashes to a point and walks clockwise;
the first replica whose load is under the capacity ceil((1 + EPSILON) x (m + 1) / n) takes
the request (m: requests in progress on the variant's n usable replicas, this one
included). So no replica holds more than (1 + EPSILON) times its share, one user's flood
spills to the next replicas on the ring instead of drowning one, and a replica leaving
(dropped from the table, or its breaker open) moves only the users whose walk passed it:
they come back as cache misses on the next replica, every other user stays put.

Load is `ReplicaState.outstanding` (this variant's model on that server). Hashing is
BLAKE2b from hashlib (no secret: placement needs spread, not secrecy; the bound on load
is what keeps a crafted key harmless). Pure, no I/O: tests/gateway/test_affinity.py drives
it directly and the infer path calls the same `Ring.pick`.

The key (`affinity_key`): the value of the endpoint's `affinity_input` (default `user_id`,
the GR model's input the cache is keyed by) when the request carries it as one string
(JSON `data`, gRPC `bytes_contents` or the first element of `raw_input_contents`), else
the sticky header's value (X-User-Id by default); a key longer than `MAX_KEY_BYTES` or an
empty one is no key (the model refuses such a user id itself) and the request gets the
variant's usual least-outstanding pick.
"""

from __future__ import annotations

from bisect import bisect_right
from hashlib import blake2b
from math import ceil

from gateway.telemetry import metrics

VNODES = 64  # points per replica: the replicas' shares of the ring within ~15 % of each other
EPSILON = 0.25  # a replica takes at most 1.25x its share of the requests in progress
MAX_KEY_BYTES = 256


def _point(data: bytes) -> int:
    return int.from_bytes(blake2b(data, digest_size=8).digest(), "big")


class Ring:
    """The hash ring of one variant's replicas (entries of `routes.Variant.replicas`)."""

    __slots__ = ("points", "owners", "entries")

    def __init__(self, entries: list):
        self.entries = list(entries)
        ring = sorted(
            (_point(f"{entry[0].base}\x1f{i}".encode()), index)
            for index, entry in enumerate(self.entries)
            for i in range(VNODES)
        )
        self.points = [point for point, _ in ring]
        self.owners = [index for _, index in ring]

    def walk(self, key: bytes):
        """The replicas in the order the key's walk meets them (each once)."""
        points = self.points
        if not points:
            return
        start = bisect_right(points, _point(key)) % len(points)
        seen = set()
        owners = self.owners
        n = len(self.entries)
        for i in range(len(points)):
            index = owners[(start + i) % len(points)]
            if index not in seen:
                seen.add(index)
                yield self.entries[index]
                if len(seen) == n:
                    return

    def pick(self, key: bytes):
        """(entry, home?) for this key: the first usable replica on the walk under the load
        bound, and whether it is the key's first replica (its cache's home); None when every
        replica's breaker is open."""
        usable = [entry for entry in self.entries if not entry[0].broken]
        if not usable:
            return None
        in_progress = sum(entry[0].outstanding for entry in usable)
        capacity = ceil((1.0 + EPSILON) * (in_progress + 1) / len(usable))
        first = True
        for entry in self.walk(key):
            state = entry[0]
            if not state.broken and state.outstanding < capacity:
                return entry, first
            first = False
        return None  # unreachable: the usable replicas' loads sum below n x capacity


def _first_json_string(data):
    while type(data) is list and data:
        data = data[0]
    return data if type(data) is str else None


def _first_raw_element(raw: bytes) -> bytes | None:
    """The first element of a BYTES tensor's raw contents (4-byte little-endian length, then the bytes)."""
    if len(raw) < 4:
        return None
    size = int.from_bytes(raw[:4], "little")
    return bytes(raw[4 : 4 + size]) if 4 + size <= len(raw) else None


def input_value(parsed, name: str) -> bytes | None:
    """The first element of the request's BYTES input `name` as bytes, when it has one."""
    source = parsed.source
    if source is None:
        return None
    if type(source) is list:  # HTTP: the JSON body's inputs (tensors.parse_request checked them)
        for item in source:
            if item.get("name") == name:
                if item.get("datatype") != "BYTES":
                    return None
                value = _first_json_string(item.get("data"))
                return None if value is None else value.encode("utf-8", "surrogatepass")
        return None
    for i, item in enumerate(source.inputs):  # gRPC: the ModelInferRequest (grpc/convert.py checked it)
        if item.name == name:
            if item.datatype != "BYTES":
                return None
            if source.raw_input_contents:
                return _first_raw_element(source.raw_input_contents[i])
            values = item.contents.bytes_contents
            return bytes(values[0]) if values else None
    return None


def affinity_key(ep, parsed, sticky: str | None) -> bytes | None:
    """The user's key for the endpoint's ring (see the module docstring), or None."""
    value = input_value(parsed, ep.affinity_input)
    if value is None and sticky:
        value = sticky.encode("utf-8", "surrogatepass")
    if not value or len(value) > MAX_KEY_BYTES:
        return None
    return ep.name.encode() + b"\x1f" + value


def replica_for(ep, variant, key: bytes | None):
    """The replica of `variant` for this request: the user's on a user-affinity endpoint
    (counted by placement), else the one with the fewest requests in progress."""
    if variant.ring is None:  # affinity off, or one replica: nothing to choose by user
        return variant.pick()
    entry, placement = variant.pick_for(key)
    if entry is not None:
        metrics.AFFINITY_PICKS.labels(ep.name, variant.name, placement).inc()
    return entry
