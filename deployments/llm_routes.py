"""The LLM side of the route table (deployments/routes.py assembles it): an LLM endpoint's
variants with their backends and its fallbacks (gateway/contracts/route_table.schema.json,
`llm_endpoint`, `llm_variant`, `llm_backend`), and the provider secrets they name.

A variant's backend is its artifact's: `llm` (a Triton generate model): kind triton, the
ready replicas of the endpoint's pool that have the model; `llm-backend` (a reference):
kind openai, the server's base URL and upstream model, its team secret by id (`s{pk}`).
A triton backend ready on no replica is no backend, and a variant without one makes the
entry fail (routes.py then serves the stable alone, or leaves the endpoint out, and says
why); a fallback that is not ready is skipped, the others kept. Prices per 1k tokens come
from the version's LLMSpec. A backend naming a secret at an origin the secret is not bound to
fails its entry here too (the gateway would refuse it): the secret never travels there.

`rules_document` is the table's `llm_rules`: the outbound guard's settings (allowed networks
and hosts, the platform's listeners), the hop mark the gateway sends upstream and refuses
when it comes back, and the first-token timeout's ceiling, so the gateway applies at every
connection what kernel/outbound.py applied at registration.
"""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings

from kernel.conf import setting
from kernel.outbound import origin_of, platform_listener_entries
from registry import secret_box
from registry.names import LLM_BACKEND_VARIANT, variant_name

DEFAULT_CONNECT_TIMEOUT_MS = 1000


def first_token_timeout_max_ms() -> int:
    """LLM_FIRST_TOKEN_TIMEOUT_MAX_MS: the ceiling of an endpoint's first_token_timeout_ms."""
    return int(setting("LLM_FIRST_TOKEN_TIMEOUT_MAX_MS"))


def hop_mark() -> str:
    """This installation's mark on what its gateways send upstream (stable: derived from SECRET_KEY)."""
    return hmac.new(settings.SECRET_KEY.encode(), b"modelplane gateway hop", hashlib.sha256).hexdigest()[:24]


def rules_document() -> dict:
    return {
        "allowed_networks": [str(n) for n in setting("OUTBOUND_ALLOWED_NETWORKS")],
        "allowed_hosts": [h.lower().strip("[]") for h in setting("OUTBOUND_ALLOWED_HOSTS")],
        "platform_listeners": platform_listener_entries(),
        "hop_mark": hop_mark(),
        "first_token_timeout_max_ms": first_token_timeout_max_ms(),
    }


class LLMRouteError(Exception):
    """Why an LLM variant cannot be routed (a sentence for the endpoint page and the alert)."""


class BackendNotReady(LLMRouteError):
    """A variant's Triton model is ready on no replica (still loading, or failed to)."""

    def __init__(self, message: str, model_name: str):
        super().__init__(message)
        self.model_name = model_name


class LLMSources:
    """LLM specs and decrypted secrets, read once per table."""

    def __init__(self):
        self._specs: dict = {}
        self._secrets: dict = {}
        self.values: dict[str, str] = {}  # {route table id: value} of the secrets read
        self.origins: dict[str, list[str]] = {}  # {route table id: origins it may be sent to}

    def spec(self, artifact):
        from registry.selectors.llm import llm_spec_of

        if artifact.version_id not in self._specs:
            self._specs[artifact.version_id] = llm_spec_of(artifact)
        spec = self._specs[artifact.version_id]
        if spec is None:
            raise LLMRouteError(f"artifact {artifact.pk} ({variant_name(artifact)}) has no LLM spec")
        return spec

    def secret_value(self, secret) -> str:
        if secret.pk not in self._secrets:
            try:
                self._secrets[secret.pk] = secret_box.open_sealed(secret.ciphertext)
            except secret_box.SecretUnreadable as exc:
                raise LLMRouteError(f"provider secret {secret.name!r} (s{secret.pk}): {exc}") from None
            self.values[secret.gateway_id] = self._secrets[secret.pk]
            self.origins[secret.gateway_id] = list(secret.origins or [])
        return self._secrets[secret.pk]


def backend(
    artifact, *, model_name: str, urls: list[str], sources: LLMSources, priority: int, backend_id: str
) -> dict | None:
    """The artifact's backend, or None when a triton one is ready on no replica."""
    spec = sources.spec(artifact)
    doc = {"id": backend_id}
    if artifact.variant == LLM_BACKEND_VARIANT:
        doc.update(kind="openai", urls=[spec.base_url], model=spec.upstream_model)
        if spec.secret_id is not None:
            sources.secret_value(spec.secret)  # an unreadable secret fails this entry, here
            if origin_of(spec.base_url) not in (spec.secret.origins or []):
                raise LLMRouteError(
                    f"provider secret {spec.secret.name!r} (s{spec.secret_id}) is not bound to "
                    f"{origin_of(spec.base_url)}, the origin of {variant_name(artifact)}'s backend"
                )
            doc["secret"] = spec.secret.gateway_id
    else:
        if not urls:
            return None
        doc.update(kind="triton", urls=urls, model=model_name)
    doc.update(
        priority=priority,
        connect_timeout_ms=DEFAULT_CONNECT_TIMEOUT_MS,
        cost_per_1k_prompt=spec.cost_per_1k_prompt,
        cost_per_1k_completion=spec.cost_per_1k_completion,
    )
    return doc


def variant(
    artifact, role, weight_bp, *, model_name: str, urls: list[str], sources: LLMSources, name: str = ""
) -> dict:
    name = name or variant_name(artifact)
    found = backend(
        artifact,
        model_name=model_name,
        urls=urls,
        sources=sources,
        priority=0,
        backend_id=f"{artifact.version.model.name}-{name}",
    )
    if found is None:
        raise BackendNotReady(
            f"variant {name}: Triton model {model_name} is ready on no replica of its pool", model_name
        )
    return {
        "name": name,
        "model_version": str(artifact.version.version),
        "role": str(role),
        "weight_bp": int(weight_bp),
        "backends": [found],
    }


def fallbacks(artifacts: list, *, urls_of, model_name_of, sources: LLMSources) -> list[dict]:
    """The fallbacks in the endpoint's order (priority = position); one not ready is skipped."""
    out = []
    for position, artifact in enumerate(artifacts):
        name = model_name_of(artifact)
        found = backend(
            artifact,
            model_name=name,
            urls=urls_of(name),
            sources=sources,
            priority=position,
            backend_id=f"fallback-{artifact.version.model.name}-{variant_name(artifact)}",
        )
        if found is not None:
            out.append(found)
    return out


def secret_ids(entry: dict) -> set[str]:
    """The secret ids an llm_endpoint entry's backends name."""
    backends = [b for v in entry["variants"] for b in v["backends"]] + list(entry.get("fallbacks", ()))
    return {b["secret"] for b in backends if "secret" in b}
