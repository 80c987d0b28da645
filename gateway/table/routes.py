"""The route table: compilation into the objects the hot path uses (per entry, after
checks.py has said which entries and keys to apply), and the routing functions
(weighted split, sticky A/B).

Pure Python, no I/O: the tests call `Endpoint.choose` directly for the 20k-request
checks, and the server calls the same function.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from gateway.contracts.feedback_rules import DEFAULT_TOKEN_TTL_S
from gateway.keys.tenants import EndpointAuth, Key, compile_auth, compile_keys
from gateway.kserve.replies import reply_prefixes
from gateway.kserve.signature import Signature
from gateway.table.affinity import Ring
from gateway.table.checks import SCHEMA_PATH, Refusal, RouteTableError, check, validate
from gateway.table.llm import compile_llm_endpoints
from gateway.table.split import BP, Split
from gateway.wire.upstream import Pool

__all__ = ["BP", "SCHEMA_PATH", "Refusal", "RouteTable", "RouteTableError", "compile_table", "validate"]


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
    ring: Ring | None = None  # user-affinity endpoints with 2+ replicas (affinity.py)

    def pick_for(self, key: bytes | None):
        """(entry or None, placement) on a user-affinity endpoint: the user's replica on the
        ring under the load bound ("home" or "spilled"), or the usual pick without a key ("none")."""
        ring = self.ring
        if ring is None or key is None:
            return self.pick(), "none"
        picked = ring.pick(key)
        if picked is None:
            return None, "none"
        return picked[0], "home" if picked[1] else "spilled"

    def pick_after(self, key: bytes | None, failed):
        """The replica for a retry on this variant after `failed` did not serve: the next
        usable one on the user's walk (their cache's next home), else the usual pick."""
        if self.ring is not None and key is not None:
            for entry in self.ring.walk(key):
                if entry is not failed and not entry[0].broken:
                    return entry
            return None
        return self.pick()

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
class Endpoint(Split):
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
    exposure_token_ttl_s: int = DEFAULT_TOKEN_TTL_S  # a token is citable this long: the attribution window
    team: str = ""  # the owning team's label: the durable log's subjects carry it (log_contract.py)
    capture_share: float = 0.0  # share of replies whose request inputs are logged for training data
    affinity_input: str = ""  # user-affinity routing's input name (affinity.py); "": off

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


@dataclass(eq=False)
class RouteTable:
    version: str
    endpoints: dict[str, Endpoint]
    raw: dict
    keys: dict[str, Key] = field(default_factory=dict)  # sha256 hex -> Key
    refusals: list[Refusal] = field(default_factory=list)  # entries and keys of `raw` not applied
    refused: dict[str, Refusal] = field(default_factory=dict)  # endpoint name -> why its entry was refused
    llm: dict = field(default_factory=dict)  # LLM endpoint name -> gateway/llm/table.LlmEndpoint

    def replica_keys(self) -> set[tuple[str, str]]:
        return {(e[0].base, e[0].model) for ep in self.endpoints.values() for v in ep.variants for e in v.replicas}

    def pool_addresses(self) -> list[str]:
        """Every pool replica address the table names (tensor replicas over HTTP and gRPC, LLM
        backends of kind triton): the platform's own, never a tenant backend's (llm/guard.py)."""
        found = {e[0].base for ep in self.endpoints.values() for v in ep.variants for e in v.replicas}
        found |= {e[3] for ep in self.endpoints.values() for v in ep.variants for e in v.replicas if e[3]}
        for ep in self.llm.values():
            for backend in [*(b for v in ep.variants for b in v.backends), *ep.fallbacks]:
                if backend.kind == "triton":
                    found.update(r.base for r in backend.replicas)
        return sorted(found)


def unknown_endpoint_detail(name: str) -> str:
    """The message of the 404 `unknown_endpoint`: the one answer for a name the table lacks
    and for an endpoint the request may not call (access.py), so it names both."""
    return f"unknown endpoint {name[:200]!r}, or one this request may not call (send a key of its team)"


def missing_endpoint(table: RouteTable | None, name: str) -> tuple[int, str, str, bool]:
    """(status, code, detail, the platform's fault?) for a request to an endpoint the
    serving table lacks: no table yet (503), an entry the gateway refused (503
    `endpoint_refused`, naming the reason: the control plane sent what this gateway
    cannot serve), or no such endpoint (404, the client's; the same answer as for an
    endpoint the request may not call: access.py)."""
    if table is None:
        return 503, "no_routes", "no route table loaded yet", True
    refusal = table.refused.get(name)
    if refusal is not None:
        detail = f"the gateway refused the route entry of endpoint {name!r} ({refusal.code}): {refusal.reason}"
        return 503, "endpoint_refused", detail[:600], True
    return 404, "unknown_endpoint", unknown_endpoint_detail(name), False


def compile_table(
    document, states: dict, pools: dict | None = None, keys: dict | None = None, llm_states: dict | None = None
) -> RouteTable:
    """Check the document (checks.check: raises RouteTableError only for a document
    that is not a route table) and build the hot-path objects of every entry and key it
    may apply; the refused ones are listed in `refusals` (endpoints also in `refused`).

    `states` ((base URL, model) -> ReplicaState), `pools` (base URL -> Pool) and `keys`
    (the previous table's keys) are reused so breaker, load, connections and rate-limit
    buckets survive reloads; new entries are added to `states` and `pools`."""
    pools = {} if pools is None else pools
    checked = check(document)
    refusals = list(checked.refusals)
    endpoints = {}
    signatures: dict[str, Signature] = {}  # variants serving the same model share one object
    key_documents = [document.get("keys", [])[i] for i in checked.keys]
    key_teams = {doc["id"]: doc["team"] for doc in key_documents}
    for index in checked.endpoints:
        ep = document["endpoints"][index]
        try:
            endpoints[ep["name"]] = _compile_endpoint(ep, states, pools, signatures, key_teams)
        except (ValueError, TypeError, KeyError) as exc:  # a rule the checks missed: this entry only
            reason = f"endpoints/{index} ({ep['name']}): {type(exc).__name__}: {exc}"[:500]
            refusals.append(Refusal("endpoint", ep["name"], "invalid_entry", reason))
    llm_states = {} if llm_states is None else llm_states
    llm, failed = compile_llm_endpoints(document, checked.llm_endpoints, checked.secrets, llm_states)
    for index, name, what in failed:
        refusals.append(Refusal("llm_endpoint", name, "invalid_entry", f"llm_endpoints/{index} ({name}): {what}"))
    return RouteTable(
        llm=llm,
        version=document["version"],
        endpoints=endpoints,
        raw=document,
        keys=compile_keys(key_documents, keys),
        refusals=refusals,
        refused={r.name: r for r in refusals if r.kind in ("endpoint", "llm_endpoint")},
    )


def _replicas(v: dict, states: dict, pools: dict) -> list:
    replicas = []
    grpc_targets = v.get("grpc_replicas") or [""] * len(v["replicas"])
    model = v["triton_model"]
    for base, grpc_target in zip(v["replicas"], grpc_targets):
        base = base.rstrip("/")
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
    return replicas


def _compile_endpoint(ep: dict, states: dict, pools: dict, signatures: dict, key_teams: dict | None = None) -> Endpoint:
    timeout_ms = ep.get("timeout_ms", 1000)
    affine = ep.get("affinity", "none") == "user"
    variants = []
    for v in ep["variants"]:
        attempt = v.get("attempt_timeout_ms")
        if attempt is None and v["role"] in ("canary", "arm", "baseline"):
            attempt = timeout_ms / 2
        signature = None
        if v.get("signature") is not None:
            sig_key = json.dumps(v["signature"], sort_keys=True)
            signature = signatures.get(sig_key)
            if signature is None:
                signature = signatures[sig_key] = Signature.from_document(v["signature"])
        variant = Variant(
            name=v["name"],
            model_version=v["model_version"],
            triton_model=v["triton_model"],
            role=v["role"],
            weight_bp=v["weight_bp"],
            attempt_timeout_s=None if attempt is None else attempt / 1000.0,
            replicas=_replicas(v, states, pools),
            signature=signature,
        )
        if affine and len(variant.replicas) > 1:
            variant.ring = Ring(variant.replicas)
        variant.reply_from, variant.reply_to = reply_prefixes(ep["name"], v["triton_model"], v["model_version"])
        variants.append(variant)
    return Endpoint(
        name=ep["name"],
        sticky_header=ep.get("sticky_header", "X-User-Id"),
        salt=ep.get("salt", ""),
        shadow_sample_rate=float(ep.get("shadow_sample_rate", 0)),
        timeout_s=timeout_ms / 1000.0,
        variants=variants,
        stable=next(v for v in variants if v.role == "stable"),
        live=[v for v in variants if v.role != "shadow" and v.weight_bp > 0],
        shadows=[v for v in variants if v.role == "shadow" and v.replicas],
        auth=compile_auth(ep.get("auth"), ep.get("team"), key_teams),
        min_timeout_s=ep.get("min_timeout_ms", timeout_ms) / 1000.0,
        experiment=ep.get("experiment", ""),
        exposure_token_key=bytes.fromhex(ep.get("exposure_token_key", "")),
        exposure_token_ttl_s=ep.get("exposure_token_ttl_s", DEFAULT_TOKEN_TTL_S),
        team=ep.get("team", ""),
        capture_share=float(ep.get("capture_share", 0.0)),
        affinity_input=ep.get("affinity_input", "user_id") if affine else "",
    )
