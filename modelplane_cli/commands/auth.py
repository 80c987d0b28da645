"""login, logout, whoami."""

from __future__ import annotations

import sys

import click

from modelplane_cli import config, exits
from modelplane_cli.client import Api
from modelplane_cli.exits import CliError
from modelplane_cli.output import table
from modelplane_cli.state import json_option, pass_state


@click.command()
@click.option(
    "--url",
    "login_url",
    help="Server base URL, e.g. http://127.0.0.1:8000 (default: the global --url or MODELPLANE_URL).",
)
@click.option(
    "--token",
    "login_token",
    help="API token (manage.py drf_create_token USER). Without it: read from stdin, or asked for.",
)
@json_option
@pass_state
def login(state, login_url, login_token):
    """Check a token against the server and store both in ~/.config/modelplane/ (0600)."""
    import os

    url = login_url or state.url or os.environ.get("MODELPLANE_URL")
    if not url:
        raise CliError(exits.USAGE, "login: give --url (the server's base URL).")
    url = config.normalize_url(url)
    token = (login_token or state.token or os.environ.get("MODELPLANE_TOKEN") or "").strip()
    if not token:
        token = _read_token()
    api = Api(url, token, timeout=state.http_timeout)
    teams = api.page("teams/", everything=True)["results"]  # 401 here: nothing is stored
    path = config.write_file({"url": url, "token": token})
    if url.startswith("http://") and not config.is_local(url):
        state.out.note(f"warning: {url} is plain HTTP; the token travels in clear text (use https://)")
    state.out.result(
        {"url": url, "config": str(path), "teams": teams},
        lambda data: (
            f"Logged in to {url} (saved in {path}).\n"
            + (table(teams, [("team", "name"), ("role", "role")]) if teams else "You belong to no team yet.")
        ),
    )


def _read_token() -> str:
    if sys.stdin.isatty():
        token = click.prompt("Token", hide_input=True).strip()
    else:
        token = sys.stdin.readline().strip()  # CI: `echo "$TOKEN" | modelplane login --url …` keeps it out of `ps`
    if not token:
        raise CliError(exits.USAGE, "login: no token given (--token, stdin, or the prompt).")
    return token


@click.command()
@json_option
@pass_state
def logout(state):
    """Forget the stored token (the URL stays)."""
    stored, _ = config.read_file()
    had = bool(stored.pop("token", None))
    path = config.write_file(stored) if stored or config.config_path().exists() else config.config_path()
    state.out.result({"logged_out": had, "config": str(path)}, "Token removed." if had else "No stored token.")


@click.command()
@json_option
@pass_state
def whoami(state):
    """The server, where the token comes from, and your teams with your role in each."""
    settings, _ = config.resolve(url=state.url, token=state.token)
    teams = state.api.page("teams/", everything=True)["results"]
    data = {"url": settings.url, "url_from": settings.url_from, "token_from": settings.token_from, "teams": teams}
    state.out.result(
        data,
        lambda d: (
            f"server: {d['url']} (from {d['url_from']})\ntoken:  from {d['token_from']}\n"
            + table(teams, [("team", "name"), ("role", "role")], empty="You belong to no team yet.")
        ),
    )


COMMANDS = [login, logout, whoami]
