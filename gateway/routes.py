"""The route table: validation (JSON Schema + semantic rules), compilation into the
objects the hot path uses, and the routing functions (weighted split, sticky A/B).

Pure Python, no I/O: the tests call `Endpoint.choose` directly for the 20k-request
checks, and the server calls the same function.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from hashlib import blake2b
from pathlib import Path

import jsonschema

from .replies import reply_prefixes
from .tenants import EndpointAuth, Key, compile_auth, compile_keys
from .tensors import Signature
from .upstream import Pool

SCHEMA_PATH = Path(__file__).with_name("route_table.schema.json")
BP = 10000  # basis points: weights of the live variants of an endpoint sum to this
GOLDEN = 0.6180339887498949  # additive recurrence: low-discrepancy split without randomness


class RouteTableError(ValueError):
    """The route table is not valid; the message says where and why."""


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


class ReplicaState:
    """One model on one Triton server (base URL + triton model): outstanding requests
    and its circuit breaker. Kept across table reloads; the keep-alive connection pool
    is shared by every model on the same server.

    Keyed by model and not only by server so that a slow or failing model (a shadow, a
    bad canary) does not eject the stable model that shares its server.
    """

    __slots__ = (
        "base",
        "model",
        "outstanding",
        "failures",
        "broken",
        "refused",
        "open_until",
        "cooldown",
        "pool",
        "ready_line",
    )

    def __init__(self, base: str, model: str, pool: Pool):
        self.base = base
        self.model = model
        self.outstanding = 0
        self.failures = 0  # consecutive
        self.broken = False
        self.refused = False  # the last failure was a refused connection (nothing listens there)
        self.open_until = 0.0
        self.cooldown = 0.0
        self.pool = pool
        self.ready_line = f"GET /v2/models/{model}/ready HTTP/1.1\r\n".encode()


@dataclass(eq=False)
class Variant:
    name: str
    model_version: str
    triton_model: str
    role: str
    weight_bp: int
    attempt_timeout_s: float | None
    replicas: list  # [(ReplicaState, infer request line, metadata request line, gRPC host:port or "")]
    signature: Signature | None = None  # what requests must look like (None: only the shape/data checks)
    _rr: int = 0
    # replies.py: Triton's reply prefix naming this variant's model, and the endpoint's
    reply_from: bytes = b""
    reply_to: bytes = b""

    def pick(self):
        """Least outstanding requests among replicas whose breaker is closed (ties: round robin)."""
        replicas = self.replicas
        n = len(replicas)
        if n == 1:
            entry = replicas[0]
            return None if entry[0].broken else entry
        best = None
        best_load = 1 << 62
        start = self._rr = (self._rr + 1) % n if n else 0
        for i in range(n):
            entry = replicas[(start + i) % n]
            state = entry[0]
            if not state.broken and state.outstanding < best_load:
                best, best_load = entry, state.outstanding
        return best

    def pick_panic(self):
        """When every replica's breaker is open: the least loaded one that still accepts
        connections. For the stable variant, refusing all traffic turns a few timeouts of
        a busy replica into an outage until its probe; trying it is Envoy's "panic
        threshold". A replica that refused the connection (down) is not tried."""
        alive = [entry for entry in self.replicas if not entry[0].refused]
        return min(alive, key=lambda entry: entry[0].outstanding, default=None)

    @property
    def available(self) -> bool:
        return any(not entry[0].broken for entry in self.replicas)


