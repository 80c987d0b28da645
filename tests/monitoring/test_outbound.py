"""User-configured outbound URLs (alert webhooks) cannot reach inside.

The issue's scenario (a team admin aims a webhook at another team's Triton on a local
port) is refused when saved (API 400 naming the reason, admin form error) and when
delivered (a row saved before this check existed: the local server gets nothing). Also:
IPv6, IPv4-mapped/6to4 and numeric forms; every resolved address is judged; redirects
are not followed; response bodies are never kept; the operator allow-list works; the
vetted address is the one connected to (no DNS rebinding between check and connect).

Name resolution is real (getaddrinfo) except in the two tests that need a host name
resolving to chosen addresses; those replace socket.getaddrinfo, as a fake DNS server
would, and say so."""

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness import factories
from kernel.outbound import OutboundRefused, address_problem, post_json, vet_url
from monitoring.models import DeliveryStatus, NotificationChannel, NotificationDelivery
from monitoring.services.alerts import alert_raise
from monitoring.services.notifications import notification_deliver
from registry.models import Role

pytestmark = pytest.mark.django_db


class Receiver:
    """A real local HTTP server: `reply` is (status, headers, body) of every answer;
    `hits` lists the paths requested."""

    def __init__(self, reply=(200, {}, b"")):
        owner = self
        self.reply, self.hits = reply, []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.hits.append((self.path, self.headers.get("Host")))
                status, headers, body = owner.reply
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def team_admin_api(team_a, api_for):
    admin = factories.user("ada")
    factories.member(admin, team_a, Role.ADMIN)
    return api_for(admin)


@pytest.mark.parametrize(
    "address, problem",
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12::1", "private"),
        ("169.254.169.254", "a cloud metadata address"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("100.100.100.200", "a cloud metadata address"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "not globally routable"),
        ("::ffff:127.0.0.1", "loopback (as ::ffff:7f00:1)"),
        ("::ffff:10.0.0.1", "private (as ::ffff:a00:1)"),
        ("2002:7f00:1::", "loopback (as 2002:7f00:1::)"),
        ("93.184.216.34", None),
        ("2606:4700:4700::1111", None),
        ("::ffff:93.184.216.34", None),
    ],
)
def test_addresses_are_judged(address, problem):
    assert address_problem(address) == problem


@pytest.mark.parametrize(
    "url, reason",
    [
        ("http://127.0.0.1:8001/v2/repository/models/ctr/unload", "127.0.0.1 is loopback"),
        ("http://localhost/hook", "is loopback"),
        ("http://[::1]:9/hook", "::1 is loopback"),
        ("http://[::ffff:127.0.0.1]/hook", "loopback (as ::ffff:7f00:1)"),
        ("http://2130706433/hook", "(127.0.0.1) is loopback"),  # 127.0.0.1 as one decimal number
        ("http://0x7f.1/hook", "(127.0.0.1) is loopback"),
        ("http://169.254.169.254/latest/meta-data/", "a cloud metadata address"),
        ("http://0.0.0.0:8090/", "unspecified"),
        ("ftp://93.184.216.34/x", "only http:// and https://"),
    ],
)
def test_internal_urls_are_refused(url, reason):
    with pytest.raises(OutboundRefused) as exc:
        vet_url(url)
    assert reason in str(exc.value) and "OUTBOUND_ALLOWED_HOSTS" in str(exc.value) or reason.startswith("only")


def test_the_platforms_own_listeners_are_refused_even_when_allowed(settings):
    """The web port (and the gateway's, and every pool replica's) stays refused when the host
    or its network is allow-listed: an allowed network is for a team's server, not the platform."""
    settings.OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    for port in (settings.PORT, settings.GATEWAY_PORT, settings.GATEWAY_GRPC_PORT):
        with pytest.raises(OutboundRefused) as exc:
            vet_url(f"http://127.0.0.1:{port}/hook")
        assert exc.value.rule == "platform_listener" and "own listeners" in str(exc.value)
    assert vet_url("http://127.0.0.1:8001/hook").addresses == ("127.0.0.1",)


