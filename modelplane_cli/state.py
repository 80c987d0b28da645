"""What every command shares: the global options, the API client (built on first use),
the output, and the `--json` option each command carries."""

from __future__ import annotations

import click

from modelplane_cli.client import Api
from modelplane_cli.config import resolve
from modelplane_cli.output import Output


class State:
    """What every command shares: the global options, the API client, the output."""

    def __init__(
        self, *, url: str | None, token: str | None, http_timeout: float, as_json: bool, field: str | None = None
    ):
        self.url, self.token, self.http_timeout, self.as_json, self.field = url, token, http_timeout, as_json, field
        self._api = None
        self._out = None

    @property
    def api(self) -> Api:
        if self._api is None:
            settings, warnings = resolve(url=self.url, token=self.token)
            for warning in warnings:
                click.echo(f"warning: {warning}", err=True)
            self._api = Api(settings.url, settings.token, timeout=self.http_timeout)
        return self._api

    @property
    def out(self) -> Output:
        if self._out is None:
            self._out = Output(as_json=self.as_json or bool(self.field), field=self.field)
        return self._out


pass_state = click.make_pass_decorator(State)


def json_option(command):
    """`--json` and `--field` on every command (the same as the global options)."""

    def remember(ctx, param, value):
        if value:
            setattr(ctx.find_object(State), param.name, value)

    command = click.option(
        "--field",
        "field",
        metavar="PATH",
        expose_value=False,
        callback=remember,
        help="Print one field of the JSON result (e.g. id, artifacts.0.id).",
    )(command)
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        expose_value=False,
        callback=remember,
        help="Print the API's JSON on stdout (progress goes to stderr).",
    )(command)
