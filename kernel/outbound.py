"""Outbound HTTP to URLs that users configure (alert webhooks), made so that it cannot
reach inside: the host is resolved and refused when ANY of its addresses is loopback,
link-local, private, multicast, reserved, unspecified, shared (CGNAT), a cloud metadata
address or otherwise not globally routable (IPv4-mapped and 6to4 IPv6 forms are judged by
the IPv4 inside) — unless the operator names the host in OUTBOUND_ALLOWED_HOSTS.

The same check runs when the URL is saved (a 400 naming the reason) and again at every
delivery, and delivery connects to the very address that was vetted (no second DNS
lookup a rebinding server could answer differently), sends the original Host header and
TLS server name, follows no redirect and never reads the response body: the caller gets
the status code only.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

# Metadata services that are not caught by the categories below on every platform
# (AWS/GCP/Azure 169.254.169.254 is link-local; AWS IPv6 fd00:ec2::254 is private;
# Alibaba 100.100.100.200 is shared address space) — named so the reason says so.
METADATA_ADDRESSES = {
    ipaddress.ip_address("169.254.169.254"),
    ipaddress.ip_address("fd00:ec2::254"),
    ipaddress.ip_address("100.100.100.200"),
    ipaddress.ip_address("169.254.170.2"),
}
SCHEMES = {"http": 80, "https": 443}


class OutboundRefused(ValueError):
    """The URL may not be called; str() says why (shown to the user as a 400)."""


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


def address_problem(address: str) -> str | None:
    """Why `address` may not be called ("loopback", "private", …), or None."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour
        if inner is not None:
            problem = address_problem(str(inner))
            return f"{problem} (as {ip})" if problem else None
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    for name, flag in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
        ("private", ip.is_private),
    ):
        if flag:
            return name
    if not ip.is_global:
        return "not globally routable"
    return None


def _resolve(host: str, port: int) -> tuple[str, ...]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Unresolvable(f"host {host!r} does not resolve ({exc}).") from None
    addresses = tuple(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise Unresolvable(f"host {host!r} does not resolve.")
    return addresses


def vet_url(url: str) -> Target:
    """Parse and resolve `url`; raise OutboundRefused naming the reason when it may not
    be called. Returns where to connect (only vetted addresses)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise OutboundRefused(f"not a valid URL: {exc}.") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise OutboundRefused("only http:// and https:// URLs may be called.")
    host = (parts.hostname or "").lower()
    if not host:
        raise OutboundRefused("the URL names no host.")
    port = port or SCHEMES[scheme]
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    addresses = _resolve(host, port)
    if host not in _allowed_hosts():
        for address in addresses:
            problem = address_problem(address)
            if problem:
                shown = host if host == address else f"{host} ({address})"
                raise OutboundRefused(
                    f"{shown} is {problem}: outbound calls may not reach internal addresses "
                    "(an operator may allow the host in OUTBOUND_ALLOWED_HOSTS)."
                )
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
