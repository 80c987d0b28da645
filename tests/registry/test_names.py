"""Reserved model names: a model's page is /models/{name}/, so a name that is one of the
registry's own URL words (/models/new/ is the registration form) would be a model nobody
can open. They are refused with a clear message through the API and the form."""

import pytest
from django.test import Client
from django.urls import get_resolver

from registry.models import RegisteredModel
from registry.names import RESERVED_MODEL_NAMES

pytestmark = pytest.mark.django_db

MODELS = "/api/v1/models/"


def _literal_first_segments(prefix: str) -> set[str]:
    """Every literal first path segment under `prefix` (e.g. 'new', 'builds', 'versions')."""
    words = set()
    for pattern in get_resolver().url_patterns:
        if str(pattern.pattern) != prefix.lstrip("/"):
            continue
        for sub in pattern.url_patterns:
            first = str(sub.pattern).lstrip("^").split("/", 1)[0]
            if first and "<" not in first and "(" not in first:
                words.add(first)
    return words


def test_every_literal_registry_url_word_is_reserved():
    words = _literal_first_segments("/models/")
    assert {"new", "builds", "versions"} <= words  # the finder sees the URLs it should
    assert words <= RESERVED_MODEL_NAMES, f"URL words a model could be named: {words - RESERVED_MODEL_NAMES}"


@pytest.mark.parametrize("name", ["new", "builds", "versions", "edit"])
def test_api_refuses_reserved_names(alice_api, team_a, name):
    response = alice_api.post(MODELS, {"name": name, "team": "team-a", "task": "ctr"}, format="json")
    assert response.status_code == 409, response.json()
    body = response.json()
    # the answer another team's name gets too (tests/security/test_name_oracle.py)
    assert body["code"] == "name_unavailable" and body["detail"].startswith("name:") and "reserved" in body["detail"]
    assert not RegisteredModel.objects.filter(name=name).exists()


def test_form_refuses_reserved_name_and_keeps_input(alice, team_a):
    web = Client()
    web.force_login(alice)
    response = web.post("/models/new/", {"name": "new", "team": "team-a", "task": "ctr", "description": "kept text"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "is not available for a model (a reserved word" in page and "name: " not in page  # under the field
    assert "kept text" in page
    assert not RegisteredModel.objects.filter(name="new").exists()


def test_names_that_only_contain_a_reserved_word_are_fine(alice_api, alice, team_a):
    response = alice_api.post(MODELS, {"name": "new-ranker", "team": "team-a", "task": "ctr"}, format="json")
    assert response.status_code == 201, response.json()
    web = Client()
    web.force_login(alice)
    assert web.get("/models/new-ranker/").status_code == 200
