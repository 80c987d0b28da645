from django.urls import include, path
from rest_framework.routers import SimpleRouter

from deployments.api import rollouts as rollout_api

router = SimpleRouter()
router.register("endpoints", rollout_api.EndpointViewSet, basename="endpoint")
router.register("rollouts", rollout_api.RolloutViewSet, basename="rollout")

urlpatterns = [
    path("gateway/routes", rollout_api.GatewayRoutesView.as_view(), name="gateway-routes"),
    path("", include(router.urls)),
]
