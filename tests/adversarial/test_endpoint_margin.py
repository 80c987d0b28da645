"""An endpoint's latency margin, a number a tenant hands the judge (field endpoints.latency_margin,
tests/adversarial/surfaces/api.py): set and set back to its derived default (null) through the
API, the dashboard's edit form and the CLI; hostile values are a 400 naming the field and
change nothing; another team's endpoint is a 404 and keeps its margin.

The judge reads the margin every look (monitoring/paired.py margin_for): a value outside 0..5,
a NaN or a string would make the latency comparison fail every candidate or pass every one,
so the service refuses it whichever door it came through."""

import pytest

from deployments.models import Endpoint
from deployments.services import endpoints as endpoint_services
from harness import factories
from kernel.errors import InvalidInput

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoint(team_a):
    return factories.endpoint(factories.pool(team_a, "margin-pool"), name="margin")


def _margin(endpoint) -> float | None:
    return Endpoint.objects.get(pk=endpoint.pk).latency_margin


def test_a_margin_set_through_the_api_goes_back_to_derived_with_null(deployer_api, endpoint):
    url = f"/api/v1/endpoints/{endpoint.name}/"
    assert deployer_api.get(url).json()["latency_margin"] is None  # a new endpoint's: derived
    set_ = deployer_api.patch(url, {"latency_margin": 0.5}, format="json")
    assert set_.status_code == 200 and set_.json()["latency_margin"] == 0.5
    assert _margin(endpoint) == 0.5
    other = deployer_api.patch(url, {"timeout_ms": 900}, format="json")  # a change without it keeps it
    assert other.status_code == 200 and _margin(endpoint) == 0.5
    reset = deployer_api.patch(url, {"latency_margin": None}, format="json")
    assert reset.status_code == 200, reset.content
    assert reset.json()["latency_margin"] is None and _margin(endpoint) is None


@pytest.mark.parametrize(
    "value",
    ["0.2", "derived", "", True, [0.2], {"value": 0.2}, -0.01, 5.0001, 1e308, "NaN", "Infinity", 10**400],
)
def test_a_hostile_margin_is_a_400_naming_the_field_and_changes_nothing(deployer_api, endpoint, value):
    Endpoint.objects.filter(pk=endpoint.pk).update(latency_margin=0.3)
    answer = deployer_api.patch(f"/api/v1/endpoints/{endpoint.name}/", {"latency_margin": value}, format="json")
    if value == "0.2":  # a numeric string is a number to a JSON float field: accepted as 0.2
        assert answer.status_code == 200 and _margin(endpoint) == 0.2
        return
    assert answer.status_code == 400, (value, answer.content)
    assert "latency_margin" in answer.content.decode()
    assert _margin(endpoint) == 0.3


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 6.0, "0.2", True])
def test_the_service_refuses_what_no_door_may_pass(deployer, endpoint, value):
    """The admin and the form reach endpoint_update without the API's serializer: the service
    is the one rule."""
    with pytest.raises(InvalidInput) as refused:
        endpoint_services.endpoint_update(user=deployer, endpoint=endpoint, latency_margin=value)
    assert refused.value.field == "latency_margin"
    assert _margin(endpoint) is None


def test_another_teams_margin_is_a_404_and_stays(bob_api, endpoint):
    Endpoint.objects.filter(pk=endpoint.pk).update(latency_margin=0.4)
    for value in (None, 0.0, 5.0):
        answer = bob_api.patch(f"/api/v1/endpoints/{endpoint.name}/", {"latency_margin": value}, format="json")
        assert answer.status_code == 404
    assert _margin(endpoint) == 0.4


def test_the_edit_form_emptied_goes_back_to_derived(client, deployer, endpoint):
    Endpoint.objects.filter(pk=endpoint.pk).update(latency_margin=0.4)
    client.force_login(deployer)
    page = client.get(f"/deployments/endpoints/{endpoint.name}/edit/")
    assert page.status_code == 200
    form = page.context["form"]
    data = {k: ("" if v is None else v) for k, v in form.initial.items() if k in form.fields}
    data["latency_margin"] = ""
    saved = client.post(f"/deployments/endpoints/{endpoint.name}/edit/", data)
    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert _margin(endpoint) is None
