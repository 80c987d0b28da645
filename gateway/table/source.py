"""Where the route table comes from: the control plane (HTTP poll with If-None-Match,
held by the control plane until the table changes where it can: a long poll) or a local file (reloaded when it changes). Either way a new table is checked before it
replaces the current one, per entry (route_checks.py): the entries and keys that pass
are applied, the refused ones are listed in /status (`routes.refused`), counted in
gateway_route_refused and logged once per change. A document that is not a route table
at all (or cannot be fetched) is refused whole: the last good table stays in service and
the failure shows in /metrics and the health detail."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path

import urllib3

from gateway.table.routes import RouteTableError
from gateway.telemetry import metrics

log = logging.getLogger("gateway.routes")
POLL_TIMEOUT_S = 2.0


class SourceStatus:
    """What the health detail and /metrics say about the route source."""

    def __init__(self, kind: str, where: str, stale_after_s: float):
        self.kind = kind
        self.where = where
        self.stale_after_s = stale_after_s
        self.etag: str | None = None
        self.version: str | None = None
        self.last_ok = 0.0  # monotonic time the source last confirmed (200 or 304)
        self.loaded_at = 0.0  # wall time the current table was installed
        self.last_error: str | None = None
        self.failing = False
        self.refused: list = []  # route_checks.Refusal of the current table
        metrics.ROUTE_AGE.set_function(self.age)
        metrics.ROUTE_STALE.set_function(lambda: 1.0 if self.stale else 0.0)

    def age(self) -> float:
        return time.monotonic() - self.last_ok if self.last_ok else -1.0

    @property
    def stale(self) -> bool:
        return self.failing or not self.last_ok or self.age() > self.stale_after_s

    def detail(self) -> dict:
        return {
            "source": self.kind,
            "where": self.where,
            "version": self.version,
            "etag": self.etag,
            "age_s": round(self.age(), 3) if self.last_ok else None,
            "stale": self.stale,
            "last_error": self.last_error,
            "loaded_at": self.loaded_at or None,
            "refused": [refusal.as_dict() for refusal in self.refused],
        }


class RouteSource:
    def __init__(self, install, status: SourceStatus, interval_s: float):
        self.install = install  # callable(document) -> refusals; raises RouteTableError
        self.status = status
        self.interval_s = interval_s

    def _ok(self) -> None:
        self.status.last_ok = time.monotonic()
        self.status.failing = False

    def _fail(self, result: str, message: str) -> None:
        metrics.ROUTE_FETCHES.labels(result).inc()
        if message != self.status.last_error or not self.status.failing:
            kept = (
                f"keeping the last good table, version {self.status.version}" if self.status.version else "no table yet"
            )
            log.warning("route table %s: %s (%s)", result, message, kept)
        self.status.failing = True
        self.status.last_error = message

    def _apply(self, document, etag: str | None) -> bool:
        try:
            refused = self.install(document) or []
        except RouteTableError as exc:
            self._fail("invalid", f"invalid route table: {exc}")
            return False
        metrics.ROUTE_FETCHES.labels("ok").inc()
        if refused != self.status.refused:
            for refusal in refused:
                log.warning(
                    "route table: %s %r refused (%s): %s", refusal.kind, refusal.name, refusal.code, refusal.reason
                )
            if self.status.refused and not refused:
                log.info("route table: every entry applied again")
        self.status.refused = refused
        self.status.etag = etag
        self.status.version = document.get("version")
        self.status.loaded_at = time.time()
        self.status.last_error = None
        self._ok()
        log.info(
            "route table installed: version %s, %d endpoints, %d LLM endpoints, %d refused",
            self.status.version,
            len(document["endpoints"]),
            len(document.get("llm_endpoints", ())),
            sum(1 for r in refused if r.kind in ("endpoint", "llm_endpoint")),
        )
        return True


def _in_daemon_thread(fn, *args):
    """fn(*args) in a daemon thread of its own, awaited: a poll the control plane holds never
    keeps the worker from stopping (asyncio.to_thread's executor is joined at shutdown)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result, error):
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(result)

    def run():
        try:
            result, error = fn(*args), None
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop closed meanwhile: nobody awaits it
            pass

    threading.Thread(target=run, name="route-poll", daemon=True).start()
    return future


class HttpRouteSource(RouteSource):
    """Polls with If-None-Match. With `wait_s`, each poll asks the control plane to hold it
    until the table changes or `wait_s` passes (`?wait=`, answered 304 then): a poll it held
    is followed by the next at once, a poll answered at once (a control plane that does not
    hold polls, or holds enough of them already) by the next after interval_s as before."""

    def __init__(self, install, status, interval_s, url: str, token: str | None, wait_s: float = 0.0):
        super().__init__(install, status, interval_s)
        self.url = url
        self.wait_s = wait_s
        self.held = False  # whether the last poll was held by the control plane
        if wait_s > 0:
            self.url = f"{url}{'&' if '?' in url else '?'}wait={wait_s:g}"
        self.headers = {"Accept": "application/json"}
        if token:
            self.headers["Authorization"] = f"Token {token}"
        self.bad_etag: str | None = None  # an invalid table is not re-parsed until it changes
        # one connection, kept alive, to the control plane; retries off (the next poll is the retry)
        self.http = urllib3.PoolManager(num_pools=1, maxsize=1, retries=False)

    def _get(self, headers: dict) -> tuple[int, str | None, bytes]:
        """The poll itself, in a thread (blocking urllib3): its timeout is the control plane's,
        never the time this worker's loop takes to come round to reading the answer while the
        data path is saturated (9 route polls timed out that way under a benchmark)."""
        timeout = urllib3.Timeout(total=POLL_TIMEOUT_S + (self.wait_s if "If-None-Match" in headers else 0.0))
        reply = self.http.request("GET", self.url, headers=headers, timeout=timeout)
        return reply.status, reply.headers.get("ETag"), reply.data

    async def fetch_once(self) -> None:
        headers = dict(self.headers)
        etag = self.bad_etag or self.status.etag
        if etag:
            headers["If-None-Match"] = etag
        started = time.monotonic()
        self.held = False
        try:
            status, new_etag, body = await _in_daemon_thread(self._get, headers)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._fail("error", f"GET {self.url} failed: {type(exc).__name__}: {exc}")
            return
        # held: the control plane kept it open for at least half its wait (a change then answers at once)
        self.held = self.wait_s > 0 and etag is not None and time.monotonic() - started >= self.wait_s / 2
        if status == 304:
            if self.bad_etag:  # still the same invalid table
                self._fail("invalid", self.status.last_error or "invalid route table")
                return
            metrics.ROUTE_FETCHES.labels("not_modified").inc()
            self._ok()
            return
        if status != 200:
            self._fail("error", f"GET {self.url} -> HTTP {status}: {body[:200].decode(errors='replace')}")
            return
        try:
            document = json.loads(body)
        except ValueError as exc:
            self._fail("invalid", f"route table is not JSON: {exc}")
            self.bad_etag = new_etag
            return
        if self._apply(document, new_etag):
            self.bad_etag = None
        else:
            self.bad_etag = new_etag

    async def run(self) -> None:
        while True:
            await self.fetch_once()
            if not self.held:
                await asyncio.sleep(self.interval_s)


class FileRouteSource(RouteSource):
    def __init__(self, install, status, interval_s, path: Path):
        super().__init__(install, status, interval_s)
        self.path = path
        self.seen: tuple | None = None

    def check(self) -> None:
        try:
            stat = self.path.stat()
            key = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
            if key == self.seen:
                if not self.status.failing:
                    self._ok()
                return
            self.seen = key
            document = json.loads(self.path.read_text())
        except OSError as exc:
            self._fail("error", f"cannot read {self.path}: {exc}")
            self.seen = None
            return
        except ValueError as exc:
            self._fail("invalid", f"{self.path} is not JSON: {exc}")
            return
        self._apply(document, None)

    async def run(self) -> None:
        while True:
            self.check()
            await asyncio.sleep(self.interval_s)
