"""The `modelplane` command: global options, the command groups, and how errors end a run
(a message naming what is wrong, and an exit code from modelplane_cli.exits)."""

from __future__ import annotations

import json
import signal

import click

from modelplane_cli import __version__, exits
from modelplane_cli.exits import CliError
from modelplane_cli.state import State


def report(error: CliError, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(error.as_dict()), err=True)
        return
    where = f" (HTTP {error.status}{', ' + error.api_code if error.api_code else ''})" if error.status else ""
    click.echo(f"error: {error.message}{where}", err=True)
    first = error.message.split(":", 1)[0]
    for field, messages in error.errors.items():
        for message in messages if isinstance(messages, list) else [messages]:
            if field != first and field != "non_field_errors" and str(message) not in error.message:
                click.echo(f"  {field}: {message}", err=True)


class Root(click.Group):
    aliases: dict[str, str] = {}  # `keys` → `key`, `experiments` → `experiment` (hidden from --help)

    def get_command(self, ctx, cmd_name):
        return super().get_command(ctx, self.aliases.get(cmd_name, cmd_name))

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        return (command.name if command else name), command, rest

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except CliError as error:
            state = ctx.find_object(State)
            if state is not None:
                state.out.clear_status()
            report(error, bool(state and state.as_json))
            ctx.exit(error.exit_code)
        except KeyboardInterrupt:
            click.echo("\ninterrupted: stopped waiting (the server carries on)", err=True)
            ctx.exit(exits.INTERRUPTED)


@click.group(cls=Root, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="modelplane")
@click.option("--url", envvar=None, help="Server base URL (else MODELPLANE_URL, else the stored login).")
@click.option("--token", envvar=None, help="API token (else MODELPLANE_TOKEN, else the stored login).")
@click.option(
    "--http-timeout",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds to wait for each HTTP answer.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine output: the API's JSON on stdout.")
@click.option("--field", metavar="PATH", help="Print one field of the JSON result (e.g. id, artifacts.0.id).")
@click.pass_context
def cli(ctx, url, token, http_timeout, as_json, field):
    """modelplane: models, builds, endpoints and rollouts from a shell or a CI job.

    Exit codes: 0 ok, 1 unexpected answer, 2 usage, 3 auth, 4 API refused the request,
    5 network/5xx, 6 wait timed out, 10 build failed, 11 rollout rolled back by the judge,
    12 rollout failed, 13 rollout paused, 14 rollout rolled back by a person (abort),
    15 experiment ended without shipping, 130 interrupted.
    """
    ctx.obj = State(url=url, token=token, http_timeout=http_timeout, as_json=as_json, field=field)


from modelplane_cli.commands import (  # noqa: E402  (they use State)
    auth,
    builds,
    datasets,
    deploy,
    experiments,
    feedback,
    keys,
    models,
    releases,
    rollouts,
)

for group in (
    *auth.COMMANDS,
    *models.COMMANDS,
    *builds.COMMANDS,
    *deploy.COMMANDS,
    *rollouts.COMMANDS,
    *releases.COMMANDS,
    *keys.COMMANDS,
    *experiments.COMMANDS,
    *feedback.COMMANDS,
    *datasets.COMMANDS,
):
    cli.add_command(group)
Root.aliases = {**keys.ALIASES, **experiments.ALIASES, **datasets.ALIASES}


def main() -> None:
    # Ctrl-C stops a wait or a watch (exit 130) even when the parent started us with SIGINT
    # ignored (an ignored signal stays ignored across exec, and Python then leaves it so).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    cli.main(prog_name="modelplane")
