from django.urls import path
from rest_framework.routers import SimpleRouter

from experiments.api import datasets as datasets_api
from experiments.api import online as online_api
from experiments.api import training as api

router = SimpleRouter()
router.register("experiments", online_api.ExperimentViewSet, basename="online-experiment")
router.register("datasets", datasets_api.DatasetViewSet, basename="dataset")

# Training experiments (MLflow); /api/v1/experiments/ is for online experiments.
urlpatterns = [
    path("training-experiments/", api.ExperimentListView.as_view(), name="training-experiment-list"),
    path("training-experiments/<str:experiment_id>/runs/", api.RunListView.as_view(), name="training-experiment-runs"),
    path(
        "training-experiments/<str:experiment_id>/runs/<str:run_id>/",
        api.RunDetailView.as_view(),
        name="training-run-detail",
    ),
    path("feedback/", online_api.FeedbackView.as_view(), name="feedback"),
    *router.urls,
]
