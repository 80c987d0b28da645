"""Traffic splits that apps above deployments contribute to the route table.

The experiments app serves an experiment's arms through the gateway without deployments
importing it (the layers contract): at start-up it registers a provider here, and
`deployments.routes.route_table` asks every provider for the endpoints it splits.

A provider takes the serving endpoints and returns {endpoint_id: Overlay}. An active
rollout wins over an overlay (experiments refuse to start while one is in progress).

The route table asks through `route_overlays_isolated`: a provider that raises for the
whole batch is asked again endpoint by endpoint, so one experiment's bad rows cost only
its own endpoint's split (named in the failures), never the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db import DatabaseError


@dataclass(frozen=True)
class Overlay:
    name: str  # recorded by the gateway with every exposure (the route table's endpoint.experiment)
    salt: str
    arms: tuple  # ((artifact, weight_bp), ...): the first is the endpoint's stable artifact (role stable)
    url: str = ""  # the page that shows it (the endpoint page links there)
    token_key: str = ""  # hex HMAC key of its exposure tokens (route table: exposure_token_key), "" when it takes none
    token_ttl_s: int = 3600  # how long a token stays citable: its attribution window (exposure_token_ttl_s)


_providers: list[Callable] = []


def register_route_overlay(provider: Callable) -> None:
    if provider not in _providers:
        _providers.append(provider)


def route_overlays(endpoints) -> dict:
    out: dict = {}
    for provider in _providers:
        out.update(provider(endpoints))
    return out


def route_overlays_isolated(endpoints) -> tuple[dict, dict]:
    """({endpoint_id: Overlay}, {endpoint_id: why its overlay could not be read})."""
    out: dict = {}
    failures: dict = {}
    for provider in _providers:
        try:
            out.update(provider(endpoints))
            continue
        except DatabaseError:
            raise
        except Exception:  # find the endpoint(s) it fails for; the others keep their splits
            pass
        for endpoint in endpoints:
            try:
                out.update(provider([endpoint]))
            except DatabaseError:
                raise
            except Exception as exc:
                failures[endpoint.pk] = f"{type(exc).__name__}: {exc}"[:300]
    return out, failures
