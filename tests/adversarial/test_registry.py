"""The adversarial suite's registry holds every tenant-facing route: it fails when the gateway
(its HTTP dispatch, `gateway.process.server.http_routes`, and the methods of its KServe v2 gRPC
service) or the control plane (every /api/v1/ route from Django's URL resolver, with its
methods, and every dashboard page a team member reaches) gains a route that no surface in
tests/adversarial/surfaces/ lists, when a surface lists a route that no longer exists, and
when a case names a test that does not exist (checked in the test file's syntax tree, so
nothing is imported or collected)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from django.urls import URLResolver, get_resolver

from gateway.process.server import http_routes
from gateway.v2.grpc.health import SERVICES
from tests.adversarial.registry import Abuse, Surface, all_surfaces

ROOT = Path(__file__).resolve().parents[2]
# Django routes no tenant input reaches, each with the reason.
NOT_TENANT_FACING = {
    "admin/": "the admin console: platform admins only (staff), not a team's surface",
    "api/schema/": "the OpenAPI document: static, takes no input",
    "api/docs/": "Swagger UI page: static, takes no input",
    "api/redoc/": "ReDoc page: static, takes no input",
    "": "a redirect to the model list",
    "healthz": "the platform's health: takes no input",
}
NAMED_GROUP = re.compile(r"\(\?P<(\w+)>")
CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")
SKIPPED_METHODS = {"head", "options", "trace"}


def template(pattern: str) -> str:
    """A Django route or regex as `/path/{name}/`: named groups and converters become `{name}`."""
    out, i = [], 0
    while i < len(pattern):
        match = NAMED_GROUP.match(pattern, i)
        if match is None:
            out.append(pattern[i])
            i += 1
            continue
        depth, j = 1, match.end()
        while depth:  # past the group's own (possibly nested) parentheses
            depth += {"(": 1, ")": -1}.get(pattern[j], 0)
            j += 1
        out.append("{" + match.group(1) + "}")
        i = j
    text = CONVERTER.sub(r"{\1}", "".join(out)).replace("^", "").replace("$", "")
    return "/" + text


def _walk(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern), pattern.callback


def _methods(callback) -> list[str]:
    actions = getattr(callback, "actions", None)  # a DRF viewset route: {method: action}
    if actions:
        return sorted(m.upper() for m in actions if m not in SKIPPED_METHODS)
    view = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if view is not None:
        return sorted(m.upper() for m in view.http_method_names if m not in SKIPPED_METHODS and hasattr(view, m))
    return []


def django_routes() -> tuple[set[str], set[str]]:
    """({`METHOD /api/v1/...`}, {`page /...`}) of the tenant-facing Django routes."""
    api, pages = set(), set()
    for raw, callback in _walk(get_resolver().url_patterns):
        if raw.startswith("api/v1/"):
            api.update(f"{method} {template(raw)}" for method in _methods(callback))
        elif not any(raw == skip or (skip and raw.startswith(skip)) for skip in NOT_TENANT_FACING):
            pages.add(f"page {template(raw)}")
    return api, pages


def grpc_routes() -> set[str]:
    """Every method of every service the gateway's gRPC port serves (inference, health, reflection)."""
    return {f"grpc /{service.full_name}/{method.name}" for service in SERVICES for method in service.methods}


def listed(surfaces: list[Surface]) -> set[str]:
    return {route for surface in surfaces for route in surface.routes}


@cache
def _test_names(path: Path) -> frozenset[str]:
    """`name` and `Class::name` of every test function in a test file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.update(
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            )
    return frozenset(names)


def missing_node(node_id: str) -> str | None:
    """Why a case's pytest node id names no test, or None when it does."""
    path, _, name = node_id.partition("::")
    file = ROOT / path
    if not (path.startswith("tests/") and file.name.startswith("test_") and file.is_file()):
        return f"{node_id}: no test file {path}"
    name = name.split("[", 1)[0]  # a parametrized id names its function
    if name and name not in _test_names(file):
        return f"{node_id}: {path} has no test {name}"
    return None


def problems_of(surfaces: list[Surface], routes: set[str], prefixes: tuple[str, ...]) -> list[str]:
    """Routes no surface lists, and listed routes (of these prefixes) that do not exist."""
    have = listed(surfaces)
    out = [f"no surface lists {route}" for route in sorted(routes - have)]
    out += [
        f"a surface lists {route}, which does not exist"
        for route in sorted(have - routes)
        if route.startswith(prefixes)
    ]
    return out


def test_every_gateway_http_route_is_listed():
    routes = set(http_routes())
    assert len(routes) >= 20
    assert not problems_of(all_surfaces(), routes, ("GET /v", "POST /v", "GET /m", "GET /s", "GET /h"))


def test_every_control_port_route_is_listed():
    from gateway.process.control import PATHS

    assert not problems_of(all_surfaces(), {f"control GET {path}" for path in PATHS}, ("control ",))


def test_every_grpc_method_is_listed():
    assert not problems_of(all_surfaces(), grpc_routes(), ("grpc ",))


def test_every_api_route_is_listed():
    api, _ = django_routes()
    assert "POST /api/v1/notification-channels/" in api and "GET /api/v1/gateway/routes" in api
    assert not problems_of(all_surfaces(), api, ("GET /api/", "POST /api/", "PUT /api/", "PATCH /api/", "DELETE /api/"))


def test_every_dashboard_page_is_listed():
    _, pages = django_routes()
    assert "page /models/{name}/versions/new/" in pages and "page /login/" in pages
    assert not problems_of(all_surfaces(), pages, ("page ",))


def test_every_case_names_a_test_that_exists():
    problems = []
    for surface in all_surfaces():
        assert surface.routes, f"{surface.name} lists no route"
        for abuse, nodes in surface.cases.items():
            assert isinstance(abuse, Abuse) and nodes, (surface.name, abuse)
            problems += [p for p in map(missing_node, nodes) if p]
        for abuse, reason in surface.not_applicable.items():
            assert reason and abuse not in surface.cases, (surface.name, abuse)
    assert not problems, "\n".join(problems)


def test_the_checks_catch_what_they_name():
    surfaces = [
        Surface("x", ("GET /v2/models/stats", "GET /v2/gone"), {Abuse.FLOOD: ("tests/adversarial/test_registry.py",)})
    ]
    assert problems_of(surfaces, {"GET /v2/models/stats", "POST /v2/new"}, ("GET /v",)) == [
        "no surface lists POST /v2/new",
        "a surface lists GET /v2/gone, which does not exist",
    ]
    assert missing_node("tests/adversarial/test_registry.py::test_every_grpc_method_is_listed") is None
    assert missing_node("tests/adversarial/test_registry.py::test_the_checks_catch_what_they_name[x]") is None
    assert "has no test" in missing_node("tests/adversarial/test_registry.py::test_nothing")
    assert "no test file" in missing_node("tests/adversarial/test_nowhere.py::test_x")
    assert "no test file" in missing_node("tests/adversarial/registry.py")
    assert template("^rollouts/(?P<pk>(exp-)?[0-9]+)/(?P<action>promote|pause)/$") == "/rollouts/{pk}/{action}/"
    assert template("models/<slug:name>/aliases/<str:alias>/") == "/models/{name}/aliases/{alias}/"
