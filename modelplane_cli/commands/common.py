"""Pieces the command modules share: list paging, KEY=VALUE options, URL segments."""

from __future__ import annotations

import math
from urllib.parse import quote

import click

from modelplane_cli import exits
from modelplane_cli.exits import CliError
from modelplane_cli.output import table


class IdOrModelUri(click.ParamType):
    """An id, or a model URI (`models:/ctr@champion`, `models:/ctr/3`) passed to the API as
    written: the server resolves it (deployments/selectors/artifact_refs.py) and says what is
    wrong with one it cannot."""

    name = "ID|models:/NAME@ALIAS"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if text.isdigit():
            return int(text)
        if text.startswith("models:/"):
            return text
        self.fail(f"give an id or a model URI (models:/NAME@ALIAS or models:/NAME/VERSION), not {text!r}", param, ctx)


ID_OR_MODEL_URI = IdOrModelUri()


def list_options(command):
    """--page, --page-size, --all for list commands."""
    command = click.option("--all", "everything", is_flag=True, help="Follow every page.")(command)
    command = click.option("--page-size", type=click.IntRange(1, 500), default=50, show_default=True)(command)
    return click.option("--page", type=click.IntRange(min=1), default=None, help="Page number.")(command)


def show_page(state, page: dict, columns, *, empty: str = "(none)") -> None:
    def human(data):
        text = table(data["results"], columns, empty=empty)
        shown, total = len(data["results"]), data.get("count", len(data["results"]))
        if data.get("next"):
            text += f"\n({shown} of {total} shown: --page N or --all for the rest)"
        return text

    state.out.result(page, human)


def key_values(text_pairs: tuple[str, ...], option: str, *, numbers: bool) -> dict:
    """KEY=VALUE options into a dict; values are numbers where they parse (for metrics)."""
    result = {}
    for pair in text_pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(exits.USAGE, f"{option}: give KEY=VALUE (got {pair!r}).")
        value = value.strip()
        if numbers:
            result[key.strip()] = _number(value, f"{option} {key.strip()}")
            continue
        result[key.strip()] = value
    return result


def _number(text: str, what: str):
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise CliError(exits.USAGE, f"{what}: must be a number (got {text!r}).") from None
    if not math.isfinite(value):
        raise CliError(exits.USAGE, f"{what}: must be a finite number (got {text!r}).")
    return value


def segment(value: str) -> str:
    """A name as one URL path segment: a name with "/" or ".." never reaches another resource."""
    return quote(value, safe="").replace(".", "%2E")


def size(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count} B"
