"""One real browser walk through the dashboard: Debian's Chromium driven by Playwright
(never `playwright install`). Logs in, registers a model, uploads a version, and saves
a screenshot under VAR_DIR/screenshots/ for people to look at."""

from pathlib import Path

import pytest
from django.conf import settings

from registry.models import ModelVersion, RegisteredModel
from tests.browser import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_register_model_and_upload_version_through_the_ui(live_server, browser_page, alice, team_a, onnx_path):
    page = browser_page
    page.goto(f"{live_server.url}/models/")
    assert "/login/" in page.url
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-for-tests-only")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/models/")

    page.click("text=Register model")
    page.fill("#id_name", "browser-ctr")
    page.select_option("#id_team", "team-a")
    page.fill("#id_description", "registered by the browser test")
    page.click("button:has-text('Register')")
    page.wait_for_url(f"{live_server.url}/models/browser-ctr/")
    assert RegisteredModel.objects.filter(name="browser-ctr", team=team_a).exists()

    page.click("text=Upload version")
    page.set_input_files("#id_file", str(onnx_path))
    page.click("button:has-text('Register version')")
    page.wait_for_selector("#signature")
    version = ModelVersion.objects.get(model__name="browser-ctr")
    assert page.url.endswith(f"/models/versions/{version.pk}/")
    signature_text = page.inner_text("#signature")
    assert "dense" in signature_text and "sparse" in signature_text and "ctr" in signature_text

    # Live search swaps only the rows (htmx partial), with the URL kept in sync.
    page.goto(f"{live_server.url}/models/")
    page.fill("input[name=q]", "browser")
    wait_until(page, "document.querySelector('#model-rows').innerText.includes('browser-ctr')")
    page.fill("input[name=q]", "zzz-nothing")
    wait_until(page, "document.querySelector('#model-rows').innerText.includes('No model matches')")

    out = Path(settings.VAR_DIR) / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    page.goto(f"{live_server.url}/models/versions/{version.pk}/")
    page.screenshot(path=str(out / "version-page.png"), full_page=True)
    assert (out / "version-page.png").stat().st_size > 10_000
