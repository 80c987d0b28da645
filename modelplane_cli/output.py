"""What the CLI prints: `--json` gives the API's JSON on stdout (progress then goes to
stderr); otherwise tables and key/value lists for people. Progress is a redrawn line on
a terminal and one line per event when the stream is not a TTY (CI logs)."""

from __future__ import annotations

import json
import shutil
import sys
from datetime import datetime

import click

from modelplane_cli import exits
from modelplane_cli.exits import CliError


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def clock(value: str | None) -> str:
    """HH:MM:SS in the local time zone (24-hour, like the dashboard's tables)."""
    moment = parse_time(value)
    return moment.astimezone().strftime("%H:%M:%S") if moment else "--:--:--"


def when(value: str | None) -> str:
    moment = parse_time(value)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S") if moment else ""


def cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ",".join(cell(v) for v in value)
    if isinstance(value, dict):  # e.g. a version's metrics: floats at 4 significant digits, as the pages round them
        return json.dumps(_rounded(value), separators=(",", ":"), sort_keys=True)
    return str(value).replace("\n", " ")


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


def table(rows: list[dict], columns: list[tuple[str, str]], *, empty: str = "(none)") -> str:
    """A plain aligned table; `columns` are (header, key) with dotted keys into nested dicts."""
    if not rows:
        return empty
    body = [
        [when(_dig(row, key)) if key.endswith("_at") else cell(_dig(row, key)) for _, key in columns] for row in rows
    ]
    headers = [header for header, _ in columns]
    widths = [max(len(headers[i]), *(len(r[i]) for r in body)) for i in range(len(columns))]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in body]
    return "\n".join(lines)


def fields(pairs: list[tuple[str, object]]) -> str:
    width = max(len(label) for label, _ in pairs) + 1
    return "\n".join(f"{(label + ':').ljust(width)} {cell(value)}" for label, value in pairs)


def pick(data, path: str):
    """`--field`: a dotted path into the JSON result; list items by index (artifacts.0.id)."""
    value = data
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.lstrip("-").isdigit() and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            raise CliError(exits.ERROR, f"--field {path}: the result has no {part!r} there")
    return value


def _dig(row: dict, key: str):
    value = row
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


class Output:
    """One per command run: knows --json and whether progress may redraw a line."""

    def __init__(self, *, as_json: bool, field: str | None = None):
        self.as_json = as_json
        self.field = field
        self.stream = sys.stderr if as_json else sys.stdout  # progress never mixes with JSON on stdout
        self.tty = self.stream.isatty()
        self._status = False
        self._panel = 0  # lines of the live panel drawn below the events

    # --- results ---------------------------------------------------------------------------
    def result(self, data, human=None) -> None:
        """The command's result: JSON on stdout, or `human` (text or a callable giving it)."""
        if self.field:
            value = pick(data, self.field)
            click.echo(value if isinstance(value, str) else json.dumps(value, default=str))
            return
        if self.as_json:
            click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))
            return
        text = human(data) if callable(human) else human
        if text:
            click.echo(text)

    def note(self, message: str) -> None:
        """A remark for people (stderr), kept out of --json output."""
        self.clear_status()
        click.echo(message, err=True)

    # --- progress --------------------------------------------------------------------------
    def event(self, line: str) -> None:
        """A line that stays (a stage finished, a transition, a verdict)."""
        self.clear_status()
        click.echo(line, file=self.stream)
        self.stream.flush()

    def status(self, line: str) -> None:
        """The live line under the events; only drawn on a terminal."""
        if not self.tty:
            return
        width = max(20, shutil.get_terminal_size((100, 20)).columns - 1)
        click.echo("\r\x1b[2K" + line[:width], file=self.stream, nl=False)
        self.stream.flush()
        self._status = True

    def panel(self, lines: list[str]) -> None:
        """A live block of lines under the events, redrawn in place (only on a terminal):
        the cursor goes back to the block's first line, the screen below is cleared, and
        the block is written again, each line cut at the terminal's width."""
        if not self.tty:
            return
        width = max(20, shutil.get_terminal_size((100, 20)).columns - 1)
        self.clear_status()
        click.echo("\n".join(_cut(line, width) for line in lines), file=self.stream, nl=False)
        self.stream.flush()
        self._panel = len(lines)

    def clear_status(self) -> None:
        if self._panel:
            up = f"\x1b[{self._panel - 1}A" if self._panel > 1 else ""
            click.echo(f"\r{up}\x1b[J", file=self.stream, nl=False)
            self._panel = 0
        if self._status:
            click.echo("\r\x1b[2K", file=self.stream, nl=False)
            self._status = False


def _cut(line: str, width: int) -> str:
    """`line` cut to `width` visible characters (ANSI colour codes do not count)."""
    shown, out, index = 0, [], 0
    while index < len(line) and shown < width:
        if line[index] == "\x1b" and (end := line.find("m", index)) != -1:
            out.append(line[index : end + 1])
            index = end + 1
            continue
        out.append(line[index])
        shown += 1
        index += 1
    text = "".join(out)
    return text + "\x1b[0m" if "\x1b[" in text and not text.endswith("\x1b[0m") else text


def bar(fraction: float, width: int = 24) -> str:
    fraction = min(1.0, max(0.0, fraction))
    done = int(round(fraction * width))
    return "[" + "#" * done + "-" * (width - done) + f"] {fraction * 100:3.0f}%"
