"""The durable log's contract between the gateway (writer) and the control plane (reader).

Pure: subjects, stream names and stream limits of the NATS JetStream log, one owner for both
sides (the control plane reaches it through experiments/eventlog/, an import contract in
pyproject.toml allows exactly that).

Subjects carry the team, so a team's events are apart on the log itself and a reader checks
the subject's team against the endpoint's before it stores anything:

    <prefix>.x.<team>.<endpoint>             exposures, captured requests among them (one flush per message)
    <prefix>.f.<team>.<endpoint>.<source>    feedback of one source (a key id, or ~tokens)

Two streams: `<PREFIX>_EXPOSURES` (x) and `<PREFIX>_FEEDBACK` (f). Both keep messages by
size and age (limits retention: `max_bytes`, `max_age`), so the log can be replayed into a
store from any point inside its retention (the store dedupes what it already holds), and
refuse new messages when full (discard new: the writer keeps and counts, it never silently
overwrites what nobody read). The feedback stream keeps per-source subjects so the reader can
take each source's fair share (experiments/services/log_ingest.py); each source's backlog is
bounded at the door (gateway/telemetry/feedback_stream.py) from the reader's count of what waits.
"""

from __future__ import annotations

import re

DEFAULT_PREFIX = "modelplane"
EXPOSURES, FEEDBACK = "x", "f"
MAX_AGE_S = 7 * 86400  # the log is a buffer and a replay window, not the store
EXPOSURE_MAX_BYTES = 8 << 30
FEEDBACK_MAX_BYTES = 2 << 30
MAX_MSG_BYTES = 1 << 20  # one flush's entry is at most 256 KiB (exposures.py); a capture batch likewise
DUPLICATE_WINDOW_S = 120  # a publish retried with the same Nats-Msg-Id inside this is stored once

_SAFE = re.compile(r"[A-Za-z0-9_~-]")


def token(value: str) -> str:
    """One subject token: characters NATS gives meaning to ('.', '*', '>', spaces) escaped as =XX."""
    return "".join(ch if _SAFE.fullmatch(ch) else "".join(f"={b:02X}" for b in ch.encode()) for ch in value) or "="


def untoken(value: str) -> str:
    raw, i = bytearray(), 0
    while i < len(value):
        if value[i] == "=" and i + 3 <= len(value):
            raw.append(int(value[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(value[i].encode())
            i += 1
    return raw.decode("utf-8", "replace")


def subject(prefix: str, kind: str, team: str, endpoint: str, source: str | None = None) -> str:
    parts = [prefix, kind, token(team), token(endpoint)]
    if kind == FEEDBACK:
        parts.append(token(source or "~tokens"))
    return ".".join(parts)


def parse_subject(value: str) -> tuple[str, str, str, str | None]:
    """(kind, team, endpoint, source or None) of a subject this module made."""
    parts = value.split(".")
    kind, team, endpoint = parts[1], untoken(parts[2]), untoken(parts[3])
    return kind, team, endpoint, (untoken(parts[4]) if kind == FEEDBACK and len(parts) > 4 else None)


def stream_name(prefix: str, kind: str) -> str:
    base = re.sub(r"[^A-Za-z0-9_-]", "_", prefix).upper()
    return f"{base}_FEEDBACK" if kind == FEEDBACK else f"{base}_EXPOSURES"


def stream_configs(prefix: str) -> list[dict]:
    """Both streams' configuration (nats.js.api.StreamConfig fields)."""
    common = {
        "retention": "limits",
        "discard": "new",
        "max_age": float(MAX_AGE_S),
        "max_msg_size": MAX_MSG_BYTES,
        "storage": "file",
        "duplicate_window": float(DUPLICATE_WINDOW_S),
    }
    return [
        {
            "name": stream_name(prefix, EXPOSURES),
            "subjects": [f"{prefix}.{EXPOSURES}.>"],
            "max_bytes": EXPOSURE_MAX_BYTES,
            **common,
        },
        {
            "name": stream_name(prefix, FEEDBACK),
            "subjects": [f"{prefix}.{FEEDBACK}.>"],
            "max_bytes": FEEDBACK_MAX_BYTES,
            **common,
        },
    ]


def backlog_key(subject_name: str) -> str:
    """The Redis key where the reader keeps how many entries of a feedback subject wait."""
    return f"modelplane:feedback:backlog:{subject_name}"


def stream_config(doc: dict):
    from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

    return StreamConfig(
        **{
            **doc,
            "retention": RetentionPolicy(doc["retention"]),
            "discard": DiscardPolicy(doc["discard"]),
            "storage": StorageType(doc["storage"]),
        }
    )


async def ensure_streams(js, prefix: str) -> None:
    """Both streams of `prefix`, made or brought to the contract's limits (idempotent)."""
    from nats.js.errors import BadRequestError

    for doc in stream_configs(prefix):
        config = stream_config(doc)
        try:
            await js.add_stream(config)
        except BadRequestError:  # it exists with other limits: take the contract's
            await js.update_stream(config)
