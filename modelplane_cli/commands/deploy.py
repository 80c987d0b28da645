"""Serving pools (list, get, create) and endpoints (list, get, create, update)."""

from __future__ import annotations

import click

from modelplane_cli.commands.common import ID_OR_MODEL_URI, list_options, segment, show_page
from modelplane_cli.output import fields, table, when
from modelplane_cli.state import json_option, pass_state

POOL_COLUMNS = [
    ("name", "name"),
    ("team", "team"),
    ("driver", "driver"),
    ("device", "device_kind"),
    ("replicas", "replicas"),
    ("ready", "ready_replicas"),
    ("models", "model_count"),
    ("status", "status"),
]
ENDPOINT_COLUMNS = [
    ("name", "name"),
    ("team", "team"),
    ("pool", "pool"),
    ("stable", "stable_variant"),
    ("artifact", "stable_artifact"),
    ("slo p99 ms", "slo_p99_ms"),
    ("slo errors", "slo_error_rate"),
]


@click.group()
def pool():
    """Serving pools (groups of identical Triton servers)."""


@pool.command("list")
@list_options
@json_option
@pass_state
def pool_list(state, page, page_size, everything):
    """Pools of your teams."""
    show_page(
        state,
        state.api.page("pools/", everything=everything, page=page, page_size=page_size),
        POOL_COLUMNS,
        empty="No pools.",
    )


@pool.command("get")
@click.argument("name")
@json_option
@pass_state
def pool_get(state, name):
    """A pool with its replicas and loaded models."""
    body = state.api.get(f"pools/{segment(name)}/")

    def human(p):
        text = fields(
            [(label, p.get(key)) for label, key in POOL_COLUMNS] + [("status reason", p.get("status_reason"))]
        )
        text += "\n\n" + table(
            p.get("replica_set") or [],
            [
                ("replica", "name"),
                ("status", "status"),
                ("http", "http_url"),
                ("restarts", "restarts"),
                ("last error", "last_error"),
            ],
            empty="No replicas.",
        )
        text += "\n\n" + table(
            p.get("models") or [],
            [("model", "triton_model_name"), ("artifact", "artifact"), ("state", "state"), ("error", "error")],
            empty="No models loaded.",
        )
        return text

    state.out.result(body, human)


@pool.command("create")
@click.argument("name")
@click.option("--team", required=True, help="Your team (you deploy in it).")
@click.option(
    "--driver", type=click.Choice(["local", "kubernetes"]), default="local", show_default=True, help="Where it runs."
)
@click.option("--replicas", type=int, help="Desired replicas (default 1).")
@click.option("--device-kind", help="cpu (default) or a GPU kind (kubernetes), e.g. nvidia-l4.")
@click.option("--model-repository", help="Kubernetes: s3://, gs://, as:// or pvc://CLAIM[/SUBPATH].")
@click.option(
    "--namespace", help="Kubernetes: one of your team's namespaces (default: the one the platform assigns your team)."
)
@click.option("--image", help="Kubernetes: a Triton image the operator allows (default the NVIDIA Triton release).")
@click.option("--repository-secret", help="Kubernetes: a Secret an admin bound to your team in that namespace.")
@click.option("--min-replicas", type=int, help="Kubernetes: the autoscaler's floor.")
@click.option("--max-replicas", type=int, help="Kubernetes: the autoscaler's ceiling.")
@json_option
@pass_state
def pool_create(state, name, **options):
    """Create a serving pool. What a Kubernetes pool declares (namespace, image, Secret) is
    checked against what the operator allowed your team: a refusal names the field and the rule."""
    body = {"name": name}
    body.update({key: value for key, value in options.items() if value is not None})
    created = state.api.post("pools/", body)

    def human(p):
        where = f" in namespace {p['namespace']}" if p.get("namespace") else ""
        return f"Created pool {p['name']} ({p['driver']}){where}.\n" + fields(
            [(label, p.get(key)) for label, key in POOL_COLUMNS] + [("image", p.get("image"))]
        )

    state.out.result(created, human)


@click.group()
def endpoint():
    """Endpoints: what clients call on the gateway (a pool, a stable artifact, SLOs)."""


@endpoint.command("list")
@list_options
@json_option
@pass_state
def endpoint_list(state, page, page_size, everything):
    """Endpoints of your teams."""
    show_page(
        state,
        state.api.page("endpoints/", everything=everything, page=page, page_size=page_size),
        ENDPOINT_COLUMNS,
        empty="No endpoints.",
    )


@endpoint.command("get")
@click.argument("name")
@json_option
@pass_state
def endpoint_get(state, name):
    """One endpoint."""
    state.out.result(state.api.get(f"endpoints/{segment(name)}/"), _endpoint_text)


