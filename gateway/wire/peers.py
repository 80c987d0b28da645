"""Who a connection's client is, for the per-client connection and call caps (HTTP:
httpserver.py; gRPC: grpc/peers.py): the peer's IPv4 address, or the /64 prefix of an IPv6
one (one host is handed a whole /64, so counting its addresses one by one would let it take
every slot), or None for a peer an operator exempted (`GATEWAY_CLIENT_CAP_EXEMPT`: a load
balancer or proxy in front that carries many clients on its own address).

Over loopback every address of 127.0.0.0/8 is its own client, which is how the tests and the
benchmark play several clients on one machine (a client binds 127.0.0.2 as its source)."""

from __future__ import annotations

import ipaddress


class ClientKeys:
    """Maps a peer address to the key its caps are counted under (cached: a client opens
    many connections from one address)."""

    __slots__ = ("exempt", "cache")

    def __init__(self, exempt: tuple = ()):
        self.exempt = tuple(ipaddress.ip_network(net, strict=False) for net in exempt)
        self.cache: dict[str, str | None] = {}

    def key(self, host: str | None) -> str | None:
        if host is None:  # a Unix socket or an unknown peer: nothing to count it by
            return None
        cache = self.cache
        if host in cache:
            return cache[host]
        if len(cache) > 65536:  # an IPv6 client cycling addresses must not grow this without bound
            cache.clear()
        cache[host] = value = self._key(host)
        return value

    def _key(self, host: str) -> str | None:
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return host
        if address.version == 6 and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in net for net in self.exempt):
            return None
        if address.version == 6:
            return str(ipaddress.ip_network(f"{address}/64", strict=False))
        return str(address)


def parse_exempt(raw: str) -> tuple[str, ...]:
    """GATEWAY_CLIENT_CAP_EXEMPT: comma-separated networks (CIDR or single addresses); a bad
    one stops the process at start with its text."""
    networks = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValueError(f"GATEWAY_CLIENT_CAP_EXEMPT: {item!r} is not a network (e.g. 10.0.0.0/8)") from None
        networks.append(item)
    return tuple(networks)
