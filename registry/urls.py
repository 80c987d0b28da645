from django.urls import path

from registry.views import builds as build_views
from registry.views import catalog as views

app_name = "registry"
urlpatterns = [
    *build_views.urlpatterns,  # before "<slug:name>/" so "builds/" is not read as a model name
    path("", views.model_list, name="model-list"),
    path("new/", views.model_create, name="model-create"),
    path("versions/<int:pk>/", views.version_detail, name="version-detail"),
    path("<slug:name>/", views.model_detail, name="model-detail"),
    path("<slug:name>/versions/new/", views.version_create, name="version-create"),
    path("<slug:name>/aliases/", views.alias_set, name="alias-set"),
    path("<slug:name>/aliases/<str:alias>/delete/", views.alias_delete, name="alias-delete"),
]
