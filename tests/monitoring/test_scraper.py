"""The collector's scrapes on one asyncio loop (monitoring/collection/scraper.py) against real HTTP
servers on loopback: one team's wedged, oversized, redirecting or garbage target fails
alone and the others are stored in the same tick; wedged targets wait at the same time,
not one after another; connections are kept alive between ticks (and not when told)."""

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from monitoring.collection.scraper import scraper
from monitoring.collection.targets import ScrapeTarget
from monitoring.models import MetricSample, ScrapeState
from monitoring.services.collector import metrics_collect

pytestmark = pytest.mark.django_db


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Triton's and the gateway's servers

    def setup(self):
        super().setup()
        with self.server.lock:
            self.server.connections += 1
            self.server.open.append(self.connection)

    def do_GET(self):  # noqa: N802
        kind = self.path.strip("/").split("/")[0]
        if kind == "redirect":
            self.send_response(302)
            self.send_header("Location", "/metrics")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if kind == "stream":  # no Content-Length: read until the connection closes
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            for _ in range(64):
                self.wfile.write(b"y" * 65536)
            return
        body = {
            "metrics": self.server.metrics.text().encode(),
            "huge": b"x" * (3 * 1024 * 1024),
            "garbage": b'nv_inference_request_success{model="m" 1\n',  # no closing brace
        }[kind]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _start(port: int = 0, metrics=None) -> ThreadingHTTPServer:
    from tests.monitoring.conftest import GatewayMetrics

    httpd = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    httpd.daemon_threads = True
    httpd.handle_error = lambda request, address: None  # a client that hangs up mid-reply (the huge one)
    httpd.lock, httpd.connections, httpd.open, httpd.metrics = threading.Lock(), 0, [], metrics or GatewayMetrics()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    return httpd


def _stop(httpd: ThreadingHTTPServer) -> None:
    """Stop listening and close every open connection (what a process exit does)."""
    httpd.shutdown()
    httpd.server_close()
    for connection in httpd.open:
        try:
            connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


@pytest.fixture
def server():
    httpd = _start()
    yield httpd
    _stop(httpd)


@pytest.fixture
def wedged():
    """Listening sockets that never accept: a connection opens, no reply ever comes."""
    sockets = [socket.create_server(("127.0.0.1", 0), backlog=8) for _ in range(12)]
    yield [f"http://127.0.0.1:{s.getsockname()[1]}/metrics" for s in sockets]
    for s in sockets:
        s.close()


def test_one_teams_bad_targets_fail_alone_and_the_rest_is_stored(server, wedged, settings, team_a, team_b):
    settings.MONITORING_SCRAPE_TIMEOUT_S = 0.5
    settings.MONITORING_SCRAPE_MAX_BYTES = 1024 * 1024
    good = ScrapeTarget(kind="gateway", url=f"{server.url}/metrics", endpoint_teams={"ctr": team_a.pk})
    bad = [
        ScrapeTarget(kind="triton", url=url, endpoint_teams={"other": team_b.pk})
        for url in (*wedged, *(f"{server.url}/{kind}" for kind in ("huge", "stream", "redirect", "garbage")))
    ]
    targets = [bad[0], good, *bad[1:]]
    metrics_collect(targets=targets)
    server.metrics.serve("ctr", "stable", [0.002] * 5, [200] * 5)
    started = time.monotonic()
    summary = metrics_collect(targets=targets)
    took = time.monotonic() - started
    assert summary["scraped"] == 1 and summary["failed"] == len(bad)
    errors = summary["errors"]
    assert all("TimeoutError" in errors[url] for url in wedged)
    assert "reply of 3145728 bytes, over 1048576 bytes" in errors[f"{server.url}/huge"]
    assert "reply over 1048576 bytes" in errors[f"{server.url}/stream"]
    assert errors[f"{server.url}/redirect"] == "OSError: HTTP 302"  # not followed
    assert errors[f"{server.url}/garbage"].startswith("unparseable metrics")
    # 12 wedged targets waited at the same time: one after another they take 12 x 0.5 s
    assert took < len(wedged) * 0.5, took
    stored = MetricSample.objects.filter(endpoint="ctr", variant="stable", metric="requests")
    assert [s.value for s in stored] == [5.0] and stored[0].team_id == team_a.pk
    assert not MetricSample.objects.filter(endpoint="other").exists()
    failing = ScrapeState.objects.get(target=f"triton:{wedged[0]}")
    assert not failing.ok and failing.failing_since and "TimeoutError" in failing.error
    assert ScrapeState.objects.get(target=good.key).ok


@pytest.mark.parametrize("keep_alive", [True, False])
def test_connections_are_kept_alive_between_ticks_unless_told(server, settings, keep_alive):
    settings.MONITORING_SCRAPE_KEEP_ALIVE = keep_alive
    scraper(keep_alive=keep_alive).fetch_all([], timeout=1, deadline=1, concurrency=4, max_bytes=1)  # a fresh session
    target = ScrapeTarget(kind="gateway", url=f"{server.url}/metrics")
    before = server.connections
    for _ in range(3):
        assert metrics_collect(targets=[target])["scraped"] == 1
    assert server.connections - before == (1 if keep_alive else 3)


def test_a_target_that_restarts_between_ticks_is_scraped_on_a_new_connection(server):
    """A kept-alive connection the target closed (a restarted replica) is not reused."""
    target = ScrapeTarget(kind="gateway", url=f"{server.url}/metrics")
    assert metrics_collect(targets=[target])["scraped"] == 1
    _stop(server)
    restarted = _start(server.server_address[1], server.metrics)
    try:
        summary = metrics_collect(targets=[target])
        assert summary["scraped"] == 1, summary["errors"]
        assert restarted.connections == 1
    finally:
        _stop(restarted)
