from django.urls import path

from experiments import views

app_name = "experiments"
urlpatterns = [
    path("", views.experiment_list, name="experiment-list"),
    path("<str:experiment_id>/", views.experiment_detail, name="experiment-detail"),
]
