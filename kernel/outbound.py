"""Outbound HTTP to URLs that users configure (alert webhooks, LLM backend base URLs, a
provider secret's origins), made so that it cannot reach inside. The rule itself is
gateway/contracts/outbound_rules.py's, the one rule both doors apply (here when a URL is saved, in the
gateway at every connection to a tenant's backend): the host is resolved and refused when
ANY of its addresses is loopback, link-local, private, multicast, reserved, unspecified,
shared (CGNAT), a cloud metadata address or otherwise not globally routable, unless the
operator names the host in OUTBOUND_ALLOWED_HOSTS or its network in
OUTBOUND_ALLOWED_NETWORKS; and refused whatever is allowed when it is one of the platform's
own listeners (`platform_listeners`: the web port, the gateway's HTTP and gRPC ports, every
pool replica, OUTBOUND_PLATFORM_LISTENERS).

The same check runs when the URL is saved (a 400 naming the reason) and again at every
delivery, and delivery connects to the very address that was vetted (no second DNS
lookup a rebinding server could answer differently), sends the original Host header and
TLS server name, follows no redirect and never reads the response body: the caller gets
the status code only.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.utils.module_loading import import_string

from gateway.contracts import outbound_rules as rules
from kernel.conf import setting

SCHEMES = rules.SCHEMES
origin_of = rules.origin_of  # a provider secret's unit: "scheme://host[:port]"
origin_refusal = rules.origin_refusal
REASON_HINT = "an operator may allow the host in OUTBOUND_ALLOWED_HOSTS or its network in OUTBOUND_ALLOWED_NETWORKS"
MAX_LISTENER_NAMES = 256  # listener host names resolved per check


class OutboundRefused(ValueError):
    """The URL may not be called; str() says why (shown to the user as a 400), `rule` which
    rule (gateway/outbound_rules.Rule)."""

    def __init__(self, message: str, rule: str = "malformed"):
        super().__init__(message)
        self.rule = str(rule)


class Unresolvable(OutboundRefused):
    """The host does not resolve (now): nothing to judge yet. Saving such a URL is
    allowed (DNS for a new hook may come later); a delivery fails and is retried."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # as written in the URL (Host header, TLS server name)
    port: int
    path: str  # path and query
    addresses: tuple[str, ...]  # vetted IP addresses to connect to, in resolver order


def _allowed_hosts() -> set[str]:
    return {host.lower().strip("[]") for host in getattr(settings, "OUTBOUND_ALLOWED_HOSTS", [])}


def allowed_networks() -> tuple:
    """OUTBOUND_ALLOWED_NETWORKS as networks (a bad entry stops the check: an operator's typo
    must not open or close everything silently)."""
    return rules.parse_networks(setting("OUTBOUND_ALLOWED_NETWORKS"))


def address_problem(address: str) -> str | None:
    """Why `address` may not be called ("loopback", "private", …), or None."""
    found = rules.address_rule(address)
    return found[1] if found else None


def platform_listener_entries() -> list[str]:
    """ "host:port" of every listener of the platform: this host's web and gateway ports,
    OUTBOUND_PLATFORM_LISTENERS, and each OUTBOUND_LISTENER_SOURCES callable's (every pool
    replica). What the gateway gets in its route table too (deployments/routes.py)."""
    entries = [f"127.0.0.1:{port}" for port in (setting("PORT"), setting("GATEWAY_PORT")) if port]
    for extra in (setting("GATEWAY_GRPC_PORT"), setting("GATEWAY_CONTROL_PORT")):
        if extra:
            entries.append(f"127.0.0.1:{extra}")
    entries += list(setting("OUTBOUND_PLATFORM_LISTENERS"))
    for path in setting("OUTBOUND_LISTENER_SOURCES"):
        entries += list(import_string(path)())
    return list(dict.fromkeys(entries))[: rules.MAX_LISTENERS]


def platform_listeners() -> rules.Listeners:
    """The listeners of `platform_listener_entries`, names resolved now."""
    pairs, names = [], 0
    for entry in platform_listener_entries():
        found = rules.split_listener(entry)
        if found is None:
            continue
        host, port = found
        literal = rules.ip_literal(host)
        if literal is not None:
            pairs.append((literal, port))
            continue
        names += 1
        if names > MAX_LISTENER_NAMES:
            continue
        try:
            pairs += [(info[4][0], port) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
        except (OSError, UnicodeError):
            continue  # a listener that does not resolve cannot be reached either
    return rules.listeners_from(pairs)


def _resolve(host: str, port: int) -> tuple[str, ...]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Unresolvable(f"host {host!r} does not resolve ({exc}).", "unresolvable") from None
    addresses = tuple(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise Unresolvable(f"host {host!r} does not resolve.", "unresolvable")
    return addresses


def vet_url(url: str, *, fixed: bool = False) -> Target:
    """Parse and resolve `url`; raise OutboundRefused naming the reason when it may not
    be called (Unresolvable when its host does not resolve now). Returns where to connect
    (only vetted addresses). `fixed`: a base URL a route is appended to (an LLM backend's,
    a secret's origin): no query or fragment."""
    form = rules.url_refusal(url, fixed=fixed)
    if form is not None:
        raise OutboundRefused(f"{form.sentence}.", form.rule)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port or SCHEMES[scheme]
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    addresses = _resolve(host, port)
    listeners = platform_listeners()
    networks = () if host in _allowed_hosts() else allowed_networks()
    for address in addresses:
        if host in _allowed_hosts() and not listeners.holds(address, port):
            continue
        refusal = rules.address_refusal(address, port, allowed_networks=networks, listeners=listeners)
        if refusal is not None:
            shown = host if host == address else f"{host} ({address})"
            if refusal.rule == rules.Rule.PLATFORM_LISTENER:
                message = (
                    f"{shown} port {port} is one of the platform's own listeners (its gateway, web server or a "
                    "Triton pool): outbound calls may never reach it."
                )
            else:
                words = rules.address_rule(address)[1]
                message = f"{shown} is {words}: outbound calls may not reach internal addresses ({REASON_HINT})."
            raise OutboundRefused(message, refusal.rule)
    return Target(scheme, host, port, path, addresses)


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, *args, address: str, **kwargs):
        super().__init__(*args, **kwargs)
        self._address = address

    def connect(self):
        self.sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, *args, address: str, **kwargs):
        super().__init__(*args, **kwargs)
        self._address = address

    def connect(self):
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def post_json(url: str, body: bytes, *, timeout: float) -> int:
    """POST `body` (JSON) to a vetted `url`; return the HTTP status. Raises
    OutboundRefused (not allowed) or OSError/http.client.HTTPException (network). A
    redirect is returned as its 3xx status, never followed; the body is never read."""
    target = vet_url(url)
    last_error: OSError | None = None
    for address in target.addresses:
        if target.scheme == "https":
            conn = _PinnedHTTPS(
                target.host, target.port, timeout=timeout, address=address, context=ssl.create_default_context()
            )
        else:
            conn = _PinnedHTTP(target.host, target.port, timeout=timeout, address=address)
        try:
            conn.connect()
        except OSError as exc:
            last_error = exc
            conn.close()
            continue
        try:
            conn.request(
                "POST",
                target.path,
                body=body,
                headers={"Content-Type": "application/json", "User-Agent": "modelplane-notifier"},
            )
            return conn.getresponse().status
        finally:
            conn.close()
    raise last_error or OSError(f"cannot connect to {target.host}")
