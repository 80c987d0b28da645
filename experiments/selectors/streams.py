"""Reads of the exposure and feedback streams: which exist, and how far behind the ingest is on each.

A stream holds only what the control plane has not stored yet (acknowledged entries are
trimmed), so its oldest entry's age is the ingest's lag on it: the time the oldest event
still waiting has waited. One pipeline for every stream (XRANGE COUNT 1 and XLEN each).
"""

from __future__ import annotations

import time

from experiments import feedback as feedback_rules

EXPOSURE_STREAM = "modelplane:exposures"
FEEDBACK_STREAM = "modelplane:feedback"  # every source in one stream: what gateways before per-source streams wrote
EXPOSURES = "(exposures)"  # the exposure stream's line in a lag report (it has no endpoint)
SHARED = "(shared feedback stream)"


def feedback_streams(client) -> list[str]:
    """Every per-source stream the gateway listed, and the one stream of older gateways."""
    listed = client.smembers(feedback_rules.FEEDBACK_STREAMS)
    return sorted({name.decode() if isinstance(name, bytes) else name for name in listed} | {FEEDBACK_STREAM})


def stream_endpoint(stream: str) -> str:
    """The endpoint a per-source stream carries feedback for (feedback_rules.feedback_stream)."""
    if stream == EXPOSURE_STREAM:
        return EXPOSURES
    head = f"{FEEDBACK_STREAM}:"
    return stream[len(head) :].rsplit(":", 1)[0] if stream.startswith(head) else SHARED


def stream_lags(client, *, now_ms: int | None = None) -> list[dict]:
    """Per stream: {stream, endpoint, lag_s (the oldest waiting entry's age, 0 when empty), entries}."""
    now_ms = now_ms or int(time.time() * 1000)
    streams = [EXPOSURE_STREAM, *feedback_streams(client)]
    pipe = client.pipeline(transaction=False)
    for stream in streams:
        pipe.xrange(stream, count=1)
        pipe.xlen(stream)
    replies = pipe.execute()
    out = []
    for i, stream in enumerate(streams):
        oldest, entries = replies[2 * i], replies[2 * i + 1]
        lag_ms = 0
        if oldest:
            raw = oldest[0][0]
            lag_ms = max(0, now_ms - int((raw.decode() if isinstance(raw, bytes) else raw).split("-", 1)[0]))
        out.append({"stream": stream, "endpoint": stream_endpoint(stream), "lag_s": lag_ms / 1000, "entries": entries})
    return out


def endpoint_lags(lags: list[dict]) -> dict[str, dict]:
    """{endpoint: {lag_s: the worst of its streams, entries: their sum}} (pure)."""
    out: dict[str, dict] = {}
    for row in lags:
        seen = out.setdefault(row["endpoint"], {"lag_s": 0.0, "entries": 0})
        seen["lag_s"] = max(seen["lag_s"], row["lag_s"])
        seen["entries"] += row["entries"]
    return out


def lagging(lags: dict[str, dict], threshold_s: float) -> dict[str, dict]:
    """The endpoints whose feedback has waited longer than `threshold_s`, worst first (pure)."""
    late = {name: lag for name, lag in lags.items() if lag["lag_s"] > threshold_s}
    return dict(sorted(late.items(), key=lambda item: -item[1]["lag_s"]))
