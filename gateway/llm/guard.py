"""The gateway's half of the outbound guard: what a tenant's LLM backend (kind openai: a URL a
team registered) may reach, checked at every connection the gateway opens to it. The rule is
gateway/contracts/outbound_rules.py's, the one the control plane applied when the URL was registered
(kernel/outbound.py); the settings come in the route table's `llm_rules` (allowed networks and
hosts, the platform's listeners, the hop mark, the first-token ceiling).

Where the check sits: aiohttp's connector hands every address it is about to connect to (a
name's resolved addresses and IP literals alike) to a socket factory; `OutboundGuard.socket`
refuses one the rule forbids before the socket exists. So the address checked is the address
connected to: a name that resolved to a public address at registration and to 127.0.0.1 now
(DNS rebinding) is refused here. Platform pools (kind triton) are the control plane's
addresses, never a tenant's: they go through another session, without this factory.

The platform's listeners are this gateway's own ports (at every address of this host when it
listens on 0.0.0.0 or loopback), every pool replica the table names, and the table's
`platform_listeners` (the web server, other gateways, pools not serving now); names among them
are resolved in the background after each table (`refresh`), literals are exact at once.

The hop mark: every request to a tenant backend carries `X-Modelplane-Hop: <mark>`; a request
arriving with this installation's mark came back through a loop (a backend that is, or relays
to, a gateway of ours) and is refused with 508 before it costs anything.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import logging
import socket

from gateway.contracts import outbound_rules as rules

log = logging.getLogger("gateway")

HOP_HEADER = "X-Modelplane-Hop"
HOP_KEY = HOP_HEADER.lower()
DEFAULT_HOP_MARK = "modelplane-gateway"
DEFAULT_FIRST_TOKEN_MAX_MS = 60_000
MAX_NAMES = 256  # listener names resolved per table

# (host being connected, [refusals]) of the attempt in progress: set by the attempt, read by the
# socket factory (the connector's tasks copy the context, and share the list)
ATTEMPT: contextvars.ContextVar[tuple[str, list] | None] = contextvars.ContextVar("llm_attempt", default=None)


class Refused(OSError):
    """An address the outbound guard refused (raised inside aiohttp's connect)."""

    def __init__(self, refusal: rules.Refusal):
        super().__init__(errno.EACCES, f"refused by the outbound guard ({refusal.rule})")
        self.refusal = refusal


class OutboundGuard:
    """The current rules (replaced by `configure` with each route table)."""

    def __init__(self, own: list[tuple[str, int]]):
        self.own = rules.listeners_from(own)  # this gateway's HTTP and gRPC ports
        self.allowed_networks: tuple = ()
        self.allowed_hosts: frozenset = frozenset()
        self.listeners = self.own
        self.named: rules.Listeners = rules.Listeners()  # resolved names (refresh)
        self.names: list[tuple[str, int]] = []
        self.hop_mark = DEFAULT_HOP_MARK
        self.first_token_max_s = DEFAULT_FIRST_TOKEN_MAX_MS / 1000.0
        self.refreshing: asyncio.Task | None = None

    def configure(self, doc: dict, platform_urls) -> None:
        """Take a table's `llm_rules` (schema-checked) and the pool addresses it names."""
        try:
            self.allowed_networks = rules.parse_networks(doc.get("allowed_networks", ()))
        except ValueError as exc:  # the schema's pattern let a bad one through: allow nothing
            log.warning("llm_rules.allowed_networks: %s; no internal network is allowed", exc)
            self.allowed_networks = ()
        self.allowed_hosts = frozenset(h.lower().strip("[]") for h in doc.get("allowed_hosts", ()))
        self.hop_mark = doc.get("hop_mark") or DEFAULT_HOP_MARK
        self.first_token_max_s = doc.get("first_token_timeout_max_ms", DEFAULT_FIRST_TOKEN_MAX_MS) / 1000.0
        pairs, names = [], []
        for entry in [*doc.get("platform_listeners", ()), *platform_urls]:
            found = rules.split_listener(entry)
            if found is None:
                continue
            literal = rules.ip_literal(found[0])
            if literal is not None:
                pairs.append((literal, found[1]))
            elif len(names) < MAX_NAMES:
                names.append(found)
        self.listeners = self.own.union(rules.listeners_from(pairs))
        self.names = sorted(set(names))

    async def refresh(self) -> None:
        """Resolve the listeners named by host name (the table's; pools on Kubernetes)."""
        loop = asyncio.get_running_loop()
        pairs = []
        for host, port in self.names:
            try:
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except (OSError, UnicodeError):
                continue
            pairs += [(info[4][0], port) for info in infos]
        self.named = rules.listeners_from(pairs)

    def refusal(self, address: str, port: int, host: str) -> rules.Refusal | None:
        """Why the gateway may not connect to (address, port) for a tenant backend named `host`."""
        if self.listeners.holds(address, port) or self.named.holds(address, port):
            return rules.Refusal(rules.Rule.PLATFORM_LISTENER, f"{address}:{port} is one of the platform's listeners")
        if host in self.allowed_hosts:
            return None
        return rules.address_refusal(address, port, allowed_networks=self.allowed_networks)

    def socket(self, addr_info) -> socket.socket:
        """aiohttp's socket factory for tenant backends: the address vetted, then a socket."""
        family, kind, proto, _, sockaddr = addr_info
        attempt = ATTEMPT.get()
        host = attempt[0] if attempt is not None else ""
        refusal = self.refusal(sockaddr[0], sockaddr[1], host)
        if refusal is not None:
            if attempt is not None:
                attempt[1].append(refusal)
            raise Refused(refusal)
        return socket.socket(family, kind, proto)


def url_problem(url: str) -> rules.Refusal | None:
    """A tenant backend URL's form (the table's; the control plane refused it at registration)."""
    return rules.url_refusal(url, fixed=True)
