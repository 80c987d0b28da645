from django.urls import path

from monitoring import views

app_name = "monitoring"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("alerts/", views.alert_list, name="alert-list"),
    path("alerts/<int:pk>/", views.alert_detail, name="alert-detail"),
    path("alerts/<int:pk>/acknowledge/", views.alert_acknowledge, name="alert-acknowledge"),
    path("alerts/<int:pk>/resolve/", views.alert_resolve, name="alert-resolve"),
    path("alerts/silences/", views.silence_list, name="silence-list"),
    path("alerts/silences/new/", views.silence_create, name="silence-create"),
    path("alerts/silences/<int:pk>/expire/", views.silence_expire, name="silence-expire"),
]
