from django.urls import include, path
from rest_framework.routers import SimpleRouter

from registry.api import catalog as api
from registry.api import teams as teams_api

router = SimpleRouter()
router.register("models", api.ModelViewSet, basename="model")
router.register("versions", api.VersionViewSet, basename="version")
router.register("events", teams_api.EventViewSet, basename="event")
router.register("teams", teams_api.TeamViewSet, basename="team")

model_versions = api.ModelVersionViewSet.as_view({"get": "list", "post": "create"})

# Aliases and model URIs (registry/api/aliases.py); before the router, so "resolve" is no version id.
from registry.api import aliases as alias_api  # noqa: E402

# LLM versions and provider secrets
from registry.api import llm as llm_api  # noqa: E402

router.register("secrets", llm_api.SecretViewSet, basename="secret")
llm_versions = llm_api.LLMVersionViewSet.as_view({"post": "create"})

urlpatterns = [
    *alias_api.urlpatterns,
    path("models/<slug:model_name>/versions/", model_versions, name="model-versions"),
    path("models/<slug:model_name>/llm-versions/", llm_versions, name="model-llm-versions"),
    path("", include(router.urls)),
]

# The artifact factory's routes (builds, artifacts).
from registry.api import builds as build_api  # noqa: E402

urlpatterns += build_api.urlpatterns

# A version's data: its input example and labelled validation set.
from registry.api import version_data as data_api  # noqa: E402

urlpatterns += data_api.urlpatterns

# Item catalogs: what generative recommenders' semantic ids name (registry/api/item_catalogs.py).
from registry.api import item_catalogs as item_catalog_api  # noqa: E402

urlpatterns += item_catalog_api.urlpatterns
