"""Traffic splits that apps above deployments contribute to the route table.

The experiments app serves an experiment's arms through the gateway without deployments
importing it (the layers contract): at start-up it registers a provider here, and
`deployments.routes.route_table` asks every provider for the endpoints it splits.

A provider takes the serving endpoints and returns {endpoint_id: Overlay}. An active
rollout wins over an overlay (experiments refuse to start while one is in progress).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Overlay:
    name: str  # recorded by the gateway with every exposure (the route table's endpoint.experiment)
    salt: str
    arms: tuple  # ((artifact, weight_bp), ...): the first is the endpoint's stable artifact (role stable)
    url: str = ""  # the page that shows it (the endpoint page links there)
    token_key: str = ""  # hex HMAC key of its exposure tokens (route table: exposure_token_key), "" when it takes none


_providers: list[Callable] = []


def register_route_overlay(provider: Callable) -> None:
    if provider not in _providers:
        _providers.append(provider)


def route_overlays(endpoints) -> dict:
    out: dict = {}
    for provider in _providers:
        out.update(provider(endpoints))
    return out
