"""Inference keys (what clients send to the gateway): list, get, create (the secret is
printed once), revoke. `modelplane keys …` is the same group."""

from __future__ import annotations

import click

from modelplane_cli import exits
from modelplane_cli.commands.common import list_options, show_page
from modelplane_cli.exits import CliError
from modelplane_cli.output import fields, when
from modelplane_cli.state import json_option, pass_state

KEY_COLUMNS = [
    ("id", "id"),
    ("name", "name"),
    ("team", "team"),
    ("prefix", "prefix"),
    ("endpoints", "endpoints"),
    ("rate/s", "rate_per_s"),
    ("burst", "burst"),
    ("concurrency", "max_concurrency"),
    ("active", "active"),
    ("created", "created_at"),
]


def limit(kind):
    """A limit option's value: a number, or `none` for no limit (the API's null)."""

    def convert(ctx, param, value):
        if value is None:
            return None
        if value.strip().lower() in ("none", "no", "unlimited"):
            return "none"
        try:
            number = kind(value)
        except ValueError:
            raise click.BadParameter(f"give a number or `none` (got {value!r})") from None
        if number < 0 or number != number:
            raise click.BadParameter(f"give a number of at least 0 or `none` (got {value!r})")
        return number

    return convert


@click.group()
def key():
    """Inference keys of your teams: what clients send to the gateway (Authorization: Bearer)."""


@key.command("list")
@click.option("--team", help="Keys of this team.")
@click.option("--active/--revoked", "active", default=None, help="Only active (or only revoked) keys.")
@click.option("--search", help="Part of a name or a prefix.")
@list_options
@json_option
@pass_state
def key_list(state, team, active, search, page, page_size, everything):
    """Keys of your teams, newest first (display prefix only: a secret is never shown again)."""
    body = state.api.page(
        "inference-keys/",
        everything=everything,
        team=team,
        active=None if active is None else str(active).lower(),
        search=search,
        page=page,
        page_size=page_size,
    )
    show_page(state, body, KEY_COLUMNS, empty="No keys.")


@key.command("get")
@click.argument("key_id", type=int)
@json_option
@pass_state
def key_get(state, key_id):
    """One key: scope, limits, who made and revoked it."""
    state.out.result(state.api.get(f"inference-keys/{key_id}/"), _key_text)


WINDOW_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _budgets(ctx, param, values) -> list[dict]:
    """--token-budget TOKENS/WINDOW as the API's {tokens, window_s} (the server checks the bounds)."""
    out = []
    for value in values:
        tokens, _, window = value.partition("/")
        unit = WINDOW_UNITS.get(window[-1:].lower()) if window[-1:].isalpha() else 1
        count = window[:-1] if window[-1:].isalpha() else window
        if unit is None or not tokens.isdigit() or not count.isdigit():
            raise click.BadParameter(f"{value!r}: give TOKENS/WINDOW, e.g. 100000/1h or 5000000/30d")
        out.append({"tokens": int(tokens), "window_s": int(count) * unit})
    return out


@key.command("create")
@click.argument("name")
@click.option("--team", required=True, help="One of your teams (you need the deployer role in it).")
@click.option(
    "--endpoint",
    "endpoints",
    multiple=True,
    help="An endpoint it may call (repeat); default: every endpoint of the team, also later ones.",
)
@click.option("--rate-per-s", callback=limit(float), help="Requests per second (default 100; `none`: no limit).")
@click.option("--burst", callback=limit(float), help="Token-bucket size (default twice the rate; `none`).")
@click.option(
    "--max-concurrency", callback=limit(int), help="Requests in flight at once (default 64; `none`: no limit)."
)
@click.option("--tokens-per-minute", type=int, help="LLM tokens (prompt + completion) per minute (default: no limit).")
@click.option("--max-streams", type=int, help="LLM requests in flight at once (default: no limit).")
@click.option(
    "--token-budget",
    "token_budgets",
    multiple=True,
    callback=_budgets,
    help="An LLM token budget TOKENS/WINDOW, the window in s, m, h or d, a second to a month "
    "(e.g. 5000000/30d; repeat for several windows).",
)
@json_option
@pass_state
def key_create(
    state, name, team, endpoints, rate_per_s, burst, max_concurrency, tokens_per_minute, max_streams, token_budgets
):
    """Create a key and print its secret, once: store it now (it is kept only as a hash)."""
    body = {"team": team, "name": name}
    if endpoints:
        body["endpoints"] = list(endpoints)
    for field, value in (("rate_per_s", rate_per_s), ("burst", burst), ("max_concurrency", max_concurrency)):
        if value is not None:
            body[field] = None if value == "none" else value
    for field, value in (("tokens_per_minute", tokens_per_minute), ("max_streams", max_streams)):
        if value is not None:
            body[field] = value
    if token_budgets:
        body["token_budgets"] = token_budgets
    created = state.api.post("inference-keys/", body)
    if not created.get("secret"):
        raise CliError(exits.ERROR, "the server's answer had no secret")
    state.out.note(
        f"Key {created['id']} ({created['gateway_id']}, prefix {created['prefix']}) for team {created['team']}: "
        "the secret below is shown this once; send it as `Authorization: Bearer <secret>`."
    )
    state.out.result(created, lambda k: k["secret"])


@key.command("revoke")
@click.argument("key_id", type=int)
@click.option("--reason", default="", help="Recorded in the audit trail.")
@json_option
@pass_state
def key_revoke(state, key_id, reason):
    """Revoke a key: the gateway refuses it (401) from its next route-table poll. Final and idempotent."""
    done = state.api.post(f"inference-keys/{key_id}/revoke/", {"reason": reason} if reason else {})
    state.out.result(
        done, lambda k: f"Key {k['id']} ({k['name']}, prefix {k['prefix']}) revoked at {when(k['revoked_at'])}."
    )


def _key_text(k: dict) -> str:
    return fields(
        [
            ("key", f"{k.get('id')} ({k.get('gateway_id')})"),
            ("name", k.get("name")),
            ("team", k.get("team")),
            ("prefix", k.get("prefix")),
            ("endpoints", k.get("endpoints")),
            ("rate per s", "no limit" if k.get("rate_per_s") is None else k.get("rate_per_s")),
            ("burst", "no limit" if k.get("burst") is None else k.get("burst")),
            ("max concurrency", "no limit" if k.get("max_concurrency") is None else k.get("max_concurrency")),
            ("active", k.get("active")),
            ("created", f"{when(k.get('created_at'))} by {k.get('created_by')}"),
            ("revoked", f"{when(k.get('revoked_at'))} by {k.get('revoked_by')}" if k.get("revoked_at") else ""),
        ]
    )


COMMANDS = [key]
ALIASES = {"keys": "key"}
