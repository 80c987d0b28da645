"""`modelplane feedback send ENDPOINT`: clicks, conversions and values through the
feedback API, in batches, from a JSON-lines file (or stdin) and/or `--event` arguments.

The API refuses a whole batch for one malformed event and names it (`events[3].type: …`);
the CLI then leaves that event out, says which line it was and why, and sends the rest
again (event ids make a resent event count once). A line that is not a JSON object is
refused here. The summary adds up the API's counts (received, duplicates, attributed,
late, unknown) and lists what was refused; exit 4 if anything was."""

from __future__ import annotations

import json
import re
import time

import click

from modelplane_cli import exits
from modelplane_cli.exits import CliError
from modelplane_cli.state import json_option, pass_state

MAX_BATCH = 10_000  # the API's bound per batch (gateway/contracts/feedback.schema.json)
COUNTS = ("received", "duplicates", "attributed", "late", "unknown")
_INDEX = re.compile(r"^events\[(\d+)\]")
RATE_RETRIES = 3


def read_events(handle, arguments) -> tuple[list[tuple[str, dict]], list[dict]]:
    """([(where, event)], [refused]) from JSON lines and --event arguments."""
    events, refused = [], []
    if handle is not None:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:
                refused.append({"where": f"line {number}", "detail": f"not JSON ({exc.msg})"})
                continue
            if not isinstance(value, dict):
                refused.append({"where": f"line {number}", "detail": "not a JSON object"})
                continue
            events.append((f"line {number}", value))
    for number, text in enumerate(arguments, start=1):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise CliError(
                exits.USAGE,
                f"--event {number}: give a JSON object, e.g. "
                '\'{"event_id": "e-1", "type": "click", "request_id": "…"}\'',
            )
        events.append((f"--event {number}", value))
    return events, refused


@click.group()
def feedback():
    """Feedback on what an endpoint served (click, conversion, value), for its experiments."""


@feedback.command("send")
@click.argument("endpoint_name")
@click.option("--file", "source", type=click.File("r"), help="JSON lines, one event each (- for stdin).")
@click.option(
    "--event",
    "arguments",
    multiple=True,
    help='One event as JSON (repeat): {"event_id", "type", "request_id" | "unit_key", …}.',
)
@click.option(
    "--batch-size", type=click.IntRange(1, MAX_BATCH), default=1000, show_default=True, help="Events per request."
)
@click.option(
    "--key",
    envvar="MODELPLANE_INFERENCE_KEY",
    help="Send as an inference key of the endpoint's team (X-API-Key; else MODELPLANE_INFERENCE_KEY); default: your login, a member of the team.",
)
@json_option
@pass_state
def feedback_send(state, endpoint_name, source, arguments, batch_size, key):
    """Send feedback events in batches, with a progress line and a summary of what was
    accepted (the API's counts) and refused (which line, and why)."""
    events, refused = read_events(source, arguments)
    if not events and not refused:
        raise CliError(exits.USAGE, "no events: give --file PATH (JSON lines, - for stdin) or --event JSON.")
    totals = dict.fromkeys(COUNTS, 0)
    headers = {"X-API-Key": key} if key else None
    sent, batches = 0, 0
    for start in range(0, len(events), batch_size):
        batch = events[start : start + batch_size]
        while batch:
            state.out.status(f"feedback for {endpoint_name}: {sent}/{len(events)} events sent · {len(refused)} refused")
            answer, dropped = _send(state.api, endpoint_name, batch, headers)
            if dropped is None:
                batches += 1
                for name in COUNTS:
                    totals[name] += int((answer or {}).get(name, 0))
                sent += len(batch)
                break
            where, detail = dropped
            refused.append({"where": batch[where][0], "detail": detail})
            batch = batch[:where] + batch[where + 1 :]  # the others again; event ids make a resend count once
    state.out.clear_status()
    summary = {**totals, "sent": sent, "batches": batches, "refused": refused}

    def human(s):
        text = (
            f"Sent {s['sent']} events to {endpoint_name} in {s['batches']} batches: received {s['received']}, "
            f"duplicates {s['duplicates']}, attributed {s['attributed']}, late {s['late']}, unknown {s['unknown']}; "
            f"refused {len(s['refused'])}."
        )
        for item in s["refused"][:20]:
            text += f"\n  refused {item['where']}: {item['detail']}"
        if len(s["refused"]) > 20:
            text += f"\n  … and {len(s['refused']) - 20} more (--json lists them all)"
        return text

    state.out.result(summary, human)
    if refused:
        click.get_current_context().exit(exits.API)


def _send(api, endpoint_name, batch, headers):
    """(the API's counts, None), or (None, (index, why)) when it refused one event of the batch."""
    for attempt in range(RATE_RETRIES + 1):
        try:
            return api.request(
                "POST", "feedback/", json={"endpoint": endpoint_name, "events": [e for _, e in batch]}, headers=headers
            ), None
        except CliError as error:
            match = _INDEX.match(error.message)
            if error.status == 400 and match and int(match[1]) < len(batch):
                return None, (int(match[1]), error.message[match.end() :].lstrip(".") or error.message)
            if error.status == 429 and attempt < RATE_RETRIES:
                time.sleep(min(10.0, 1.0 * (attempt + 1)))
                continue
            raise
    raise AssertionError("unreachable")


COMMANDS = [feedback]
ALIASES: dict = {}
