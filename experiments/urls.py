from django.urls import path, re_path

from experiments.views import datasets as dataset_views
from experiments.views import online as online_views
from experiments.views import training as views

# Training experiments (MLflow) live under /experiments/training/; /experiments/ itself is
# for online experiments.
app_name = "experiments"
urlpatterns = [
    path("", online_views.online_experiment_list, name="online-list"),
    path("<int:experiment_id>/", online_views.online_experiment_detail, name="online-detail"),
    re_path(
        r"^(?P<experiment_id>[0-9]+)/(?P<action>ship|stop)/$",
        online_views.online_experiment_action,
        name="online-action",
    ),
    path("datasets/", dataset_views.dataset_list, name="dataset-list"),
    path("datasets/<str:dataset_id>/", dataset_views.dataset_detail, name="dataset-detail"),
    path("training/", views.experiment_list, name="experiment-list"),
    path("training/runs/<str:run_id>/", views.run_detail, name="run-detail"),
    path("training/<str:experiment_id>/", views.experiment_detail, name="experiment-detail"),
    path("training/<str:experiment_id>/compare/", views.run_compare, name="run-compare"),
]
