"""LLM routing decisions (gateway/llm/routing.py, table.py) and the per-entry checks of
`llm_endpoints` (route_checks.check): pure, table-tested."""

from __future__ import annotations

import json
import time
from collections import Counter
from types import SimpleNamespace

import pytest

from gateway.llm import routing
from gateway.table.checks import check
from gateway.table.llm import LlmReplica
from gateway.table.routes import compile_table

from .tables import table as tensor_table


def backend_doc(bid="b", urls=("http://r1:8000",), **extra):
    return {"id": bid, "kind": "triton", "urls": list(urls), "model": "m__v1__llm", **extra}


def llm_entry(name="chat", variants=None, **extra):
    variants = variants or [
        {"name": "stable", "model_version": "1", "role": "stable", "weight_bp": 9000, "backends": [backend_doc()]},
        {"name": "canary", "model_version": "2", "role": "canary", "weight_bp": 1000, "backends": [backend_doc("c")]},
    ]
    return {"name": name, "auth": {"public": True}, "variants": variants, **extra}


def document(*entries, secrets=(), endpoints=()):
    return {"version": "1", "endpoints": list(endpoints), "llm_endpoints": list(entries), "secrets": list(secrets)}


def replicas(*loads):
    out = []
    for i, load in enumerate(loads):
        r = LlmReplica(f"http://r{i}:8000", "m")
        r.tokens = load
        out.append(r)
    return SimpleNamespace(replicas=out)


def test_least_outstanding_tokens_without_affinity():
    backend = replicas(500, 20, 300)
    assert routing.pick(backend, None, 100, time.monotonic()) is backend.replicas[1]
    idle = replicas(0, 0, 0)
    assert len({routing.pick(idle, None, 1, time.monotonic()) for _ in range(6)}) == 3  # ties: round robin


def test_prefix_affinity_sticks_to_one_replica_and_spreads_prefixes():
    backend = replicas(0, 0, 0, 0)
    now = time.monotonic()
    chosen = {routing.pick(backend, b"You are a helpful assistant. Q1", 10, now) for _ in range(20)}
    assert len(chosen) == 1  # one prefix, one replica (its prefix cache)
    spread = Counter(routing.pick(backend, f"system prompt {i}".encode(), 10, now).base for i in range(400))
    assert len(spread) == 4 and min(spread.values()) > 60  # different prefixes use every replica


def test_bounded_load_leaves_the_prefix_replica_when_it_is_hot():
    backend = replicas(0, 0, 0)
    prefix = b"a shared system prompt"
    home = routing.pick(backend, prefix, 100, time.monotonic())
    home.tokens = 5000  # far above 1.25 x the mean
    moved = routing.pick(backend, prefix, 100, time.monotonic())
    assert moved is not home and moved.tokens == 0


def test_open_breakers_are_skipped_until_the_cooldown_then_one_probe():
    backend = replicas(0, 0)
    first, second = backend.replicas
    first.broken, first.open_until = True, time.monotonic() + 60
    assert {routing.pick(backend, p, 1, time.monotonic()) for p in (b"x", b"y", b"z", None)} == {second}
    second.broken, second.open_until = True, time.monotonic() + 60
    assert routing.pick(backend, None, 1, time.monotonic()) is None
    first.open_until = time.monotonic() - 1  # cooled down: half-open
    assert routing.pick(backend, None, 1, time.monotonic()) is first
    breakers = SimpleNamespace(cooldown_s=0.5, max_cooldown_s=8.0)
    routing.taken(first, 0.5)
    assert routing.pick(backend, None, 1, time.monotonic()) is None  # one probe at a time
    routing.failed(first, breakers)
    assert first.cooldown == 1.0 and first.broken
    routing.succeeded(second)
    assert not second.broken and second.failures == 0


def test_compiled_endpoint_tries_backends_by_priority_then_fallbacks():
    variants = [
        {
            "name": "stable",
            "model_version": "1",
            "role": "stable",
            "weight_bp": 10000,
            "backends": [
                backend_doc("late", priority=5),
                backend_doc("early", priority=1),
                backend_doc("tie", priority=5),
            ],
        }
    ]
    entry = llm_entry(variants=variants, fallbacks=[backend_doc("provider", kind="openai", urls=["https://p/v1"])])
    ep = compile_table(document(entry), {}).llm["chat"]
    assert [b.id for b in routing.chain(ep, ep.stable)] == ["early", "late", "tie", "provider"]


