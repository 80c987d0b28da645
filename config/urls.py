from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

from config.health import healthz
from deployments.api import urls as deployments_api
from experiments.api import urls as experiments_api
from monitoring.api import urls as monitoring_api
from registry.api import urls as registry_api

# One "api" namespace for /api/v1/; each app contributes its urlpatterns here.
api_v1 = [
    *registry_api.urlpatterns,
    *deployments_api.urlpatterns,
    *experiments_api.urlpatterns,
    *monitoring_api.urlpatterns,
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    # browsers ask for /favicon.ico whatever the page links: answered, not a 404 (and its log line) per page
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(template_name="auth/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include((api_v1, "api"))),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's start-up script from a URL: no inline script (kernel/csp.py)
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
    path("", RedirectView.as_view(pattern_name="registry:model-list", permanent=False), name="home"),
    path("models/", include("registry.urls")),
    path("deployments/", include("deployments.urls")),
    path("experiments/", include("experiments.urls")),
    path("monitoring/", include("monitoring.urls")),
]

# JSON {"detail", "code"} for unmatched /api/ paths and server errors there; pages elsewhere.
handler404 = "kernel.api.not_found"
handler500 = "kernel.api.server_error"
