"""Creating an endpoint from the dashboard in a real browser (Debian's Chromium via
Playwright): the service's refusal (a GPU stable on a CPU pool) is shown under the stable
field with what was typed kept; a fitting stable creates the endpoint and opens its page."""

from pathlib import Path

import pytest
from django.conf import settings

from deployments.models import Endpoint
from harness import factories
from tests.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_create_an_endpoint_with_a_refusal_first(live_server, browser_page, deployer, team_a, artifact_factory):
    page = browser_page
    factories.pool(team_a, "cpu-pool", ready_replicas=1)
    fp32 = artifact_factory(team_a, model_name="ctr")
    fp16 = artifact_factory(team_a, model_name="ctr", variant="onnx-fp16")  # needs a GPU

    login(page, live_server.url, deployer.username)
    page.goto(f"{live_server.url}/deployments/endpoints/")
    page.click("#new-endpoint")
    page.wait_for_selector("#endpoint-form")
    # an LLM SLO, shown for kind LLM only (hidden by the form's deferred script once it has run)
    page.wait_for_selector("#id_ttft_slo_ms", state="hidden", timeout=10_000)
    page.select_option("#id_kind", "llm")
    assert page.is_visible("#id_ttft_slo_ms")
    page.select_option("#id_kind", "tensor")
    page.fill("#id_name", "ads-ranker")
    page.select_option("#id_pool", "cpu-pool")
    page.select_option("#id_stable_artifact", str(fp16.pk))
    page.fill("#id_slo_p99_ms", "35")
    page.check("input[name=public][value=true]")
    page.click("#endpoint-form button[type=submit]")
    page.wait_for_selector("#error-stable_artifact")
    assert "needs a GPU; pool 'cpu-pool' is cpu" in page.inner_text("#error-stable_artifact")
    assert page.input_value("#id_name") == "ads-ranker" and page.input_value("#id_slo_p99_ms") == "35"
    assert page.is_checked("input[name=public][value=true]")
    assert not Endpoint.objects.exists()
    out = Path(settings.VAR_DIR) / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / "endpoint-form-error.png"), full_page=True)

    page.select_option("#id_stable_artifact", str(fp32.pk))
    page.click("#endpoint-form button[type=submit]")
    page.wait_for_selector("#edit-endpoint")
    assert page.url.endswith("/deployments/endpoints/ads-ranker/")
    endpoint = Endpoint.objects.get()
    assert (endpoint.stable_artifact_id, endpoint.slo_p99_ms, endpoint.public) == (fp32.pk, 35, True)
    assert "SLO p99 35.0 ms" in page.inner_text("#rollout-status")