def test_split_and_sticky_assignment_are_the_tensor_endpoints():
    """One hashing for both kinds: the same names, salt and weights put a unit on the same arm."""
    tensor = compile_table(tensor_table((9000, 1000), salt="s"), {}).endpoints["ctr"]
    llm_doc = llm_entry("ctr", salt="s")
    llm = compile_table(document(llm_doc), {}).llm["ctr"]
    for unit in (f"user-{i}" for i in range(300)):
        assert llm.choose(unit).name == tensor.choose(unit).name
    shares = Counter(llm.choose().name for _ in range(10000))
    assert abs(shares["canary"] - 1000) <= 1  # the recurrence: within ~1 of the weight over any N


def refusals(doc) -> dict:
    return {(r.kind, r.name): r.code for r in check(doc).refusals}


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (lambda e: e["variants"][1].update(role="stable"), "stable_count"),
        (lambda e: e["variants"][1].update(weight_bp=500), "weights_sum"),
        (lambda e: e["variants"][1].update(name="stable"), "duplicate_variant_names"),
        (lambda e: e.update(auth={"keys": ["nobody"]}), "unknown_keys"),
        (lambda e: e["variants"][0]["backends"][0].update(secret="missing"), "unknown_secret"),
        (lambda e: e["variants"][0]["backends"].append(backend_doc()), "duplicate_backend_ids"),
        (lambda e: e["variants"][0]["backends"][0].update(urls=["https://me:pw@p.example/v1"]), "credentials_in_url"),
        (lambda e: e.update(colour="blue"), "invalid_entry"),
        (lambda e: e["variants"][0]["backends"][0].update(kind="grpc"), "invalid_entry"),
    ],
)
def test_a_bad_llm_entry_is_refused_alone(change, code):
    bad = llm_entry("bad")
    change(bad)
    doc = document(llm_entry("good"), bad)
    assert refusals(doc) == {("llm_endpoint", "bad"): code}
    table = compile_table(doc, {})
    assert set(table.llm) == {"good"} and "bad" in table.refused


def test_names_are_one_namespace_across_endpoints_and_llm_endpoints():
    tensor = tensor_table()["endpoints"][0] | {"name": "shared"}
    doc = document(llm_entry("shared"), llm_entry("other"), endpoints=[tensor])
    assert refusals(doc) == {
        ("endpoint", "shared"): "duplicate_endpoint",
        ("llm_endpoint", "shared"): "duplicate_endpoint",
    }


def test_secrets_are_checked_per_entry_and_never_quoted():
    leaked = "sk-this value has spaces"  # not a valid secret (printable ASCII without spaces)
    entry = llm_entry()
    entry["variants"][0]["backends"][0]["secret"] = "good"
    doc = document(
        entry,
        secrets=[{"id": "good", "value": "sk-fine", "origins": ["http://r1:8000"]}, {"id": "broken", "value": leaked}],
    )
    checked = check(doc)
    assert [(r.kind, r.name, r.code) for r in checked.refusals] == [("secret", "broken", "invalid_secret")]
    assert leaked not in json.dumps([r.as_dict() for r in checked.refusals])
    ep = compile_table(doc, {}).llm["chat"]
    assert "sk-fine" not in json.dumps(ep.describe()) and "sk-fine" not in repr(ep.stable.backends)
    duplicated = document(
        secrets=[
            {"id": "s", "value": "a", "origins": ["https://p"]},
            {"id": "s", "value": "b", "origins": ["https://p"]},
        ]
    )
    assert refusals(duplicated) == {("secret", "s"): "duplicate_secret"}


def test_a_backend_quoting_its_secret_is_redacted():
    from gateway.llm.backends import redact

    assert (
        redact("Incorrect API key provided: sk-live-123", "Bearer sk-live-123")
        == "Incorrect API key provided: [secret]"
    )
    assert redact("plain", None) == "plain"
