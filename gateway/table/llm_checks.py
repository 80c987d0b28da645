"""The semantic rules of one `llm_endpoints` entry (after its JSON Schema check), applied per
entry by table/checks.check like an endpoint entry's: a broken entry is refused with a code
(its traffic gets 503 `endpoint_refused` in the OpenAI error shape), the others are served.

Pure: no I/O, no state. Secrets are named by id only: no message here carries a value.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from gateway.contracts.outbound_rules import Rule, origin_of, url_refusal
from gateway.table.split import BP

CODES = (
    "unknown_secret",  # a backend names a secret the table does not carry (or one it refused)
    "duplicate_backend_ids",  # two backends of one entry with one id (metric labels, fallback reports)
    "credentials_in_url",  # a backend URL with user:password@ (shown in /status and metrics): use a secret
    "rewritable_url",  # a backend URL whose query, fragment or odd characters could change the request sent
    "secret_origin",  # a backend names a secret at an origin the secret is not bound to
)


def split_problem(variants: list) -> tuple[str, str] | None:
    """(code, sentence) of the first split rule `variants` break (tensor and LLM entries alike:
    unique names, one stable, live weights summing to BP, shadows weightless), or None."""
    names = [v["name"] for v in variants]
    if len(set(names)) != len(names):
        return "duplicate_variant_names", f"duplicate variant names {names}"
    stables = sum(1 for v in variants if v["role"] == "stable")
    if stables != 1:
        return "stable_count", f"needs exactly one variant with role 'stable', found {stables}"
    total = sum(v["weight_bp"] for v in variants if v["role"] != "shadow")
    if total != BP:
        return "weights_sum", f"weights of non-shadow variants sum to {total} basis points, not {BP}"
    for v in variants:
        if v["role"] == "shadow" and v["weight_bp"] != 0:
            return "shadow_weight", f"shadow variant {v['name']!r} must have weight_bp 0"
    return None


def llm_entry_problem(entry: dict, key_ids: set[str], left_out_keys: set[str], secret_origins: dict[str, set]):
    """(code, sentence) of the first rule a schema-valid llm_endpoints entry breaks, or None.
    `secret_origins`: {secret id: the origins it may be sent to} of the secrets the table carries."""
    unknown = [k for k in entry.get("auth", {}).get("keys", ()) if k not in key_ids and k not in left_out_keys]
    if unknown:
        return "unknown_keys", f"auth names keys that the table does not define: {unknown[:5]}"
    variants = entry["variants"]
    problem = split_problem(variants)
    if problem is not None:
        return problem
    backends = [b for v in variants for b in v["backends"]] + list(entry.get("fallbacks", ()))
    for backend in backends:
        secret = backend.get("secret")
        if secret is not None and secret not in secret_origins:
            return (
                "unknown_secret",
                f"backend {backend['id']!r} names secret {secret!r}, which the table does not carry",
            )
    for backend in backends:
        problem = _url_problem(backend, secret_origins)
        if problem is not None:
            return problem
    for v in variants:
        ids = [b["id"] for b in v["backends"]]
        if len(set(ids)) != len(ids):
            return "duplicate_backend_ids", f"variant {v['name']!r} has duplicate backend ids {ids}"
    ids = [b["id"] for b in entry.get("fallbacks", ())]
    if len(set(ids)) != len(ids):
        return "duplicate_backend_ids", f"fallbacks have duplicate backend ids {ids}"
    return None


def _url_problem(backend: dict, secret_origins: dict[str, set]):
    secret = backend.get("secret")
    for url in backend["urls"]:
        if "@" in urlsplit(url).netloc:
            return "credentials_in_url", (
                f"backend {backend['id']!r} has credentials in a URL (shown in /status and metrics): "
                "name a secret instead"
            )
        refusal = url_refusal(url, fixed=True)
        if refusal is not None and refusal.rule != Rule.USERINFO:
            return "rewritable_url", f"backend {backend['id']!r}: {refusal.sentence}"
        if secret is not None and origin_of(url) not in secret_origins[secret]:
            return "secret_origin", (
                f"backend {backend['id']!r} names secret {secret!r} at {origin_of(url)}, an origin the secret "
                "is not bound to"
            )
    return None
