"""python -m gateway [--routes-file FILE] [--port N] [--host H]

Environment: GATEWAY_ROUTES_URL, GATEWAY_TOKEN, GATEWAY_PORT (8080), GATEWAY_HOST,
GATEWAY_ROUTES_FILE, GATEWAY_POLL_INTERVAL_MS (300), GATEWAY_STALE_AFTER_MS (3000),
GATEWAY_MAX_BODY_BYTES (8 MiB),
GATEWAY_BREAKER_FAILURES (3), GATEWAY_BREAKER_COOLDOWN_MS (500),
GATEWAY_SHADOW_QUEUE (1024), GATEWAY_SHADOW_WORKERS (16), GATEWAY_IDLE_TIMEOUT_S (75).
"""

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from .server import Settings, serve


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway", description="Inference gateway (KServe v2 / Triton HTTP)")
    parser.add_argument("--routes-file", type=Path, help="route table JSON file (reloaded when it changes); instead of GATEWAY_ROUTES_URL")
    parser.add_argument("--routes-url", help="control plane route table URL (default: GATEWAY_ROUTES_URL)")
    parser.add_argument("--port", type=int, help="listen port (default: GATEWAY_PORT or 8080)")
    parser.add_argument("--host", help="listen address (default: GATEWAY_HOST or 0.0.0.0)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%Y-%m-%d %H:%M:%S", stream=sys.stderr)  # the control plane's format (config/settings.py)
    overrides = dict(port=args.port, host=args.host, routes_url=args.routes_url)
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
    try:
        import uvloop
    except ImportError:  # still correct, only slower
        uvloop = None
    if uvloop is not None:
        uvloop.run(serve(settings))
    else:
        asyncio.run(serve(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
