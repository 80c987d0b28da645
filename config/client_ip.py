"""The client's address for login throttling (django-axes), derived safely behind a proxy.

Behind a proxy every request comes from the proxy's address, so a lockout keyed on
(username, address) would lock a username out for everyone, and anyone could do it.
`client_ip` trusts X-Forwarded-For only when the connection comes from one of
TRUSTED_PROXIES: it walks the header from the right (the hop the nearest proxy saw),
skipping addresses that are themselves trusted proxies, and takes the first that is not;
from anyone else the header is ignored (a client cannot pick the address it is locked
under, nor someone else's). `never_locked` keeps TRUSTED_ADMIN_NETWORKS (e.g. a bastion
or the admin VPN) from ever being locked out, so an admin can always log in from there;
elsewhere `manage.py axes_reset_username admin` unlocks one username.
"""

import ipaddress

from django.conf import settings


def parse_networks(name: str, values: list[str]) -> tuple:
    """IP networks from a setting's list (a bare address is a /32 or /128); a wrong entry
    stops the start with a message naming the setting."""
    out = []
    for value in values:
        try:
            out.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{name}: {value!r} is not an IP address or network (e.g. 10.0.0.0/8)") from None
    return tuple(out)


def _address(value: str):
    try:
        return ipaddress.ip_address(value.strip().removeprefix("[").split("]")[0])
    except ValueError:
        return None


def _within(address, networks) -> bool:
    return address is not None and any(address in network for network in networks)


def client_ip(request) -> str:
    """AXES_CLIENT_IP_CALLABLE: the peer's address, or behind TRUSTED_PROXIES the nearest
    address in X-Forwarded-For that is not a trusted proxy."""
    remote = request.META.get("REMOTE_ADDR", "")
    proxies = settings.TRUSTED_PROXIES
    peer = _address(remote)
    if not proxies or not _within(peer, proxies):
        return remote
    client = peer
    for hop in reversed(request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")):
        address = _address(hop)
        if address is None:  # not an address: what lies left of it was not written by our proxies
            break
        client = address
        if not _within(address, proxies):
            break
    return str(client)


def never_locked(request, credentials=None) -> bool:
    """AXES_WHITELIST_CALLABLE: logins from TRUSTED_ADMIN_NETWORKS are never locked out."""
    networks = settings.TRUSTED_ADMIN_NETWORKS
    return bool(networks) and _within(_address(client_ip(request)), networks)
