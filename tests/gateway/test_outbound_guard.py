"""The outbound rule both doors apply (gateway/contracts/outbound_rules.py) and the gateway's half of it
(gateway/llm/guard.py): a tenant URL's form, the address rules, the platform's listeners, and
the check at connect time inside aiohttp's connector, on the address actually connected to.

Connections are real (aiohttp to a local aiohttp server). The DNS-rebinding case needs a name
that resolves to a chosen address; it gives the connector a resolver that answers as a
rebinding DNS server would (aiohttp's resolver interface), and says so.
"""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from gateway.contracts import outbound_rules as rules
from gateway.llm.guard import ATTEMPT, OutboundGuard


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        # the trick: a `?` that swallows the route the gateway appends
        ("http://10.0.0.5:8000/v2/repository/models/blue/unload?", rules.Rule.QUERY),
        ("http://h/v1?x=1", rules.Rule.QUERY),
        ("http://h/v1#", rules.Rule.FRAGMENT),
        ("http://user:pw@h/v1", rules.Rule.USERINFO),
        ("http://h/v1\\..\\x", rules.Rule.MALFORMED),
        ("http://h/v 1", rules.Rule.MALFORMED),
        ("http://h/v1\r\nX-Injected: 1", rules.Rule.MALFORMED),
        ("gopher://h/v1", rules.Rule.SCHEME),
        ("http:///v1", rules.Rule.NO_HOST),
        ("http://h:99999/v1", rules.Rule.MALFORMED),
    ],
)
def test_a_base_url_that_could_change_the_request_is_refused(url, rule):
    assert rules.url_refusal(url).rule == rule


def test_a_plain_base_url_passes_and_a_webhook_may_keep_its_query():
    assert rules.url_refusal("https://api.example.com/v1") is None
    assert rules.url_refusal("https://hooks.example.com/x?token=1", fixed=False) is None


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://API.example.com/v1", "https://api.example.com"),
        ("https://api.example.com:443/v1", "https://api.example.com"),
        ("http://api.example.com:80", "http://api.example.com"),
        ("http://api.example.com:8443/v1", "http://api.example.com:8443"),
        ("http://[::1]:9000/v1", "http://[::1]:9000"),
    ],
)
def test_origins_are_normalised(url, origin):
    assert rules.origin_of(url) == origin


def test_internal_addresses_unless_allowed_and_the_platforms_listeners_always():
    listeners = rules.listeners_from([("10.9.0.4", 8001), ("127.0.0.1", 8080)])
    allowed = rules.parse_networks(["10.9.0.0/16", "127.0.0.0/8"])
    assert rules.address_refusal("10.9.1.1", 8000).rule == rules.Rule.PRIVATE
    assert rules.address_refusal("10.9.1.1", 8000, allowed_networks=allowed) is None
    # a pool replica's exact address, and a port of this host's own listener at any own address
    assert rules.address_refusal("10.9.0.4", 8001, allowed_networks=allowed, listeners=listeners).rule == (
        rules.Rule.PLATFORM_LISTENER
    )
    for address in ("127.0.0.1", "127.0.0.2", "::ffff:127.0.0.1", "0.0.0.0"):
        refusal = rules.address_refusal(address, 8080, allowed_networks=allowed, listeners=listeners)
        assert refusal.rule == rules.Rule.PLATFORM_LISTENER, address
    assert rules.address_refusal("169.254.169.254", 80, allowed_networks=allowed).rule == rules.Rule.METADATA
    with pytest.raises(ValueError, match="not a network"):
        rules.parse_networks(["10.0.0.0/33"])


class Recorder:
    """A real local server that counts what reaches it."""

    def __init__(self):
        self.hits = 0

    async def start(self) -> int:
        async def answer(request):
            self.hits += 1
            return web.json_response({"ok": True})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", answer)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]


class RebindingResolver(aiohttp.abc.AbstractResolver):
    """Answers every name with 127.0.0.1, as a rebinding DNS server does once a URL was vetted."""

    async def resolve(self, host, port=0, family=socket.AF_INET):
        return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": socket.AF_INET, "proto": 0, "flags": 0}]

    async def close(self):
        pass


async def _call(guard: OutboundGuard, url: str, resolver=None):
    connector = aiohttp.TCPConnector(socket_factory=guard.socket, resolver=resolver, force_close=True)
    refusals: list = []
    token = ATTEMPT.set((URL(url).host, refusals))
    try:
        async with aiohttp.ClientSession(connector=connector) as session:
            try:
                async with session.get(url, allow_redirects=False) as reply:
                    return reply.status, refusals
            except aiohttp.ClientConnectorError:
                return None, refusals
    finally:
        ATTEMPT.reset(token)


def test_the_check_runs_on_the_address_connected_to():
    """A name that resolves inside at connect time (DNS rebinding) and an IP literal (aiohttp
    resolves nothing for it) are both refused before a socket exists; the server sees nothing.
    Allowing the network (an operator's llm_rules) lets the same call through."""

    async def run():
        recorder = Recorder()
        port = await recorder.start()
        guard = OutboundGuard([("0.0.0.0", 1)])
        try:
            status, refusals = await _call(guard, f"http://llm.example.test:{port}/v1", RebindingResolver())
            assert status is None and [r.rule for r in refusals] == [rules.Rule.LOOPBACK]
            status, refusals = await _call(guard, f"http://127.0.0.1:{port}/v1")
            assert status is None and [r.rule for r in refusals] == [rules.Rule.LOOPBACK]
            assert recorder.hits == 0
            guard.configure({"allowed_networks": ["127.0.0.0/8"]}, [])
            status, refusals = await _call(guard, f"http://llm.example.test:{port}/v1", RebindingResolver())
            assert status == 200 and refusals == [] and recorder.hits == 1
            # the same server named as a pool replica by the table: the platform's, never a tenant's
            guard.configure({"allowed_networks": ["127.0.0.0/8"]}, [f"http://127.0.0.1:{port}"])
            status, refusals = await _call(guard, f"http://127.0.0.1:{port}/v1")
            assert status is None and [r.rule for r in refusals] == [rules.Rule.PLATFORM_LISTENER]
            assert recorder.hits == 1
        finally:
            await recorder.runner.cleanup()

    asyncio.run(run())


def test_listener_names_are_resolved_after_each_table():
    async def run():
        guard = OutboundGuard([])
        guard.configure({"allowed_networks": ["127.0.0.0/8"], "platform_listeners": ["localhost:9123"]}, [])
        assert guard.refusal("127.0.0.1", 9123, "x") is None  # not resolved yet
        await guard.refresh()
        assert guard.refusal("127.0.0.1", 9123, "x").rule == rules.Rule.PLATFORM_LISTENER

    asyncio.run(run())
