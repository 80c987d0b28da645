"""The gateway's settings: environment variables (GATEWAY_*, see gateway/README.md)
and command-line overrides, checked at start so a bad value stops the process with the
variable's name."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .httpserver import Limits


@dataclass
class Settings:
    host: str = "0.0.0.0"
    port: int = 8080
    routes_url: str | None = None
    routes_file: Path | None = None
    token: str | None = None
    metrics_token: str | None = None
    poll_interval_s: float = 0.3
    stale_after_s: float = 3.0
    max_body_bytes: int = 8 * 1024 * 1024
    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    max_chunks: int = 4096
    max_pipelined: int = 32
    max_connections: int = 4096
    receive_timeout_s: float = 15.0
    breaker_failures: int = 3
    breaker_cooldown_s: float = 0.5
    breaker_max_cooldown_s: float = 8.0
    shadow_queue: int = 1024
    shadow_workers: int = 16
    idle_timeout_s: float = 75.0
    shutdown_grace_s: float = 5.0
    exposure_stream_url: str | None = None  # Redis URL of the exposure/feedback streams; None: exposures are counted as dropped

    @classmethod
    def from_env(cls, **overrides) -> "Settings":
        env = os.environ

        def number(name: str, default, kind=int, scale=1.0):
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = kind(raw) / scale if scale != 1.0 else kind(raw)
            except ValueError:
                raise ValueError(f"{name} must be a number, got {raw!r}") from None
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {raw!r}")
            return value

        values = dict(
            host=env.get("GATEWAY_HOST", cls.host),
            port=number("GATEWAY_PORT", cls.port),
            routes_url=env.get("GATEWAY_ROUTES_URL") or None,
            routes_file=Path(env["GATEWAY_ROUTES_FILE"]) if env.get("GATEWAY_ROUTES_FILE") else None,
            token=env.get("GATEWAY_TOKEN") or None,
            metrics_token=env.get("GATEWAY_METRICS_TOKEN") or None,
            poll_interval_s=number("GATEWAY_POLL_INTERVAL_MS", cls.poll_interval_s, float, 1000.0),
            stale_after_s=number("GATEWAY_STALE_AFTER_MS", cls.stale_after_s, float, 1000.0),
            max_body_bytes=number("GATEWAY_MAX_BODY_BYTES", cls.max_body_bytes),
            max_header_bytes=number("GATEWAY_MAX_HEADER_BYTES", cls.max_header_bytes),
            max_headers=number("GATEWAY_MAX_HEADERS", cls.max_headers),
            max_chunks=number("GATEWAY_MAX_CHUNKS", cls.max_chunks),
            max_pipelined=number("GATEWAY_MAX_PIPELINED", cls.max_pipelined),
            max_connections=number("GATEWAY_MAX_CONNECTIONS", cls.max_connections),
            receive_timeout_s=number("GATEWAY_RECEIVE_TIMEOUT_S", cls.receive_timeout_s, float),
            breaker_failures=number("GATEWAY_BREAKER_FAILURES", cls.breaker_failures),
            breaker_cooldown_s=number("GATEWAY_BREAKER_COOLDOWN_MS", cls.breaker_cooldown_s, float, 1000.0),
            shadow_queue=number("GATEWAY_SHADOW_QUEUE", cls.shadow_queue),
            shadow_workers=number("GATEWAY_SHADOW_WORKERS", cls.shadow_workers),
            idle_timeout_s=number("GATEWAY_IDLE_TIMEOUT_S", cls.idle_timeout_s, float),
            shutdown_grace_s=number("GATEWAY_SHUTDOWN_GRACE_S", cls.shutdown_grace_s, float),
            exposure_stream_url=env.get("GATEWAY_EXPOSURE_STREAM_URL") or None,
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def limits(self) -> Limits:
        return Limits(
            max_body_bytes=self.max_body_bytes, max_header_bytes=self.max_header_bytes, max_headers=self.max_headers,
            max_chunks=self.max_chunks, max_pipelined=self.max_pipelined, receive_timeout_s=self.receive_timeout_s,
            idle_timeout_s=self.idle_timeout_s, max_connections=self.max_connections,
        )
