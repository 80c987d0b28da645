"""The gateway's settings: environment variables (GATEWAY_*, see docs/gateway.md)
and command-line overrides, checked at start so a bad value stops the process with the
variable's name."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gateway.wire.httpserver import Limits
from gateway.wire.peers import parse_exempt


@dataclass
class Settings:
    host: str = "0.0.0.0"
    port: int = 8080
    routes_url: str | None = None
    routes_file: Path | None = None
    token: str | None = None
    metrics_token: str | None = None
    # /metrics and /status list every team's endpoints, internal model names, Triton
    # addresses and per-key traffic: they need GATEWAY_METRICS_TOKEN unless an operator
    # opens them on purpose (GATEWAY_METRICS_OPEN=1, e.g. a gateway bound to loopback).
    metrics_open: bool = False
    poll_interval_s: float = 0.3
    # a poll with the current ETag is held by the control plane up to this long and answered
    # as soon as the table changes (long poll; 0: plain polls every poll_interval_s)
    route_wait_s: float = 5.0
    stale_after_s: float = 3.0
    max_body_bytes: int = 8 * 1024 * 1024
    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    max_chunks: int = 4096
    max_pipelined: int = 32
    max_connections: int = 4096
    # open HTTP connections from one client address (an IPv6 /64), per worker: 429 and close past it
    max_connections_per_client: int = 512
    # networks whose addresses no per-client cap counts (a load balancer or proxy carrying many clients)
    client_cap_exempt: tuple = ()
    receive_timeout_s: float = 15.0
    breaker_failures: int = 3
    breaker_cooldown_s: float = 0.5
    breaker_max_cooldown_s: float = 8.0
    shadow_queue: int = 1024
    shadow_workers: int = 16
    idle_timeout_s: float = 75.0
    shutdown_grace_s: float = 5.0
    workers: int = 1  # processes serving the port (gateway/process/workers.py); each enforces 1/N of what is split
    http_socket: object = None  # a listening socket handed over by the supervisor (gateway/process/workers.py)
    run_dir: str | None = None  # the supervisor's run directory: workers' metrics sockets (aggregate.py)
    worker_row: int = 0
    replicas: int = 1  # gateway replicas behind one address: each enforces 1/R of every key's limits
    grpc_port: int = 8081  # KServe v2 gRPC (gateway/v2/grpc/); 0: no gRPC port
    # /metrics, /status and health answered off the event loop (control.py); 0: none (the data
    # port answers them either way). make run and the manifests set 8082.
    control_port: int = 0
    control_socket: object = None  # the control port's socket, made once by the supervisor
    grpc_max_streams: int = 128  # concurrent streams (RPCs) per HTTP/2 connection
    grpc_max_rpcs: int = 4096  # RPCs in progress in one worker; more: RESOURCE_EXHAUSTED
    # gRPC transport limits (gateway/v2/grpc/transport.py says which grpcio option does what and why)
    grpc_max_calls_per_client: int = 512  # RPCs in progress from one client address, per worker
    grpc_max_connections_per_client: int = 64  # gRPC connections from one client address, per worker
    grpc_first_message_timeout_s: float = 5.0  # a call's request message must arrive within this of its HEADERS
    grpc_max_connection_age_s: float = 600.0  # a connection is sent GOAWAY this old (grpcio adds +-10% jitter)
    grpc_connection_age_grace_s: float = 30.0  # ...and closed this long after, calls in progress or not
    grpc_keepalive_s: float = 60.0  # the server pings a connection silent this long; no answer in 20 s: closed
    grpc_min_ping_interval_s: float = 10.0  # a client pinging more often than this is sent GOAWAY (ENHANCE_YOUR_CALM)
    exposure_stream_url: str | None = (
        None  # Redis URL of the exposure/feedback streams; None: exposures are counted as dropped
    )
    # The durable log (NATS JetStream, eventlog.py) the exposures, captures and feedback go to; None: the
    # Redis Streams above. Its subjects start with the prefix (log_contract.py).
    event_log_url: str | None = None
    event_log_prefix: str = "modelplane"
    feedback_events_per_s: float = 50_000.0  # per key, per process
    # An experiment's feedback without a key draws on what its exposures allow (feedback_stream.py);
    # this floor refills by time for quiet experiments and clicks that beat their exposure's flush.
    feedback_token_floor_per_s: float = 20.0
    feedback_token_floor_burst: float = 100.0
    llm_anonymous_streams: int = 64  # anonymous LLM requests in flight per public endpoint, per host (llm/quotas.py)
    # a reply that is not streamed is held whole: its bytes, and every reply's of one key / one
    # team at once on the host (llm/buffers.py); past them: 502 reply_too_large / 429 reply_buffer_full
    llm_max_reply_bytes: int = 1 << 20
    llm_buffer_bytes_per_key: int = 16 << 20
    llm_buffer_bytes_per_team: int = 64 << 20

    @classmethod
    def from_env(cls, **overrides) -> Settings:
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
            metrics_open=env.get("GATEWAY_METRICS_OPEN", "").lower() in ("1", "true", "yes"),
            poll_interval_s=number("GATEWAY_POLL_INTERVAL_MS", cls.poll_interval_s, float, 1000.0),
            route_wait_s=number("GATEWAY_ROUTE_WAIT_S", cls.route_wait_s, float),
            stale_after_s=number("GATEWAY_STALE_AFTER_MS", cls.stale_after_s, float, 1000.0),
            max_body_bytes=number("GATEWAY_MAX_BODY_BYTES", cls.max_body_bytes),
            max_header_bytes=number("GATEWAY_MAX_HEADER_BYTES", cls.max_header_bytes),
            max_headers=number("GATEWAY_MAX_HEADERS", cls.max_headers),
            max_chunks=number("GATEWAY_MAX_CHUNKS", cls.max_chunks),
            max_pipelined=number("GATEWAY_MAX_PIPELINED", cls.max_pipelined),
            max_connections=number("GATEWAY_MAX_CONNECTIONS", cls.max_connections),
            max_connections_per_client=number("GATEWAY_MAX_CONNECTIONS_PER_CLIENT", cls.max_connections_per_client),
            client_cap_exempt=parse_exempt(env.get("GATEWAY_CLIENT_CAP_EXEMPT", "")),
            receive_timeout_s=number("GATEWAY_RECEIVE_TIMEOUT_S", cls.receive_timeout_s, float),
            breaker_failures=number("GATEWAY_BREAKER_FAILURES", cls.breaker_failures),
            breaker_cooldown_s=number("GATEWAY_BREAKER_COOLDOWN_MS", cls.breaker_cooldown_s, float, 1000.0),
            shadow_queue=number("GATEWAY_SHADOW_QUEUE", cls.shadow_queue),
            shadow_workers=number("GATEWAY_SHADOW_WORKERS", cls.shadow_workers),
            idle_timeout_s=number("GATEWAY_IDLE_TIMEOUT_S", cls.idle_timeout_s, float),
            shutdown_grace_s=number("GATEWAY_SHUTDOWN_GRACE_S", cls.shutdown_grace_s, float),
            exposure_stream_url=env.get("GATEWAY_EXPOSURE_STREAM_URL") or None,
            event_log_url=env.get("GATEWAY_EVENT_LOG_URL") or None,
            event_log_prefix=env.get("GATEWAY_EVENT_LOG_PREFIX") or cls.event_log_prefix,
            workers=number("GATEWAY_WORKERS", cls.workers),
            replicas=number("GATEWAY_REPLICAS", cls.replicas),
            grpc_port=0 if env.get("GATEWAY_GRPC_PORT") == "0" else number("GATEWAY_GRPC_PORT", cls.grpc_port),
            control_port=0
            if env.get("GATEWAY_CONTROL_PORT") == "0"
            else number("GATEWAY_CONTROL_PORT", cls.control_port),
            grpc_max_streams=number("GATEWAY_GRPC_MAX_STREAMS", cls.grpc_max_streams),
            grpc_max_rpcs=number("GATEWAY_GRPC_MAX_RPCS", cls.grpc_max_rpcs),
            grpc_max_calls_per_client=number("GATEWAY_GRPC_MAX_CALLS_PER_CLIENT", cls.grpc_max_calls_per_client),
            grpc_max_connections_per_client=number(
                "GATEWAY_GRPC_MAX_CONNECTIONS_PER_CLIENT", cls.grpc_max_connections_per_client
            ),
            grpc_first_message_timeout_s=number(
                "GATEWAY_GRPC_FIRST_MESSAGE_TIMEOUT_S", cls.grpc_first_message_timeout_s, float
            ),
            grpc_max_connection_age_s=number("GATEWAY_GRPC_MAX_CONNECTION_AGE_S", cls.grpc_max_connection_age_s, float),
            grpc_connection_age_grace_s=number(
                "GATEWAY_GRPC_CONNECTION_AGE_GRACE_S", cls.grpc_connection_age_grace_s, float
            ),
            grpc_keepalive_s=number("GATEWAY_GRPC_KEEPALIVE_S", cls.grpc_keepalive_s, float),
            grpc_min_ping_interval_s=number("GATEWAY_GRPC_MIN_PING_INTERVAL_S", cls.grpc_min_ping_interval_s, float),
            feedback_events_per_s=number("GATEWAY_FEEDBACK_EVENTS_PER_S", cls.feedback_events_per_s, float),
            feedback_token_floor_per_s=number(
                "GATEWAY_FEEDBACK_TOKEN_FLOOR_PER_S", cls.feedback_token_floor_per_s, float
            ),
            feedback_token_floor_burst=number(
                "GATEWAY_FEEDBACK_TOKEN_FLOOR_BURST", cls.feedback_token_floor_burst, float
            ),
            llm_anonymous_streams=number("GATEWAY_LLM_ANONYMOUS_STREAMS", cls.llm_anonymous_streams),
            llm_max_reply_bytes=number("GATEWAY_LLM_MAX_REPLY_BYTES", cls.llm_max_reply_bytes),
            llm_buffer_bytes_per_key=number("GATEWAY_LLM_BUFFER_BYTES_PER_KEY", cls.llm_buffer_bytes_per_key),
            llm_buffer_bytes_per_team=number("GATEWAY_LLM_BUFFER_BYTES_PER_TEAM", cls.llm_buffer_bytes_per_team),
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        if not values["metrics_token"] and not values["metrics_open"]:
            raise ValueError(
                "GATEWAY_METRICS_TOKEN is not set: /metrics and /status need a token (they show every team's "
                "endpoints and traffic); set it, or GATEWAY_METRICS_OPEN=1 to serve them to anyone"
            )
        return cls(**values)

    def limits(self) -> Limits:
        return Limits(
            max_body_bytes=self.max_body_bytes,
            max_header_bytes=self.max_header_bytes,
            max_headers=self.max_headers,
            max_chunks=self.max_chunks,
            max_pipelined=self.max_pipelined,
            receive_timeout_s=self.receive_timeout_s,
            idle_timeout_s=self.idle_timeout_s,
            max_connections=self.max_connections,
            max_connections_per_client=self.max_connections_per_client,
        )
