"""The admin console names things as people say them: "Feedback", not
"Feedbacks"; and no model of the platform's apps has a plural made by a bare "s" on a
mass noun."""

import pytest
from django.apps import apps

pytestmark = pytest.mark.django_db

MASS_NOUNS = ("feedback", "data", "information", "metadata", "evidence")
APPS = ("config", "registry", "deployments", "monitoring", "experiments")


def test_the_admin_index_says_feedback(client, staff):
    client.force_login(staff)
    page = client.get("/admin/").content.decode()
    assert ">Feedback<" in page
    assert "Feedbacks" not in page
    assert "Select feedback to view" in client.get("/admin/experiments/feedback/").content.decode()


def test_no_mass_noun_gets_a_plural_s():
    wrong = [
        f"{model._meta.label}: {model._meta.verbose_name_plural!r}"
        for model in apps.get_models()
        if model._meta.app_label in APPS
        and str(model._meta.verbose_name_plural).lower().endswith(tuple(f"{noun}s" for noun in MASS_NOUNS))
    ]
    assert wrong == []
