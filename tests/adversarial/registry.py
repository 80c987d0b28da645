"""The standing adversarial suite's registry: every way a tenant (a team member, a key holder
or an anonymous client) can hand the platform something, and the abuse classes each case covers.

Each area keeps its surfaces in its own module under `tests/adversarial/surfaces/` (a list
named `SURFACES`); `all_surfaces()` collects them. A surface names the routes it stands for
(gateway paths as `METHOD /template`, gRPC methods as `grpc /package.Service/Method`, REST API
routes as `METHOD /api/v1/...` templates, dashboard pages as `page /template`, or a registration
field as `field <resource>.<name>`)
and, for each abuse class that applies, the tests that attack it (pytest node ids, relative to
the repository root). `test_registry.py` fails when the gateway or the API has a route no
surface lists, or when a case names a test that does not exist.

Every case runs against real processes beside a second tenant's traffic and asserts two
things: the abuser gets a clear 4xx/429 (or its own object fails), and the other tenant's
success rate and latency hold within the tolerance the case states.
"""

from __future__ import annotations

import enum
import importlib
import pkgutil
from dataclasses import dataclass, field


class Abuse(enum.StrEnum):
    """The abuse classes a surface is attacked with."""

    SSRF = "ssrf"  # URLs that point inside: loopback, private, link-local, metadata, own listeners
    LOOP = "loop"  # a target that leads back to the platform itself
    OVERSIZED = "oversized"  # bodies, shapes, values, counts beyond what the object can need
    SLOW = "slow"  # slow senders and slow readers
    HALF_OPEN = "half_open"  # connections and streams opened and never finished
    FLOOD = "flood"  # volume from one source (requests, connections, events, tokens)
    SECRET_EXFILTRATION = "secret_exfiltration"  # reading or sending a secret one may not see
    COLLIDING_IDS = "colliding_ids"  # ids and values chosen to collide with another tenant's
    FOREIGN_OBJECTS = "foreign_objects"  # another team's objects, ids, namespaces, images
    MALFORMED = "malformed"  # bytes, protobuf, JSON, archives that do not parse as declared
    FORGERY = "forgery"  # tokens, signatures, sybils that try to count as someone else


@dataclass(frozen=True)
class Surface:
    """One tenant-facing surface: what it is, the routes it stands for, and its cases."""

    name: str
    routes: tuple[str, ...]
    cases: dict[Abuse, tuple[str, ...]] = field(default_factory=dict)
    # An abuse class that does not apply, with the reason (so "not covered" is a decision, not a gap).
    not_applicable: dict[Abuse, str] = field(default_factory=dict)


def all_surfaces() -> list[Surface]:
    """Every surface of every area module under `tests/adversarial/surfaces/`."""
    from tests.adversarial import surfaces as package

    found: list[Surface] = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        found.extend(getattr(module, "SURFACES", ()))
    return found
