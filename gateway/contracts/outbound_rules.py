"""The rule every URL a tenant hands the platform must pass (LLM backend base URLs, alert
webhooks, a provider secret's origins): one rule at both doors. The control plane applies
it when the URL is registered (kernel/outbound.py: a 400 naming the rule) and the gateway
again at every connection it opens to a tenant's backend (gateway/llm/guard.py), on the
very address it connects to, so a name that resolves elsewhere later (DNS rebinding) is
caught where it matters.

An address is refused when it is loopback, link-local, private, multicast, reserved,
unspecified, shared (CGNAT), a cloud metadata address or otherwise not globally routable
(IPv4-mapped and 6to4 IPv6 forms are judged by the IPv4 inside), unless it lies in a network
an operator allow-listed for internal backends. One of the platform's own listeners (the
gateway's HTTP and gRPC ports, the web port, the Triton pools' ports) is refused even then:
an allow-listed private network is for a team's vLLM, not for another team's Triton
`unload` URL or a loop back into the gateway.

A base URL is fixed at registration: http(s), a host, no user:password@, no query, no
fragment, no `?` or `#` anywhere, no backslash, whitespace or control character; the
gateway builds the upstream URL from its parts (scheme, host, port, path + the route it
appends), never by pasting strings, so nothing in it can change the request sent.

Pure apart from `is_own_address` (one bind() per new address, cached): stdlib only, no Django.
"""

from __future__ import annotations

import enum
import ipaddress
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit

SCHEMES = {"http": 80, "https": 443}
# Metadata services that are not caught by the categories below on every platform
# (AWS/GCP/Azure 169.254.169.254 is link-local; AWS IPv6 fd00:ec2::254 is private;
# Alibaba 100.100.100.200 is shared address space) — named so the reason says so.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "169.254.170.2")
)
MAX_URL = 2000
MAX_NETWORKS = 256
MAX_LISTENERS = 4096


class Rule(enum.StrEnum):
    """Why a URL or an address is refused (API error codes and gateway metric labels)."""

    SCHEME = "scheme"  # not http(s)
    NO_HOST = "no_host"
    MALFORMED = "malformed"  # not parseable, too long, whitespace/control/backslash
    USERINFO = "userinfo"  # user:password@ (credentials belong in a provider secret)
    QUERY = "query"  # ?... (would swallow the path the gateway appends)
    FRAGMENT = "fragment"
    PATH = "path"  # an origin that carries a path
    METADATA = "metadata"
    UNSPECIFIED = "unspecified"
    LOOPBACK = "loopback"
    LINK_LOCAL = "link_local"
    MULTICAST = "multicast"
    RESERVED = "reserved"
    PRIVATE = "private"
    NOT_GLOBAL = "not_global"
    PLATFORM_LISTENER = "platform_listener"  # the gateway, the web server, a Triton pool


SENTENCES = {
    Rule.METADATA: "a cloud metadata address",
    Rule.UNSPECIFIED: "unspecified",
    Rule.LOOPBACK: "loopback",
    Rule.LINK_LOCAL: "link-local",
    Rule.MULTICAST: "multicast",
    Rule.RESERVED: "reserved",
    Rule.PRIVATE: "private",
    Rule.NOT_GLOBAL: "not globally routable",
}
INTERNAL = frozenset(SENTENCES)  # the rules an allow-listed network lifts


@dataclass(frozen=True)
class Refusal:
    rule: Rule
    sentence: str

    def __str__(self) -> str:
        return self.sentence


def _ip(address: str):
    return ipaddress.ip_address(address.split("%", 1)[0])


def ip_literal(host: str) -> str | None:
    """The address a host written as an IP literal stands for ("[::1]" -> "::1"), or None for a name."""
    try:
        return str(_ip(host.strip("[]")))
    except ValueError:
        return None


def address_rule(address: str) -> tuple[Rule, str] | None:
    """(rule, "loopback (as ::ffff:7f00:1)"-style words) of an address that may not be
    called, or None for a globally routable one."""
    ip = _ip(address)
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour
        if inner is not None:
            found = address_rule(str(inner))
            return (found[0], f"{found[1]} (as {ip})") if found else None
    if ip in METADATA_ADDRESSES:
        return Rule.METADATA, SENTENCES[Rule.METADATA]
    for rule, flag in (
        (Rule.UNSPECIFIED, ip.is_unspecified),
        (Rule.LOOPBACK, ip.is_loopback),
        (Rule.LINK_LOCAL, ip.is_link_local),
        (Rule.MULTICAST, ip.is_multicast),
        (Rule.RESERVED, ip.is_reserved),
        (Rule.PRIVATE, ip.is_private),
    ):
        if flag:
            return rule, SENTENCES[rule]
    if not ip.is_global:
        return Rule.NOT_GLOBAL, SENTENCES[Rule.NOT_GLOBAL]
    return None


