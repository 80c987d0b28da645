"""Version aliases on the version page in a real browser (Debian's Chromium via Playwright):
set @champion on v1, move it to v2 from v2's page, delete it; the model page lists them."""

import pytest

from registry.models import Event, VersionAlias
from tests.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_set_move_and_delete_an_alias(live_server, browser_page, alice, team_a, artifact_factory):
    page = browser_page
    v1 = artifact_factory(team_a, model_name="ctr").version
    v2 = artifact_factory(team_a, model_name="ctr").version
    login(page, live_server.url, alice.username)

    page.goto(f"{live_server.url}/models/versions/{v1.pk}/")
    page.fill("#id_alias", "Champion!")  # refused by the service's rule, said on the page
    page.click("#alias-form button[type=submit]")
    page.wait_for_load_state()
    assert "alias: use 1-64 lower-case letters" in page.content()
    page.fill("#id_alias", "champion")
    page.click("#alias-form button[type=submit]")
    page.wait_for_selector("#version-aliases [data-alias=champion]")

    page.goto(f"{live_server.url}/models/versions/{v2.pk}/")
    assert "@champion → v1" in page.inner_text("#model-aliases")
    page.click("#move-alias-champion")
    page.wait_for_selector("#version-aliases [data-alias=champion]")
    assert page.url.endswith(f"/models/versions/{v2.pk}/")
    assert VersionAlias.objects.get(name="champion").version == v2

    page.goto(f"{live_server.url}/models/ctr/")
    assert "models:/ctr@champion → v2" in page.inner_text("#model-aliases")
    page.goto(f"{live_server.url}/models/versions/{v2.pk}/")
    page.click("#delete-alias-champion")
    page.wait_for_load_state()
    assert page.query_selector("#version-aliases [data-alias=champion]") is None
    assert not VersionAlias.objects.exists()
    trail = Event.objects.filter(action__startswith="alias").order_by("pk")
    assert [(e.action, e.from_state, e.to_state) for e in trail] == [
        ("alias_set", "", "v1"),
        ("alias_set", "v1", "v2"),
        ("alias_deleted", "v2", "deleted"),
    ]
