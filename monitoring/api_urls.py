from django.urls import include, path
from rest_framework.routers import SimpleRouter

from monitoring import api, forecast_api

router = SimpleRouter()
router.register("alerts", api.AlertViewSet, basename="alert")
router.register("verdicts", api.VerdictViewSet, basename="verdict")
router.register("notification-channels", api.ChannelViewSet, basename="notification-channel")

urlpatterns = [
    path("metrics/", api.MetricsView.as_view(), name="metrics"),
    path("score-samples/", api.ScoreSamplesView.as_view(), name="score-samples"),
    path("rollout-forecast/", forecast_api.RolloutForecastView.as_view(), name="rollout-forecast"),
    path("", include(router.urls)),
]
