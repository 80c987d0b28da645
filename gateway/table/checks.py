"""Validation of the route table, per entry: JSON Schema (route_table.schema.json) plus
the semantic rules of docs/gateway.md "Route table".

The table is shared by every team, so a problem fails only its own entry (STYLE.md
"Shared paths are guarded"): an endpoint entry that breaks a rule is refused (its traffic
gets 503 `endpoint_refused`, server.py) and a key that breaks one is left out, while every
other endpoint, key and access change of the same document is applied. Only a document
that is not a route table at all (not an object, no `version`, `endpoints` not a list,
an unknown top-level field) is refused as a whole: then the last good table stays.

`check` says what to refuse; `validate` is the strict form (any refusal raises) for
tests and tools that want a document to be wholly valid.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

import jsonschema

from gateway.contracts import ROUTE_TABLE_SCHEMA
from gateway.table.llm_checks import CODES as LLM_CODES
from gateway.table.llm_checks import llm_entry_problem, split_problem

SCHEMA_PATH = ROUTE_TABLE_SCHEMA

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # the schema's `name`

# Why an entry was refused: a bounded set (a metric label), each with its sentence in `reason`.
CODES = (
    "invalid_entry",  # the entry does not match the schema
    "duplicate_endpoint",  # two entries with one name: both refused (which one is meant is unknown)
    "unknown_keys",  # auth names keys the table does not define
    "timeout_order",  # min_timeout_ms above timeout_ms
    "grpc_replicas_mismatch",  # grpc_replicas not one per replica
    "invalid_signature",  # duplicate input names, or a batching model without a -1 batch dimension
    "duplicate_variant_names",
    "stable_count",  # not exactly one stable variant
    "weights_sum",  # live weights do not sum to 10000
    "shadow_weight",  # a shadow with a weight
    "invalid_key",  # a key that does not match the schema
    "duplicate_key",  # two keys with one id or one sha256: both left out
    "invalid_secret",  # a secret that does not match the schema (its value is never shown)
    "duplicate_secret",  # two secrets with one id: both left out
    *LLM_CODES,
)
ENTRY_LISTS = ("endpoints", "keys", "llm_endpoints", "secrets")  # checked per entry


class RouteTableError(ValueError):
    """The route table is not valid; the message says where and why."""


@dataclass(frozen=True)
class Refusal:
    """One part of the table the gateway did not apply: kind "endpoint" or "key", its name
    (an entry without a valid name: "endpoints/<index>"), a code of CODES and the sentence."""

    kind: str
    name: str
    code: str
    reason: str

    def as_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "code": self.code, "reason": self.reason}


@dataclass
class Checked:
    """What `check` found: the indexes of the entries and keys to apply, and the refusals."""

    endpoints: list[int]
    keys: list[int]
    refusals: list[Refusal]
    llm_endpoints: list[int] = None
    secrets: list[int] = None


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _schema_errors(document) -> tuple[list[str], dict[str, dict[int, str]]]:
    """(document-level errors, {list name: {entry index: first error}}) for the lists of ENTRY_LISTS.
    A secret's error never quotes the instance (it may be the value)."""
    top: list[str] = []
    per_list: dict[str, dict[int, str]] = {name: {} for name in ENTRY_LISTS}
    errors = sorted(_validator().iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path])
    for err in errors:
        path = list(err.absolute_path)
        where = "/".join(str(p) for p in path) or "(root)"
        if len(path) >= 2 and path[0] in per_list and isinstance(path[1], int):
            message = f"{where}: {err.message}"
            if path[0] == "secrets":
                message = f"{where}: does not match the schema ({err.validator}); the value is not shown"
            per_list[path[0]].setdefault(path[1], message)
        elif path and path[0] == "secrets":  # never quote what may be a secret's value
            top.append(f"{where}: does not match the schema ({err.validator})")
        else:
            top.append(f"{where}: {err.message}")
    return top, per_list


def _entry_name(entry, index: int) -> str:
    name = entry.get("name") if isinstance(entry, dict) else None
    return name if isinstance(name, str) and NAME_RE.fullmatch(name) else f"endpoints/{index}"


def _check_keys(keys: list, bad: dict[int, str], refusals: list[Refusal]) -> list[int]:
    """The indexes of the keys to apply; the others refused."""
    ids: dict[str, list[int]] = {}
    hashes: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        if i not in bad:
            ids.setdefault(key["id"], []).append(i)
            hashes.setdefault(key["sha256"].lower(), []).append(i)
    duplicated = {i for group in (*ids.values(), *hashes.values()) if len(group) > 1 for i in group}
    kept = []
    for i, key in enumerate(keys):
        if i in bad:
            name = key.get("id") if isinstance(key, dict) and isinstance(key.get("id"), str) else ""
            refusals.append(Refusal("key", name[:64] or f"keys/{i}", "invalid_key", bad[i]))
        elif i in duplicated:
            reason = f"keys/{i} ({key['id']}): another key has the same id or sha256; both are left out"
            refusals.append(Refusal("key", key["id"], "duplicate_key", reason))
        else:
            kept.append(i)
    return kept


def _signature_problem(signature: dict) -> str | None:
    names = [t["name"] for t in signature["inputs"]]
    if len(set(names)) != len(names):
        return f"signature has duplicate input names {names}"
    if signature.get("max_batch_size", 0) > 0:
        for t in signature["inputs"]:
            if not t["shape"] or t["shape"][0] != -1:
                return (
                    f"input {t['name']!r} of a batching model (max_batch_size > 0) needs -1 as its "
                    f"first (batch) dimension, got {t['shape']}"
                )
    return None


