"""LLM endpoints of the route table compiled into what the request path uses: endpoint
(auth, split, limits of a request), variants with their backends in priority order, each
backend's replicas (one per URL) with a breaker and outstanding-token count kept across
reloads, and the endpoint's fallbacks.

Roles: stable, canary, baseline and arm are split by weight exactly as tensor endpoints
(gateway/table/split.py: the same sticky hashing); a shadow variant is listed (in /status) but not
called: a copy of a generation costs a backend as much as the request itself, and its
tokens could not be compared with the served ones token for token.

A secret's value lives only in its backend's `authorization` header bytes: never in a
repr, a log line, a metric or /status (`describe` names the secret's id only); with it the
backend keeps the origins the secret is bound to (`secret_origins`), checked again before
each send. A replica's URL is parsed once here (`url`, yarl): the request's URL is built from
its parts and the route appended as path segments, so no character of the base can turn the
route into a query or move the request elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from yarl import URL

from gateway.contracts.feedback_rules import DEFAULT_TOKEN_TTL_S
from gateway.contracts.outbound_rules import origin_of
from gateway.keys.tenants import EndpointAuth, compile_auth
from gateway.table.split import Split


class LlmReplica:
    """One URL of one backend model: breaker state (the fields gateway/breaker.Breakers
    reads) and the load it carries (requests and tokens outstanding)."""

    __slots__ = (
        "base",
        "url",
        "origin",
        "model",
        "failures",
        "broken",
        "refused",
        "open_until",
        "cooldown",
        "outstanding",
        "tokens",
    )

    def __init__(self, base: str, model: str):
        self.base = base
        self.url = URL(base).with_query(None).with_fragment(None)  # the checks refused a query or fragment
        self.origin = origin_of(base)
        self.model = model
        self.failures = 0
        self.broken = False
        self.refused = False
        self.open_until = 0.0
        self.cooldown = 0.0
        self.outstanding = 0
        self.tokens = 0  # outstanding tokens: estimated prompt + max_tokens of requests in progress


class LlmBackend:
    __slots__ = (
        "id",
        "kind",
        "model",
        "secret",
        "authorization",
        "secret_origins",
        "priority",
        "connect_timeout_s",
        "cost_prompt",
        "cost_completion",
        "replicas",
    )

    def __init__(self, doc: dict, secrets: dict[str, tuple[str, frozenset]], states: dict):
        self.id = doc["id"]
        self.kind = doc["kind"]
        self.model = doc["model"]
        self.secret = doc.get("secret")  # the id, for /status
        value, origins = secrets[self.secret] if self.secret else (None, frozenset())
        self.authorization = f"Bearer {value}" if value else None
        self.secret_origins = origins
        self.priority = doc.get("priority", 0)
        self.connect_timeout_s = doc.get("connect_timeout_ms", 1000) / 1000.0
        self.cost_prompt = float(doc.get("cost_per_1k_prompt", 0)) / 1000.0
        self.cost_completion = float(doc.get("cost_per_1k_completion", 0)) / 1000.0
        self.replicas = []
        for url in doc["urls"]:
            base = url.rstrip("/")
            state = states.get((base, self.model))
            if state is None:
                state = states[(base, self.model)] = LlmReplica(base, self.model)
            self.replicas.append(state)

    def __repr__(self) -> str:  # never the authorization header
        return f"LlmBackend({self.id!r}, {self.kind}, {self.model!r})"

    def describe(self) -> dict:
        return {
            "id": self.id,
            "kind": self.kind,
            "model": self.model,
            "priority": self.priority,
            "secret": self.secret,  # the id only
            "replicas": {r.base: ("open" if r.broken else "closed") for r in self.replicas},
        }


@dataclass(eq=False)
class LlmVariant:
    name: str
    model_version: str
    role: str
    weight_bp: int
    backends: list[LlmBackend]  # by priority (lower first), then as listed


@dataclass(eq=False)
class LlmEndpoint(Split):
    name: str
    team: str  # "" when the table does not say (its anonymous callers then share the endpoint's buffer bound)
    auth: EndpointAuth
    sticky_header: str
    salt: str
    experiment: str
    exposure_token_key: bytes
    exposure_token_ttl_s: int
    timeout_s: float
    first_token_timeout_s: float
    context_length: int
    max_tokens_default: int
    prefix_affinity_chars: int
    variants: list[LlmVariant]
    fallbacks: list[LlmBackend]
    stable: LlmVariant = None
    live: list[LlmVariant] = field(default_factory=list)
    sticky_key: str = ""
    _bounds: list[float] = field(default_factory=list)
    _x: float = 0.0
    _hash_prefix: bytes = b""

    def __post_init__(self):
        self.sticky_key = self.sticky_header.lower()
        self.stable = next(v for v in self.variants if v.role == "stable")
        self.live = [v for v in self.variants if v.role != "shadow" and v.weight_bp > 0] or [self.stable]
        total = 0
        for variant in self.live:
            total += variant.weight_bp
            self._bounds.append(total)
        self._hash_prefix = f"{self.name}\x1f{self.salt}\x1f".encode()

    def describe(self) -> dict:
        """/status: no secret value, no key."""
        return {
            "kind": "llm",
            "public": self.auth.public,
            "context_length": self.context_length,
            "variants": {
                v.name: {"role": v.role, "weight_bp": v.weight_bp, "backends": [b.describe() for b in v.backends]}
                for v in self.variants
            },
            "fallbacks": [b.describe() for b in self.fallbacks],
        }


def _backends(docs: list, secrets: dict, states: dict) -> list[LlmBackend]:
    backends = [LlmBackend(doc, secrets, states) for doc in docs]
    return sorted(backends, key=lambda b: b.priority)  # stable sort: ties keep the listed order


def compile_llm_endpoint(doc: dict, secrets: dict, states: dict, first_token_max_ms: int = 60_000) -> LlmEndpoint:
    variants = [
        LlmVariant(v["name"], v["model_version"], v["role"], v["weight_bp"], _backends(v["backends"], secrets, states))
        for v in doc["variants"]
    ]
    return LlmEndpoint(
        name=doc["name"],
        team=doc.get("team", ""),
        auth=compile_auth(doc.get("auth")),
        sticky_header=doc.get("sticky_header", "X-Session-Id"),
        salt=doc.get("salt", ""),
        experiment=doc.get("experiment", ""),
        exposure_token_key=bytes.fromhex(doc.get("exposure_token_key", "")),
        exposure_token_ttl_s=doc.get("exposure_token_ttl_s", DEFAULT_TOKEN_TTL_S),
        timeout_s=doc.get("timeout_ms", 120000) / 1000.0,
        # the operator's ceiling (llm_rules), whatever the entry says
        first_token_timeout_s=min(doc.get("first_token_timeout_ms", 30000), first_token_max_ms) / 1000.0,
        context_length=doc.get("context_length", 4096),
        max_tokens_default=doc.get("max_tokens_default", 256),
        prefix_affinity_chars=doc.get("prefix_affinity_chars", 256),
        variants=variants,
        fallbacks=_backends(doc.get("fallbacks", []), secrets, states),
    )


def compile_llm_endpoints(document: dict, indexes: list[int], secret_indexes: list[int], states: dict):
    """({name: LlmEndpoint}, [(index, name, exception)] of entries that failed to compile)."""
    secrets = {}
    for i in secret_indexes:
        doc = document["secrets"][i]
        secrets[doc["id"]] = (doc["value"], frozenset(doc["origins"]))
    first_token_max_ms = document.get("llm_rules", {}).get("first_token_timeout_max_ms", 60_000)
    out, failed = {}, []
    for index in indexes:
        doc = document["llm_endpoints"][index]
        try:
            out[doc["name"]] = compile_llm_endpoint(doc, secrets, states, first_token_max_ms)
        except (ValueError, TypeError, KeyError, StopIteration) as exc:  # a rule the checks missed: this entry only
            failed.append((index, doc["name"], f"{type(exc).__name__}"))
    return out, failed


def llm_replicas(ep: LlmEndpoint):
    """Every replica an endpoint may call (its variants' backends and its fallbacks)."""
    for backend in [*(b for v in ep.variants for b in v.backends), *ep.fallbacks]:
        yield from backend.replicas