def parse_networks(items) -> tuple:
    """The allow-listed networks (CIDR strings) as ip_network objects; ValueError naming a bad one."""
    networks = []
    for item in list(items)[:MAX_NETWORKS]:
        try:
            networks.append(ipaddress.ip_network(str(item).strip(), strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not a network (give CIDR, e.g. 10.20.0.0/16)") from None
    return tuple(networks)


def in_networks(address: str, networks) -> bool:
    ip = _ip(address)
    inner = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return any(ip in net or (inner is not None and inner in net) for net in networks)


_own: dict[str, bool] = {}


def is_own_address(address: str) -> bool:
    """Whether `address` is this host's own (loopback, unspecified, or an interface address:
    bind() to it succeeds). A listener bound to every address answers there too."""
    ip = _ip(address)
    inner = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    ip = inner or ip
    if ip.is_loopback or ip.is_unspecified:
        return True
    key = str(ip)
    found = _own.get(key)
    if found is None:
        family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((key, 0))
            found = True
        except OSError:
            found = False
        if len(_own) < 4096:
            _own[key] = found
    return found


@dataclass(frozen=True)
class Listeners:
    """The platform's own listeners: exact (address, port) pairs, and ports it listens on at
    every address of this host (a listener bound to 0.0.0.0 or to loopback)."""

    addresses: frozenset = field(default_factory=frozenset)  # {(ip, port)}
    local_ports: frozenset = field(default_factory=frozenset)  # {port}

    def holds(self, address: str, port: int) -> bool:
        ip = _ip(address)
        inner = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        if (str(ip), port) in self.addresses or (inner is not None and (str(inner), port) in self.addresses):
            return True
        return port in self.local_ports and is_own_address(address)

    def union(self, other: Listeners) -> Listeners:
        return Listeners(self.addresses | other.addresses, self.local_ports | other.local_ports)


def listeners_from(pairs) -> Listeners:
    """Listeners from (address, port) pairs whose host is an IP literal: a loopback or
    unspecified one stands for every address of this host at that port."""
    addresses, local = set(), set()
    for host, port in pairs:
        try:
            ip = _ip(host.strip("[]"))
        except ValueError:
            continue  # a name: the caller resolves it first
        if ip.is_loopback or ip.is_unspecified:
            local.add(int(port))
        else:
            addresses.add((str(ip), int(port)))
    return Listeners(frozenset(addresses), frozenset(local))


def split_listener(text: str) -> tuple[str, int] | None:
    """("host", port) of a "host:port" / "[v6]:port" / URL listener entry, or None."""
    text = text.strip()
    if "://" not in text:
        text = f"http://{text}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or port is None:
        return None
    return parts.hostname.lower(), port


def address_refusal(address: str, port: int, *, allowed_networks=(), listeners: Listeners | None = None):
    """The Refusal of connecting to (address, port), or None. The platform's own listeners
    are refused whatever is allow-listed; internal addresses unless their network is."""
    if listeners is not None and listeners.holds(address, port):
        return Refusal(Rule.PLATFORM_LISTENER, f"{address}:{port} is one of the platform's own listeners")
    found = address_rule(address)
    if found is None or in_networks(address, allowed_networks):
        return None
    return Refusal(found[0], f"{address} is {found[1]}")


def url_refusal(url: str, *, fixed: bool = True) -> Refusal | None:
    """The Refusal of a URL's form (no address judged), or None. `fixed`: a base URL the
    gateway appends a route to (no query, no fragment)."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL:
        return Refusal(Rule.MALFORMED, f"give a URL of 1..{MAX_URL} characters")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 or c == "\\" for c in url):
        return Refusal(Rule.MALFORMED, "the URL holds whitespace, a control character or a backslash")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        return Refusal(Rule.MALFORMED, f"not a valid URL: {exc}")
    if parts.scheme.lower() not in SCHEMES:
        return Refusal(Rule.SCHEME, "only http:// and https:// URLs may be called")
    if not parts.hostname:
        return Refusal(Rule.NO_HOST, "the URL names no host")
    if "@" in parts.netloc:
        return Refusal(Rule.USERINFO, "no user:password@ in the URL (put a key in a provider secret)")
    if fixed and ("?" in url or parts.query):
        return Refusal(Rule.QUERY, "no query (?...) in the URL: its path and query are fixed at registration")
    if fixed and ("#" in url or parts.fragment):
        return Refusal(Rule.FRAGMENT, "no fragment (#...) in the URL")
    return None


def origin_of(url: str) -> str:
    """ "scheme://host[:port]" of a URL, lower-cased, the scheme's default port left out:
    the unit a provider secret is bound to."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    return f"{scheme}://{host}" if port is None or port == SCHEMES.get(scheme) else f"{scheme}://{host}:{port}"


def origin_refusal(origin: str) -> Refusal | None:
    """The Refusal of an origin's form ("https://api.example.com[:port]", nothing after), or None."""
    found = url_refusal(origin, fixed=True)
    if found is not None:
        return found
    if urlsplit(origin).path not in ("", "/"):
        return Refusal(Rule.PATH, "an origin is scheme://host[:port], with no path")
    return None