@dataclass(eq=False)
class Endpoint:
    name: str
    sticky_header: str
    salt: str
    shadow_sample_rate: float
    timeout_s: float
    variants: list[Variant]
    stable: Variant
    live: list[Variant]  # non-shadow, weight > 0, fixed order (as listed)
    shadows: list[Variant]
    auth: EndpointAuth = field(default_factory=lambda: EndpointAuth(False, frozenset()))
    min_timeout_s: float = 0.0  # a client deadline below this is the client's fault when it expires
    _bounds: list[float] = field(default_factory=list)  # cumulative upper bounds in [0, BP)
    _x: float = 0.0
    _hash_prefix: bytes = b""
    sticky_key: str = ""  # lower-case header name (the HTTP server lower-cases names)
    # The share of the stable's replies whose scores are sampled at least (PSI needs as many
    # stable scores as candidate ones): the busiest other live variant's weight / the stable's.
    stable_score_rate: float = 0.0
    experiment: str = ""  # online experiment served by this split: each served reply is an exposure
    # registry version -> the live variant serving it (the stable first): versioned paths
    versions: dict[str, Variant] = field(default_factory=dict)
    exposure_token_key: bytes = b""  # the experiment signs exposure tokens with it (empty: it takes none)

    def __post_init__(self):
        self.sticky_key = self.sticky_header.lower()
        for variant in [self.stable, *self.live]:
            self.versions.setdefault(variant.model_version, variant)
        others = [v.weight_bp for v in self.live if v is not self.stable]
        if others and self.stable.weight_bp > 0:
            self.stable_score_rate = min(1.0, max(others) / self.stable.weight_bp)
        total = 0
        for variant in self.live:
            total += variant.weight_bp
            self._bounds.append(total)
        self._hash_prefix = f"{self.name}\x1f{self.salt}\x1f".encode()

    def choose(self, sticky_key: str | None = None) -> Variant:
        """The variant for one request: sticky (rendezvous) with a key, weighted split without."""
        live = self.live
        if len(live) == 1:
            return live[0]
        if sticky_key:
            return self.sticky(sticky_key)
        # Additive recurrence on the golden ratio: over any N requests each variant's
        # share is within ~1/N of its weight, and successive requests interleave.
        self._x = x = (self._x + GOLDEN) % 1.0
        point = x * BP
        for variant, bound in zip(live, self._bounds):
            if point < bound:
                return variant
        return live[-1]

    def sticky(self, key: str) -> Variant:
        """Weighted rendezvous hashing: the arm is a pure function of (key, endpoint, salt)
        and the variants' names and weights. Each variant gets weight/10000 of the keys,
        and changing weights only moves keys to the variants whose weight grew (the
        fewest possible)."""
        prefix = self._hash_prefix + key.encode("utf-8", "surrogatepass") + b"\x1f"
        best = None
        best_score = math.inf
        for variant in self.live:
            digest = blake2b(prefix + variant.name.encode(), digest_size=8).digest()
            u = (int.from_bytes(digest, "big") + 0.5) / 18446744073709551616.0
            score = -math.log(u) / variant.weight_bp
            if score < best_score:
                best, best_score = variant, score
        return best


@dataclass(eq=False)
class RouteTable:
    version: str
    endpoints: dict[str, Endpoint]
    raw: dict
    keys: dict[str, Key] = field(default_factory=dict)  # sha256 hex -> Key

    def replica_keys(self) -> set[tuple[str, str]]:
        return {(e[0].base, e[0].model) for ep in self.endpoints.values() for v in ep.variants for e in v.replicas}


