"""An LLM endpoint created and edited from the dashboard in a real browser (Debian's
Chromium via Playwright): with kind LLM the New endpoint form pre-fills the LLM defaults
where the LLM service defines them (deployments/services/llm_endpoints.py: a 120 s timeout,
sticky X-Session-Id), shows the LLM settings and TTFT/ITL SLOs and hides what an LLM canary
is not judged on; back to tensor, the tensor defaults (the model's) return. The endpoint
page's header then names the TTFT/ITL SLOs the judge uses, and Edit offers the LLM settings
(fallbacks, first-token timeout, context, max tokens)."""

import pytest

from deployments.forms import kind_defaults
from deployments.models import Endpoint
from deployments.services.llm_endpoints import LLM_DEFAULTS
from harness import factories
from tests.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_llm_endpoint_from_the_form_has_llm_defaults(live_server, browser_page, deployer, team_a):
    factories.pool(team_a, "cpu-pool", ready_replicas=1)
    stable = factories.llm_artifact(team_a, model_name="chat", context_length=2048)
    fallback = factories.llm_artifact(team_a, model_name="backup", kind="openai")
    tensor = kind_defaults("tensor")
    assert (tensor["timeout_ms"], tensor["sticky_header"]) != (
        LLM_DEFAULTS["timeout_ms"],
        LLM_DEFAULTS["sticky_header"],
    )

    page = browser_page
    login(page, live_server.url, deployer.username)
    page.goto(f"{live_server.url}/deployments/endpoints/new/")
    page.wait_for_selector("#id_first_token_timeout_ms", state="hidden", timeout=10_000)  # the script ran
    assert page.input_value("#id_timeout_ms") == str(tensor["timeout_ms"])
    page.select_option("#id_kind", "llm")
    assert page.input_value("#id_timeout_ms") == str(LLM_DEFAULTS["timeout_ms"])
    assert page.input_value("#id_sticky_header") == LLM_DEFAULTS["sticky_header"]
    for shown in ("#id_ttft_slo_ms", "#id_itl_slo_ms", "#id_first_token_timeout_ms", "#id_llm_fallbacks"):
        assert page.is_visible(shown), shown
    assert not page.is_visible("#id_slo_p99_ms") and not page.is_visible("#id_psi_threshold")
    page.select_option("#id_kind", "tensor")  # and back: the tensor defaults return
    assert page.input_value("#id_timeout_ms") == str(tensor["timeout_ms"])
    assert page.input_value("#id_sticky_header") == tensor["sticky_header"]
    page.select_option("#id_kind", "llm")
    page.fill("#id_name", "chat")
    page.select_option("#id_pool", "cpu-pool")
    page.select_option("#id_stable_artifact", str(stable.pk))
    page.fill("#id_ttft_slo_ms", "800")
    page.fill("#id_itl_slo_ms", "40")
    page.click("#endpoint-form button[type=submit]")
    page.wait_for_selector("#edit-endpoint")
    endpoint = Endpoint.objects.get(name="chat")
    assert endpoint.kind == "llm"
    assert (endpoint.timeout_ms, endpoint.sticky_header) == (LLM_DEFAULTS["timeout_ms"], LLM_DEFAULTS["sticky_header"])
    assert (endpoint.ttft_slo_ms, endpoint.itl_slo_ms) == (800, 40)

    # the header names the SLOs the judge uses on an LLM canary, not the tensor p99
    slos = page.inner_text("#endpoint-slos")
    assert slos == "SLO TTFT p99 800 ms, ITL p99 40 ms, errors 1 %", slos
    assert page.query_selector("#release-form") is None  # a release builds ONNX variants: not for an LLM

    # Edit offers the LLM settings, and saves them
    page.click("#edit-endpoint")
    page.wait_for_selector("#endpoint-form")
    assert page.query_selector("#id_slo_p99_ms") is None and page.query_selector("#id_psi_threshold") is None
    assert f"#{fallback.pk} backup v1 llm-backend" in page.inner_text("#field-llm_fallbacks")
    page.fill("#id_first_token_timeout_ms", "5000")
    page.fill("#id_context_length", "1024")
    page.fill("#id_max_tokens_default", "128")
    page.fill("#id_llm_fallbacks", f"{fallback.pk}")
    page.click("#endpoint-form button[type=submit]")
    page.wait_for_selector("#edit-endpoint")
    endpoint.refresh_from_db()
    assert (endpoint.first_token_timeout_ms, endpoint.context_length, endpoint.max_tokens_default) == (5000, 1024, 128)
    assert endpoint.llm_fallbacks == [fallback.pk]
    assert "first token within 5000 ms, context 1024, max tokens 128, 1 fallback" in page.inner_text("#llm-settings")
    page.set_viewport_size({"width": 390, "height": 844})
    page.click("#edit-endpoint")
    page.wait_for_selector("#endpoint-form")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
