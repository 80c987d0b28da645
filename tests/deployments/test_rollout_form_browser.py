"""The rollout form in a real browser (Debian's Chromium via Playwright): it offers only
this endpoint's model in variants its CPU pool can serve, and bad input comes back with a
human message next to the field and everything that was typed still there."""

from pathlib import Path

import pytest
from django.conf import settings

from deployments.models import PoolModel, PoolModelState, Rollout
from deployments.services import endpoints as endpoint_services
from harness import factories
from tests.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_rollout_form_choices_and_errors(live_server, browser_page, deployer, team_a, artifact_factory):
    page = browser_page
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    stable = artifact_factory(team_a, model_name="demo-ctr-model")
    endpoint_services.endpoint_create(user=deployer, name="demo-ctr", pool=pool, stable_artifact=stable)
    PoolModel.objects.update(state=PoolModelState.READY, replica_ready={"r0": True})
    fits = artifact_factory(team_a, model_name="demo-ctr-model", variant="onnx-int8")
    artifact_factory(team_a, model_name="demo-ctr-model", variant="onnx-fp16")  # needs a GPU
    artifact_factory(team_a, model_name="fraud", variant="onnx-fp32")  # another model

    login(page, live_server.url, deployer.username)
    page.goto(f"{live_server.url}/deployments/endpoints/demo-ctr/")
    options = page.eval_on_selector_all("#id_candidate_artifact option", "os => os.map(o => [o.value, o.textContent])")
    assert options == [[str(fits.pk), f"demo-ctr-model v{fits.version.version} · onnx-int8 (#{fits.pk})"]]
    assert "1 GPU variant hidden" in page.inner_text("#rollout-form")

    page.fill("#id_steps_pct", "50, 25, 100")
    page.fill("#id_step_min_seconds", "12")
    page.fill("#id_shadow_seconds", "7")
    page.click("#rollout-form button[type=submit]")
    page.wait_for_selector("#error-steps_pct")
    assert page.inner_text("#error-steps_pct") == "Steps must increase, e.g. 5, 25, 50, 100."
    assert "steps_bp" not in page.content() and "could not convert" not in page.content()
    assert page.input_value("#id_steps_pct") == "50, 25, 100"
    assert page.input_value("#id_step_min_seconds") == "12" and page.input_value("#id_shadow_seconds") == "7"
    assert page.input_value("#id_candidate_artifact") == str(fits.pk)
    assert not Rollout.objects.exists()

    page.fill("#id_step_min_seconds", "-1")
    page.click("#rollout-form button[type=submit]")
    page.wait_for_selector("#error-step_min_seconds")
    assert page.inner_text("#error-step_min_seconds") == "Minimum seconds per step cannot be negative."
    assert page.inner_text("#error-steps_pct") == "Steps must increase, e.g. 5, 25, 50, 100."
    out = Path(settings.VAR_DIR) / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / "rollout-form-errors.png"), full_page=True)

    page.fill("#id_steps_pct", "10, 50, 100")
    page.fill("#id_step_min_seconds", "5")
    page.click("#rollout-form button[type=submit]")
    page.wait_for_selector("#rollout-state")
    rollout = Rollout.objects.get()
    assert rollout.candidate_artifact_id == fits.pk and rollout.steps_bp == [1000, 5000, 10000]
    assert page.url.endswith(f"?rollout={rollout.pk}")
    assert page.query_selector("#rollout-form") is None  # one rollout at a time: no form while it runs
