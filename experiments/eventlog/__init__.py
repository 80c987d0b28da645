"""The control plane's side of the durable log: which log answers, and its reader.

`log_url()` says where the gateway's exposures, captures and feedback are: NATS JetStream when
EVENT_LOG_URL names one that answers (the log at scale: durable, per-team subjects, replay),
else the Redis Streams of EXPOSURE_STREAM_URL, the zero-setup default. The choice is said once
in the ingest's log. The subjects and streams are the gateway's contract
(gateway/contracts/log_contract.py, reached through `contract` here only).
"""

from __future__ import annotations

import socket
from urllib.parse import urlparse

from django.conf import settings

from gateway.contracts import log_contract as contract  # the one gateway module of the log (import contract)

__all__ = ["contract", "log_url", "nats_answers"]


def nats_answers(url: str, timeout_s: float = 0.5) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 4222), timeout=timeout_s):
            return True
    except OSError:
        return False


def log_url() -> str:
    """EVENT_LOG_URL when it is a NATS server that answers, else ''."""
    url = settings.EVENT_LOG_URL
    return url if url.startswith("nats://") and nats_answers(url) else ""