def _variants_problem(variants: list) -> tuple[str, str] | None:
    for v in variants:
        if "grpc_replicas" in v and len(v["grpc_replicas"]) != len(v["replicas"]):
            return "grpc_replicas_mismatch", (
                f"variant {v['name']!r}: grpc_replicas needs one entry per replica "
                f"({len(v['grpc_replicas'])} for {len(v['replicas'])})"
            )
        problem = _signature_problem(v["signature"]) if v.get("signature") is not None else None
        if problem:
            return "invalid_signature", f"variant {v['name']!r}: {problem}"
    return split_problem(variants)


def entry_problem(entry: dict, key_ids: set[str], left_out_keys: set[str]) -> tuple[str, str] | None:
    """(code, sentence) of the first semantic rule a schema-valid entry breaks, or None.
    Key ids of keys left out of the table (refused) are not a problem of the entry: they
    cannot authenticate, so naming them grants nothing."""
    unknown = [k for k in entry.get("auth", {}).get("keys", ()) if k not in key_ids and k not in left_out_keys]
    if unknown:
        return "unknown_keys", f"auth names keys that the table does not define: {unknown[:5]}"
    if entry.get("min_timeout_ms", 0) > entry.get("timeout_ms", 1000):
        return "timeout_order", (
            f"min_timeout_ms {entry['min_timeout_ms']} is above timeout_ms {entry.get('timeout_ms', 1000)}"
        )
    return _variants_problem(entry["variants"])


def _check_secrets(secrets: list, bad: dict[int, str], refusals: list[Refusal]) -> list[int]:
    ids: dict[str, list[int]] = {}
    for i, secret in enumerate(secrets):
        if i not in bad:
            ids.setdefault(secret["id"], []).append(i)
    kept = []
    for i, secret in enumerate(secrets):
        sid = secret.get("id") if isinstance(secret, dict) and isinstance(secret.get("id"), str) else ""
        if i in bad:
            name = sid[:64] if NAME_RE.fullmatch(sid or "") else f"secrets/{i}"
            refusals.append(Refusal("secret", name, "invalid_secret", bad[i]))
        elif len(ids[sid]) > 1:
            reason = f"secrets/{i} ({sid}): another secret has the same id; both are left out"
            refusals.append(Refusal("secret", sid, "duplicate_secret", reason))
        else:
            kept.append(i)
    return kept


def check(document) -> Checked:
    """What to apply and what to refuse. Raises RouteTableError only for a document that is
    not a route table (then nothing of it can be trusted). Tensor endpoints and LLM endpoints
    share one namespace: a name used in both lists refuses every entry that has it."""
    if not isinstance(document, dict):
        raise RouteTableError(f"(root): the route table must be a JSON object, not {type(document).__name__}")
    top, bad = _schema_errors(document)
    if top:
        raise RouteTableError(top[0])
    refusals: list[Refusal] = []
    keys = document.get("keys", [])
    kept_keys = _check_keys(keys, bad["keys"], refusals)
    key_ids = {keys[i]["id"] for i in kept_keys}
    left_out = {r.name for r in refusals} - key_ids
    secrets = document.get("secrets", [])
    kept_secrets = _check_secrets(secrets, bad["secrets"], refusals)
    secret_origins = {secrets[i]["id"]: set(secrets[i]["origins"]) for i in kept_secrets}
    lists = (("endpoints", "endpoint"), ("llm_endpoints", "llm_endpoint"))
    counts: dict[str, int] = {}
    for list_name, _ in lists:
        for i, entry in enumerate(document.get(list_name, [])):
            if i not in bad[list_name]:
                counts[entry["name"]] = counts.get(entry["name"], 0) + 1
    kept: dict[str, list[int]] = {}
    for list_name, kind in lists:
        kept[list_name] = []
        for i, entry in enumerate(document.get(list_name, [])):
            name = (
                _entry_name(entry, i)
                if list_name == "endpoints"
                else _entry_name(entry, i).replace("endpoints/", "llm_endpoints/")
            )
            if i in bad[list_name]:
                problem = ("invalid_entry", bad[list_name][i])
            elif counts[entry["name"]] > 1:
                problem = (
                    "duplicate_endpoint",
                    f"duplicate endpoint name: {counts[name]} entries (endpoints and llm_endpoints) are named "
                    f"{name!r}, all refused",
                )
            elif list_name == "endpoints":
                problem = entry_problem(entry, key_ids, left_out)
            else:
                problem = llm_entry_problem(entry, key_ids, left_out, secret_origins)
            if problem is None:
                kept[list_name].append(i)
            else:
                refusals.append(Refusal(kind, name, problem[0], f"{list_name}/{i} ({name}): {problem[1]}"))
    return Checked(
        endpoints=kept["endpoints"],
        keys=kept_keys,
        refusals=refusals,
        llm_endpoints=kept["llm_endpoints"],
        secrets=kept_secrets,
    )


def validate(document) -> None:
    """Raise RouteTableError naming the first problem anywhere in the document (strict:
    what the control plane sends must pass this; see tests/gateway/test_route_contract.py)."""
    checked = check(document)
    if checked.refusals:
        raise RouteTableError(checked.refusals[0].reason)
