"""GET /healthz: 200 only when every component this process depends on answers."""

import socket
import time
from urllib.parse import urlparse

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET


def _check_database() -> dict:
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"engine": connection.vendor, "latency_ms": round((time.perf_counter() - started) * 1000, 2)}


def _check_broker() -> dict:
    started = time.perf_counter()
    url = settings.CELERY_BROKER_URL
    if url.startswith("filesystem://"):
        folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]
        probe = f"{folder}/.healthz"
        with open(probe, "w") as fh:
            fh.write("ok")
        return {"transport": "filesystem", "latency_ms": round((time.perf_counter() - started) * 1000, 2)}
    from config.celery import app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
    return {"transport": urlparse(url).scheme, "latency_ms": round((time.perf_counter() - started) * 1000, 2)}


def _check_tcp(url: str) -> dict:
    parsed = urlparse(url)
    with socket.create_connection((parsed.hostname, parsed.port), timeout=1):
        return {"url": url}


CHECKS = {"database": _check_database, "broker": _check_broker}


@never_cache
@require_GET
def healthz(request):
    components = {}
    for name, check in CHECKS.items():
        try:
            components[name] = {"state": "up", **check()}
        except Exception as exc:  # any failure of a dependency is a "down", with its reason
            components[name] = {"state": "down", "error": f"{type(exc).__name__}: {exc}"[:300]}
    # Components `make run` started report their own URL through HEALTHZ_EXTRA_URLS.
    for name, url in getattr(settings, "HEALTHZ_EXTRA_URLS", {}).items():
        try:
            components[name] = {"state": "up", **_check_tcp(url)}
        except OSError as exc:
            components[name] = {"state": "down", "error": str(exc)}
    healthy = all(c["state"] == "up" for c in components.values())
    return JsonResponse({"status": "ok" if healthy else "degraded", "components": components}, status=200 if healthy else 503)