def validate(document) -> None:  # noqa: C901 - one pass read top to bottom; split when next changed
    """Raise RouteTableError naming the first problem (schema, then semantic rules)."""
    errors = sorted(_validator().iter_errors(document), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        raise RouteTableError(f"{where}: {err.message}")
    key_ids = set()
    hashes = set()
    for i, key in enumerate(document.get("keys", ())):
        if key["id"] in key_ids:
            raise RouteTableError(f"keys/{i}: duplicate key id {key['id']!r}")
        if key["sha256"] in hashes:
            raise RouteTableError(f"keys/{i} ({key['id']}): the same sha256 as another key")
        key_ids.add(key["id"])
        hashes.add(key["sha256"])
    seen = set()
    for i, ep in enumerate(document["endpoints"]):
        where = f"endpoints/{i} ({ep['name']})"
        if ep["name"] in seen:
            raise RouteTableError(f"{where}: duplicate endpoint name")
        seen.add(ep["name"])
        unknown = [k for k in ep.get("auth", {}).get("keys", ()) if k not in key_ids]
        if unknown:
            raise RouteTableError(f"{where}: auth names keys that the table does not define: {unknown[:5]}")
        if ep.get("min_timeout_ms", 0) > ep.get("timeout_ms", 1000):
            raise RouteTableError(
                f"{where}: min_timeout_ms {ep['min_timeout_ms']} is above timeout_ms {ep.get('timeout_ms', 1000)}"
            )
        for v in ep["variants"]:
            if "grpc_replicas" in v and len(v["grpc_replicas"]) != len(v["replicas"]):
                raise RouteTableError(
                    f"{where} variant {v['name']!r}: grpc_replicas needs one entry per replica "
                    f"({len(v['grpc_replicas'])} for {len(v['replicas'])})"
                )
            signature = v.get("signature")
            if signature is not None:
                _validate_signature(signature, f"{where} variant {v['name']!r}")
        names = [v["name"] for v in ep["variants"]]
        if len(set(names)) != len(names):
            raise RouteTableError(f"{where}: duplicate variant names {names}")
        stables = [v for v in ep["variants"] if v["role"] == "stable"]
        if len(stables) != 1:
            raise RouteTableError(f"{where}: needs exactly one variant with role 'stable', found {len(stables)}")
        total = sum(v["weight_bp"] for v in ep["variants"] if v["role"] != "shadow")
        if total != BP:
            raise RouteTableError(f"{where}: weights of non-shadow variants sum to {total} basis points, not {BP}")
        for v in ep["variants"]:
            if v["role"] == "shadow" and v["weight_bp"] != 0:
                raise RouteTableError(f"{where}: shadow variant {v['name']!r} must have weight_bp 0")


def _validate_signature(signature: dict, where: str) -> None:
    names = [t["name"] for t in signature["inputs"]]
    if len(set(names)) != len(names):
        raise RouteTableError(f"{where}: signature has duplicate input names {names}")
    if signature.get("max_batch_size", 0) > 0:
        for t in signature["inputs"]:
            if not t["shape"] or t["shape"][0] != -1:
                raise RouteTableError(
                    f"{where}: input {t['name']!r} of a batching model (max_batch_size > 0) needs -1 as its "
                    f"first (batch) dimension, got {t['shape']}"
                )


def compile_table(document, states: dict, pools: dict | None = None, keys: dict | None = None) -> RouteTable:
    """Validate and build the hot-path objects. `states` ((base URL, model) ->
    ReplicaState), `pools` (base URL -> Pool) and `keys` (the previous table's keys)
    are reused so breaker, load, connections and rate-limit buckets survive reloads;
    new entries are added to `states` and `pools`."""
    pools = {} if pools is None else pools
    validate(document)
    endpoints = {}
    signatures: dict[str, Signature] = {}  # variants serving the same model share one object
    for ep in document["endpoints"]:
        timeout_ms = ep.get("timeout_ms", 1000)
        variants = []
        for v in ep["variants"]:
            replicas = []
            grpc_targets = v.get("grpc_replicas") or [""] * len(v["replicas"])
            for base, grpc_target in zip(v["replicas"], grpc_targets):
                base = base.rstrip("/")
                model = v["triton_model"]
                state = states.get((base, model))
                if state is None:
                    pool = pools.get(base)
                    if pool is None:
                        pool = pools[base] = Pool(base)
                    state = states[(base, model)] = ReplicaState(base, model, pool)
                replicas.append(
                    (
                        state,
                        f"POST /v2/models/{model}/infer HTTP/1.1\r\n".encode(),
                        f"GET /v2/models/{model} HTTP/1.1\r\n".encode(),
                        grpc_target,  # this variant's gRPC address of the replica ("": none)
                    )
                )
            attempt = v.get("attempt_timeout_ms")
            if attempt is None and v["role"] in ("canary", "arm", "baseline"):
                attempt = timeout_ms / 2
            signature = None
            if v.get("signature") is not None:
                sig_key = json.dumps(v["signature"], sort_keys=True)
                signature = signatures.get(sig_key)
                if signature is None:
                    signature = signatures[sig_key] = Signature.from_document(v["signature"])
            variants.append(
                Variant(
                    name=v["name"],
                    model_version=v["model_version"],
                    triton_model=v["triton_model"],
                    role=v["role"],
                    weight_bp=v["weight_bp"],
                    attempt_timeout_s=None if attempt is None else attempt / 1000.0,
                    replicas=replicas,
                    signature=signature,
                )
            )
            variants[-1].reply_from, variants[-1].reply_to = reply_prefixes(
                ep["name"], v["triton_model"], v["model_version"]
            )
        endpoints[ep["name"]] = Endpoint(
            name=ep["name"],
            sticky_header=ep.get("sticky_header", "X-User-Id"),
            salt=ep.get("salt", ""),
            shadow_sample_rate=float(ep.get("shadow_sample_rate", 0)),
            timeout_s=timeout_ms / 1000.0,
            variants=variants,
            stable=next(v for v in variants if v.role == "stable"),
            live=[v for v in variants if v.role != "shadow" and v.weight_bp > 0],
            shadows=[v for v in variants if v.role == "shadow" and v.replicas],
            auth=compile_auth(ep.get("auth")),
            min_timeout_s=ep.get("min_timeout_ms", timeout_ms) / 1000.0,
            experiment=ep.get("experiment", ""),
            exposure_token_key=bytes.fromhex(ep.get("exposure_token_key", "")),
        )
    return RouteTable(
        version=document["version"],
        endpoints=endpoints,
        raw=document,
        keys=compile_keys(document.get("keys", ()), keys),
    )