@endpoint.command("create")
@click.argument("name")
@click.option("--pool", "pool_name", required=True, help="A serving pool of your team.")
@click.option(
    "--stable-artifact",
    type=ID_OR_MODEL_URI,
    required=True,
    help="The servable artifact to serve: its id (`modelplane artifact list VERSION_ID`) or a model URI "
    "(models:/ctr@champion, models:/ctr/3).",
)
@click.option("--stable-variant", default=None, help="With a model URI: which variant (e.g. onnx-fp32).")
@click.option("--slo-p99-ms", type=float, help="p99 latency objective in ms (the judge's guardrail).")
@click.option("--slo-error-rate", type=float, help="Error-rate objective, a fraction (0.01 = 1 %).")
@click.option("--psi-threshold", type=float, help="Prediction-drift limit (PSI).")
@click.option("--latency-margin", type=float, help="How much slower than stable a candidate may be (0.2 = 20 %).")
@click.option("--sticky-header", help="Header that pins a client to one A/B arm (default X-User-Id).")
@click.option("--timeout-ms", type=int, help="Gateway timeout per request.")
@click.option(
    "--kind",
    type=click.Choice(["tensor", "llm"]),
    default=None,
    help="tensor (KServe v2, the default) or llm (the OpenAI API; its stable an LLM version's artifact).",
)
@click.option("--public", is_flag=True, default=None, help="Callable without an inference key.")
@json_option
@pass_state
def endpoint_create(state, name, pool_name, stable_artifact, **options):
    """Create an endpoint on a pool serving a stable artifact (the pool loads it)."""
    body = {"name": name, "pool": pool_name, "stable_artifact": stable_artifact}
    body.update({key: value for key, value in options.items() if value is not None})
    created = state.api.post("endpoints/", body)
    state.out.result(created, lambda e: f"Created endpoint {e['name']} on pool {e['pool']}.\n" + _endpoint_text(e))


class MarginType(click.ParamType):
    """A latency margin: a fraction (0.2 = 20 %), or `derived` (the default: from the p99 SLO's
    headroom, 10-30 %), sent as null."""

    name = "FRACTION|derived"

    def convert(self, value, param, ctx):
        if value is None or value == "derived":
            return value
        try:
            return float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is neither a fraction (e.g. 0.2) nor 'derived'", param, ctx)


@endpoint.command("update")
@click.argument("name")
@click.option("--slo-p99-ms", type=float, help="p99 latency objective in ms (the judge's guardrail).")
@click.option("--slo-error-rate", type=float, help="Error-rate objective, a fraction (0.01 = 1 %).")
@click.option("--psi-threshold", type=float, help="Prediction-drift limit (PSI).")
@click.option(
    "--latency-margin",
    type=MarginType(),
    help="How much slower than its control a candidate may be (0.2 = 20 %); 'derived': back to the default, "
    "derived from the p99 SLO's headroom (10-30 %).",
)
@click.option(
    "--on-inconclusive",
    type=click.Choice(["rollback", "pause", "promote"]),
    help="When a step's deadline passes undecided.",
)
@click.option("--sticky-header", help="Header that pins a client to one A/B arm.")
@click.option("--timeout-ms", type=int, help="Gateway timeout per request.")
@click.option("--public/--keys-only", default=None, help="Callable without an inference key, or only with one.")
@json_option
@pass_state
def endpoint_update(state, name, **options):
    """Change an endpoint's SLOs, judge settings, timeout or who may call it (its stable
    changes only by rollout)."""
    body = {key: value for key, value in options.items() if value is not None}
    if body.get("latency_margin") == "derived":
        body["latency_margin"] = None
    if not body:
        raise click.UsageError("nothing to change: give at least one option (see --help)")
    updated = state.api.request("PATCH", f"endpoints/{segment(name)}/", json=body)
    state.out.result(updated, lambda e: f"Updated endpoint {e['name']}.\n" + _endpoint_text(e))


def _endpoint_text(e: dict) -> str:
    return fields(
        [
            ("name", e.get("name")),
            ("team", e.get("team")),
            ("pool", e.get("pool")),
            ("stable", f"{e.get('stable_variant')} (artifact {e.get('stable_artifact')})"),
            ("slo p99 ms", e.get("slo_p99_ms")),
            ("slo error rate", e.get("slo_error_rate")),
            ("psi threshold", e.get("psi_threshold")),
            ("latency margin", "derived from the SLO" if e.get("latency_margin") is None else e["latency_margin"]),
            ("sticky header", e.get("sticky_header")),
            ("timeout ms", e.get("timeout_ms")),
            ("created", when(e.get("created_at"))),
        ]
    )


COMMANDS = [pool, endpoint]
