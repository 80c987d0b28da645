"""python -m gateway [--routes-file FILE] [--port N] [--host H]

--workers N (default GATEWAY_WORKERS, else the cores it may use): N processes on the
same ports (gateway/process/workers.py).

Environment: GATEWAY_ROUTES_URL, GATEWAY_TOKEN, GATEWAY_PORT (8080), GATEWAY_HOST,
GATEWAY_ROUTES_FILE, GATEWAY_POLL_INTERVAL_MS (300), GATEWAY_STALE_AFTER_MS (3000),
GATEWAY_MAX_BODY_BYTES (8 MiB),
GATEWAY_BREAKER_FAILURES (3), GATEWAY_BREAKER_COOLDOWN_MS (500),
GATEWAY_SHADOW_QUEUE (1024), GATEWAY_SHADOW_WORKERS (16), GATEWAY_IDLE_TIMEOUT_S (75).
"""

import argparse
import logging
import os
import sys
from pathlib import Path

from gateway.process.settings import Settings
from gateway.process.workers import default_workers, run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gateway", description="Inference gateway (KServe v2 / Triton HTTP)"
    )
    parser.add_argument(
        "--routes-file",
        type=Path,
        help="route table JSON file (reloaded when it changes); instead of GATEWAY_ROUTES_URL",
    )
    parser.add_argument("--routes-url", help="control plane route table URL (default: GATEWAY_ROUTES_URL)")
    parser.add_argument("--port", type=int, help="listen port (default: GATEWAY_PORT or 8080)")
    parser.add_argument("--host", help="listen address (default: GATEWAY_HOST or 0.0.0.0)")
    parser.add_argument(
        "--workers",
        type=int,
        help="worker processes sharing the ports (default: GATEWAY_WORKERS, else the cores this process may use)",
    )
    parser.add_argument(
        "--grpc-port", type=int, help="KServe v2 gRPC port (default: GATEWAY_GRPC_PORT or 8081; 0: none)"
    )
    parser.add_argument(
        "--control-port",
        type=int,
        help="/metrics, /status and health off the event loop (default: GATEWAY_CONTROL_PORT or 0: none)",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stderr,
    )  # the control plane's format (config/settings.py)
    overrides = dict(
        port=args.port,
        host=args.host,
        routes_url=args.routes_url,
        grpc_port=args.grpc_port,
        control_port=args.control_port,
    )
    if args.routes_file:
        overrides.update(routes_file=args.routes_file, routes_url=None)
    try:
        settings = Settings.from_env(**overrides)
        if args.routes_file:
            settings.routes_url = None
        if not settings.routes_url and not settings.routes_file:
            parser.error("no route source: set GATEWAY_ROUTES_URL or pass --routes-file")
    except ValueError as exc:
        parser.error(str(exc))
    workers = args.workers or (int(os.environ["GATEWAY_WORKERS"]) if os.environ.get("GATEWAY_WORKERS") else None)
    if workers is not None and workers < 1:
        parser.error("--workers must be at least 1")
    return run(settings, workers or default_workers())


if __name__ == "__main__":
    sys.exit(main())
