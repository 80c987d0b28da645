"""The endpoint page's layout at 1280 and 390 px in a real browser (Debian's Chromium via
Playwright), with a long header (a long name beside its stable, pool, SLOs and sticky
header) and both start forms: the title does not wrap (on a phone a name
wider than the screen may), help text never
squeezes into a one-word column, the release button stays inside its card, the inputs of
a form row share one width, and nothing makes the page scroll sideways."""

import pytest

from deployments.services import endpoints as endpoint_services
from harness import factories
from registry.models import ModelVersion, VersionSource
from tests.browser import login, overflow

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

MEASURE = """() => {
  const box = (el) => el.getBoundingClientRect();
  const h1 = document.querySelector('.page-head h1');
  const lineHeight = parseFloat(getComputedStyle(h1).lineHeight);
  const helps = Array.from(document.querySelectorAll('#rollout-form .help, #release-form .help')).map(p => Math.round(box(p).width));
  const card = document.querySelector('#release-form'), button = card.querySelector('button[type=submit]');
  const widths = (sel) => Array.from(document.querySelectorAll(sel)).map(i => Math.round(box(i).width));
  return {titleLines: Math.round(box(h1).height / lineHeight), helps,
          buttonInside: box(button).right <= box(card).right + 0.5 && box(button).left >= box(card).left - 0.5,
          rolloutInputs: widths('#rollout-form .field input[type=text], #rollout-form .field input[type=number], #rollout-form .field select'),
          releaseInputs: widths('#release-form .field input[type=text], #release-form .field select')};
}"""


@pytest.mark.parametrize("width", [1280, 390])
def test_the_endpoint_page_keeps_its_layout(live_server, browser_page, deployer, team_a, artifact_factory, width):
    pool = factories.pool(team_a, "cpu-pool-with-a-long-name", ready_replicas=1)
    stable = artifact_factory(team_a, model_name="ranker")
    endpoint_services.endpoint_create(
        user=deployer, name="ads-ranking-homepage-eu-west", pool=pool, stable_artifact=stable, public=True
    )
    artifact_factory(team_a, model_name="ranker")  # a candidate: the rollout form is offered
    ModelVersion.objects.create(
        model=stable.version.model, version=9, source=VersionSource.UPLOAD, file_sha256="0" * 64, file_path="x.onnx"
    )
    page = browser_page
    page.set_viewport_size({"width": width, "height": 900})
    login(page, live_server.url, deployer.username)
    page.goto(f"{live_server.url}/deployments/endpoints/ads-ranking-homepage-eu-west/")
    page.wait_for_selector("#rollout-form")
    seen = page.evaluate(MEASURE)
    if width == 1280:
        assert seen["titleLines"] == 1, seen  # beside the header's facts, on one line
    assert min(seen["helps"]) >= 150, seen  # a paragraph, not a one-word column
    assert seen["buttonInside"], seen
    assert len(set(seen["rolloutInputs"])) == 1 and len(set(seen["releaseInputs"])) == 1, seen
    assert not overflow(page), overflow(page)
