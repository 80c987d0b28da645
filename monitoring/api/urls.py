from django.urls import include, path
from rest_framework.routers import SimpleRouter

from monitoring.api import alerts, forecast, metrics, silences

router = SimpleRouter()
router.register("alerts", alerts.AlertViewSet, basename="alert")
router.register("silences", silences.SilenceViewSet, basename="silence")
router.register("verdicts", alerts.VerdictViewSet, basename="verdict")
router.register("notification-channels", alerts.ChannelViewSet, basename="notification-channel")

urlpatterns = [
    path("metrics/", metrics.MetricsView.as_view(), name="metrics"),
    path("score-samples/", metrics.ScoreSamplesView.as_view(), name="score-samples"),
    path("rollout-forecast/", forecast.RolloutForecastView.as_view(), name="rollout-forecast"),
    path("", include(router.urls)),
]
