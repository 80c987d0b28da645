from django.urls import path, re_path

from deployments.views import endpoints as endpoint_views
from deployments.views import keys as key_views
from deployments.views import pools as views
from deployments.views import releases as release_views
from deployments.views import rollouts as rollout_views

app_name = "deployments"
urlpatterns = [
    path("", views.pool_list, name="pool-list"),
    path("pools/<slug:name>/", views.pool_detail, name="pool-detail"),
    path("pools/<slug:name>/scale/", views.pool_scale, name="pool-scale"),
    path("pools/<slug:name>/load/", views.pool_load, name="pool-load"),
    path("pools/<slug:name>/unload/", views.pool_unload, name="pool-unload"),
    # endpoints and rollouts (deployments/rollout_views.py)
    path("endpoints/", rollout_views.endpoint_list, name="endpoint-list"),
    path("endpoints/new/", endpoint_views.endpoint_create, name="endpoint-create"),  # "new" is no endpoint's name
    path("endpoints/<slug:name>/edit/", endpoint_views.endpoint_edit, name="endpoint-edit"),
    path("endpoints/<slug:name>/", rollout_views.endpoint_detail, name="endpoint-detail"),
    path("endpoints/<slug:name>/rollouts/", rollout_views.rollout_start, name="rollout-start"),
    # releases: build -> tune -> canary (deployments/views/releases.py)
    path("endpoints/<slug:name>/release/", release_views.endpoint_release, name="endpoint-release"),
    re_path(
        r"^rollouts/(?P<pk>[0-9]+)/(?P<action>promote|pause|resume|rollback)/$",
        rollout_views.rollout_action,
        name="rollout-action",
    ),
    # inference keys and who may call an endpoint (deployments/views/keys.py)
    path("keys/", key_views.key_list, name="key-list"),
    path("keys/<int:pk>/revoke/", key_views.key_revoke, name="key-revoke"),
    path("keys/secrets/", key_views.secret_create, name="secret-create"),
    path("keys/secrets/<int:pk>/delete/", key_views.secret_delete, name="secret-delete"),
    path("endpoints/<slug:name>/access/", key_views.endpoint_access, name="endpoint-access"),
]
