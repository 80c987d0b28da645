"""Site-wide page behaviour: exactly one nav item is highlighted, and 404 and 500 are
pages in the site's style (not Django's bare defaults)."""

import re

import pytest
from django.test import Client, RequestFactory
from django.views.defaults import server_error

pytestmark = pytest.mark.django_db


def _active(html: str) -> list[str]:
    nav = html[html.index("<nav>") : html.index("</nav>")]
    return re.findall(r'class="active">([^<]+)</a>', nav)


@pytest.mark.parametrize(
    ("path", "section"),
    [
        ("/models/", "Models"),
        ("/models/builds/", "Builds"),
        ("/deployments/", "Deployments"),
        ("/deployments/endpoints/", "Deployments"),
        ("/deployments/keys/", "Keys"),
        ("/monitoring/", "Monitoring"),
        ("/monitoring/alerts/", "Alerts"),
    ],
)
def test_exactly_one_nav_item_is_highlighted(alice, path, section):
    client = Client()
    client.force_login(alice)
    response = client.get(path)
    assert response.status_code == 200
    assert _active(response.content.decode()) == [section]


def test_404_is_a_page_of_the_site(alice, team_b):
    from harness import factories

    factories.registered_model(team_b, name="theirs")
    client = Client()
    client.force_login(alice)
    for path, active in (("/no-such-page/", []), ("/models/theirs/", ["Models"])):  # another team's model is a 404 too
        response = client.get(path)
        body = response.content.decode()
        assert response.status_code == 404
        assert "Page not found" in body and "/static/css/app.css" in body and "<nav>" in body
        assert f'<span class="mono">{path}</span>' in body and _active(body) == active
    anonymous = Client().get("/no-such-page/").content.decode()
    assert "Page not found" in anonymous and "Log in" in anonymous


def test_500_is_a_page_of_the_site_without_a_request_context():
    response = server_error(RequestFactory().get("/boom/"))
    body = response.content.decode()
    assert response.status_code == 500
    assert "Something went wrong" in body and "/static/css/app.css" in body and 'href="/"' in body