def test_an_allowed_network_opens_only_itself(settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["10.20.0.0/16"]
    assert vet_url("http://10.20.3.4:9000/v1", fixed=True).addresses == ("10.20.3.4",)
    with pytest.raises(OutboundRefused) as exc:
        vet_url("http://10.21.3.4:9000/v1", fixed=True)
    assert exc.value.rule == "private" and "OUTBOUND_ALLOWED_NETWORKS" in str(exc.value)


def test_a_public_address_passes():
    target = vet_url("https://93.184.216.34:8443/hook?x=1")
    assert (target.scheme, target.port, target.path, target.addresses) == (
        "https",
        8443,
        "/hook?x=1",
        ("93.184.216.34",),
    )


def test_any_internal_address_among_many_refuses(monkeypatch):
    """A name with one public and one private address (fake resolver): refused."""
    real = socket.getaddrinfo

    def resolver(host, *args, **kwargs):
        if host == "hooks.example.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, 80)) for ip in ("93.184.216.34", "10.0.0.7")]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    with pytest.raises(OutboundRefused, match=r"hooks.example.test \(10.0.0.7\) is private"):
        vet_url("http://hooks.example.test/x")


def test_the_allow_list_lets_an_operator_reach_a_named_internal_host(settings, receiver):
    with pytest.raises(OutboundRefused):
        vet_url(f"http://127.0.0.1:{receiver.port}/hook")
    settings.OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    assert post_json(f"http://127.0.0.1:{receiver.port}/hook", b"{}", timeout=5) == 200
    assert receiver.hits == [("/hook", f"127.0.0.1:{receiver.port}")]
    with pytest.raises(OutboundRefused):  # only the named host
        vet_url(f"http://localhost:{receiver.port}/hook")


def test_delivery_connects_to_the_vetted_address_only(settings, receiver, monkeypatch):
    """DNS rebinding: the (fake) resolver answers the local receiver once, then an
    unroutable address. post_json resolves once and connects to what it vetted, with
    the original Host header."""
    settings.OUTBOUND_ALLOWED_HOSTS = ["hooks.internal.test"]
    real, answers = socket.getaddrinfo, iter(["127.0.0.1"])

    def resolver(host, port, *args, **kwargs):
        if host == "hooks.internal.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers, "10.255.255.1"), port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    assert post_json(f"http://hooks.internal.test:{receiver.port}/h", b"{}", timeout=5) == 200
    assert receiver.hits == [("/h", f"hooks.internal.test:{receiver.port}")]


def test_the_issue_scenario_is_refused_at_save(team_a, team_admin_api, receiver):
    """A webhook aimed at a local port (another team's Triton in the issue)."""
    target = f"http://127.0.0.1:{receiver.port}/v2/repository/models/blue/unload"
    response = team_admin_api.post(
        "/api/v1/notification-channels/", {"team": team_a.name, "kind": "webhook", "target": target}, format="json"
    )
    assert response.status_code == 400, response.content
    assert "loopback" in response.json()["detail"] and "target" in response.json()["detail"]
    for form in (
        f"http://[::ffff:127.0.0.1]:{receiver.port}/x",
        f"http://2130706433:{receiver.port}/x",
        "http://10.0.0.5/x",
    ):
        refused = team_admin_api.post(
            "/api/v1/notification-channels/", {"team": team_a.name, "kind": "webhook", "target": form}, format="json"
        )
        assert refused.status_code == 400, form
    assert not NotificationChannel.objects.exists() and receiver.hits == []
    ok = team_admin_api.post(
        "/api/v1/notification-channels/",
        {"team": team_a.name, "kind": "webhook", "target": "https://93.184.216.34/hook"},
        format="json",
    )
    assert ok.status_code == 201, ok.content


def test_the_admin_form_refuses_it_too(client, team_a, receiver):
    client.force_login(factories.user("root", staff=True))
    page = client.post(
        "/admin/monitoring/notificationchannel/add/",
        {
            "team": team_a.pk,
            "kind": "webhook",
            "target": f"http://127.0.0.1:{receiver.port}/hook",
            "min_severity": "warning",
            "enabled": "on",
        },
    )
    assert page.status_code == 200 and b"is loopback" in page.content
    assert not NotificationChannel.objects.exists()


def _alert(team):
    return alert_raise(
        kind="canary_rollback",
        reason="p99 over SLO",
        severity="critical",
        endpoint="ctr",
        rollout_id=1,
        team=team,
        evidence={},
    )[0]


def test_the_issue_scenario_is_refused_at_delivery(team_a, receiver):
    """A channel stored before the save-time check existed: delivery vets again, gives
    up at once (retrying cannot help), and the local server receives nothing."""
    target = f"http://127.0.0.1:{receiver.port}/v2/repository/models/blue/unload"
    NotificationChannel.objects.bulk_create([NotificationChannel(team=team_a, kind="webhook", target=target)])
    alert = _alert(team_a)
    assert notification_deliver(alert_id=alert.pk, kind="webhook", target=target, notify_round=1) == ("gave_up", 0.0)
    row = NotificationDelivery.objects.get(alert=alert)
    assert row.status == DeliveryStatus.GAVE_UP and row.response_code is None
    assert row.error.startswith("refused: 127.0.0.1 is loopback")
    assert receiver.hits == []


def test_redirects_are_not_followed_and_bodies_not_kept(team_a, settings):
    settings.OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    elsewhere = Receiver()
    redirecting = Receiver((302, {"Location": f"http://127.0.0.1:{elsewhere.port}/internal"}, b"moved"))
    secret = Receiver((404, {}, b"secret: 10.0.0.5 runs redis"))
    try:
        alert = _alert(team_a)
        url = f"http://127.0.0.1:{redirecting.port}/hook"
        assert notification_deliver(alert_id=alert.pk, kind="webhook", target=url, notify_round=1)[0] == "retry"
        row = NotificationDelivery.objects.get(alert=alert, target=url)
        assert (row.response_code, row.error) == (302, "HTTP 302: redirects are not followed")
        assert redirecting.hits == [("/hook", f"127.0.0.1:{redirecting.port}")] and elsewhere.hits == []

        url = f"http://127.0.0.1:{secret.port}/hook"
        notification_deliver(alert_id=alert.pk, kind="webhook", target=url, notify_round=1)
        row = NotificationDelivery.objects.get(alert=alert, target=url)
        assert (row.response_code, row.error) == (404, "HTTP 404") and row.duration_ms > 0
    finally:
        for server in (elsewhere, redirecting, secret):
            server.close()


def test_the_migration_drops_bodies_kept_before(team_a):
    import importlib

    from django.apps import apps

    alert = _alert(team_a)
    kept = NotificationDelivery.objects.create(
        alert=alert,
        notify_round=1,
        kind="webhook",
        target="http://x.example/",
        attempt=1,
        status="failed",
        response_code=404,
        error="HTTP 404: <html>secret</html>",
    )
    other = NotificationDelivery.objects.create(
        alert=alert,
        notify_round=1,
        kind="webhook",
        target="http://y.example/",
        attempt=1,
        status="failed",
        error="ConnectionRefusedError: [Errno 111]",
    )
    importlib.import_module("monitoring.migrations.0003_delivery_errors_without_bodies").drop_bodies(apps, None)
    kept.refresh_from_db()
    other.refresh_from_db()
    assert kept.error == "HTTP 404" and other.error == "ConnectionRefusedError: [Errno 111]"
