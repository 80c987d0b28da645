from django.urls import path

from experiments import api

urlpatterns = [
    path("experiments/", api.ExperimentListView.as_view(), name="experiment-list"),
    path("experiments/<str:experiment_id>/runs/", api.RunListView.as_view(), name="experiment-runs"),
]
