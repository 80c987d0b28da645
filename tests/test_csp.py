"""A Content-Security-Policy on every page (kernel/csp.py): the header on the dashboard, the
admin console, the login page, the API and its docs; a nonce fresh per reply; no template
with an inline script or inline event handler (they would not run); and in a real browser
(Debian's Chromium through Playwright) the pages load, htmx swaps, the charts draw and the
small page actions work with no CSP violation reported."""

import re
from pathlib import Path

import pytest
from django.test import Client

from harness import factories
from tests.browser import login, wait_until

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    "/models/",
    "/models/builds/",
    "/deployments/",
    "/deployments/endpoints/",
    "/deployments/keys/",
    "/experiments/",
    "/experiments/training/",
    "/monitoring/",
    "/monitoring/alerts/",
    "/admin/",
    "/api/v1/models/",
    "/api/docs/",
    "/api/redoc/",
]


def directives(header: str) -> dict[str, str]:
    return {part.split()[0]: part.strip() for part in header.split(";") if part.strip()}


@pytest.mark.django_db
def test_every_page_carries_the_policy_with_a_fresh_nonce(staff):
    client = Client()
    login_page = client.get("/login/")
    assert "script-src 'self' 'nonce-" in login_page["Content-Security-Policy"]
    client.force_login(staff)
    nonces = set()
    for path in PAGES:
        response = client.get(path)
        assert response.status_code == 200, path
        policy = directives(response["Content-Security-Policy"])
        assert policy["default-src"] == "default-src 'self'", path
        assert policy["object-src"] == "object-src 'none'" and policy["frame-ancestors"] == "frame-ancestors 'none'"
        script = policy["script-src"]
        assert "'unsafe-inline'" not in script and "'unsafe-eval'" not in script and "http" not in script, path
        nonces.add(re.search(r"'nonce-([^']+)'", script).group(1))
        if not path.startswith(("/api/docs/", "/api/redoc/")):
            assert "'unsafe-inline'" not in policy["style-src"], path
    assert len(nonces) == len(PAGES)


def test_no_template_has_an_inline_script_or_handler():
    """What the policy would block: a <script> without src (a JSON data block aside) and
    without the reply's nonce, or an on*= attribute."""
    offending = []
    for template in sorted((ROOT / "templates").rglob("*.html")):
        text = template.read_text()
        for match in re.finditer(r"<script\b([^>]*)>", text):
            attrs = match.group(1)
            if "src=" in attrs or "application/json" in attrs or "csp_nonce" in attrs:
                continue
            offending.append(f"{template.relative_to(ROOT)}: inline <script{attrs}>")
        for match in re.finditer(r"\s(on[a-z]+)=\"", text):
            offending.append(f"{template.relative_to(ROOT)}: inline handler {match.group(1)}")
        for match in re.finditer(r"<style\b([^>]*)>", text):
            if "csp_nonce" not in match.group(1):
                offending.append(f"{template.relative_to(ROOT)}: <style> without the nonce")
    assert not offending, "\n".join(offending)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_pages_work_under_the_policy_in_a_browser(live_server, browser_page, alice, team_a, onnx_path, tmp_path):
    """Every violation a page reports is collected (a listener the browser installs before
    any page script, which the policy does not govern); htmx's search swap, the charts, Redoc and
    the builds filter (a data attribute where an inline handler was) work."""
    factories.registered_model(team_a, name="csp-model")
    artifact = factories.artifact(team_a, onnx_path, tmp_path, model_name="csp-chart")
    page = browser_page
    page.add_init_script(
        "window.__csp = []; document.addEventListener('securitypolicyviolation', "
        "e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI + ' ' + (e.sample || '')));"
    )
    login(page, live_server.url, "alice")
    seen = {}
    for path in [p for p in PAGES if not p.startswith(("/admin/", "/api/v1/"))] + [
        f"/models/versions/{artifact.version.pk}/",
        "/models/csp-model/",
    ]:
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
        seen[path] = page.evaluate("window.__csp")
    # htmx: the model list's search swaps its rows in place
    page.goto(f"{live_server.url}/models/")
    page.fill("input[name=q]", "csp-mo")
    wait_until(page, "document.querySelectorAll('#model-rows tr').length >= 1")
    assert "csp-model" in page.inner_text("#model-rows")
    seen["htmx search"] = page.evaluate("window.__csp")
    # the Redoc page drew the schema (its inline start-up script ran with the nonce)
    page.goto(f"{live_server.url}/api/redoc/")
    page.wait_for_selector("text=/api/v1/pools/", timeout=30_000)
    seen["redoc"] = page.evaluate("window.__csp")
    # the builds page's status filter submits on change (a data attribute, no inline handler)
    page.goto(f"{live_server.url}/models/builds/")
    page.select_option("select[name=status]", "failed")
    page.wait_for_url("**/models/builds/?status=failed")
    seen["filter"] = page.evaluate("window.__csp")
    # Redoc's "by Redocly" logo comes from its CDN: refused on purpose (the docs fetch nothing from outside).
    wanted_refusals = {"img-src https://cdn.redoc.ly/redoc/logo-mini.svg "}
    violations = {k: [v for v in found if v not in wanted_refusals] for k, found in seen.items()}
    assert not any(violations.values()), {k: v for k, v in violations.items() if v}
    assert any(seen["redoc"])  # (so the policy was enforced on that page: the logo was refused)
