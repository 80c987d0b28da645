from django.urls import path
from rest_framework.routers import SimpleRouter

from experiments import api
from experiments.online import api as online_api

router = SimpleRouter()
router.register("experiments", online_api.ExperimentViewSet, basename="online-experiment")

urlpatterns = [
    # MLflow training runs (moved from /api/v1/experiments/ when online experiments took it).
    path("training-experiments/", api.ExperimentListView.as_view(), name="experiment-list"),
    path("training-experiments/<str:experiment_id>/runs/", api.RunListView.as_view(), name="experiment-runs"),
    path("feedback/", online_api.FeedbackView.as_view(), name="feedback"),
    *router.urls,
]
