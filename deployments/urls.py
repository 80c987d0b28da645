from django.urls import path

from deployments import views

app_name = "deployments"
urlpatterns = [
    path("", views.pool_list, name="pool-list"),
    path("pools/<slug:name>/", views.pool_detail, name="pool-detail"),
    path("pools/<slug:name>/scale/", views.pool_scale, name="pool-scale"),
    path("pools/<slug:name>/load/", views.pool_load, name="pool-load"),
    path("pools/<slug:name>/unload/", views.pool_unload, name="pool-unload"),
]
