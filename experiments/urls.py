from django.urls import path

from experiments import views

# Training experiments (MLflow) live under /experiments/training/; /experiments/ itself is
# for online experiments.
app_name = "experiments"
urlpatterns = [
    path("training/", views.experiment_list, name="experiment-list"),
    path("training/runs/<str:run_id>/", views.run_detail, name="run-detail"),
    path("training/<str:experiment_id>/", views.experiment_detail, name="experiment-detail"),
    path("training/<str:experiment_id>/compare/", views.run_compare, name="run-compare"),
]
