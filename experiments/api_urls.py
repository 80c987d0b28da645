from django.urls import path

from experiments import api

# Training experiments (MLflow); /api/v1/experiments/ is for online experiments.
urlpatterns = [
    path("training-experiments/", api.ExperimentListView.as_view(), name="training-experiment-list"),
    path("training-experiments/<str:experiment_id>/runs/", api.RunListView.as_view(), name="training-experiment-runs"),
    path("training-experiments/<str:experiment_id>/runs/<str:run_id>/", api.RunDetailView.as_view(), name="training-run-detail"),
]
