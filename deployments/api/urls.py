from django.urls import include, path
from rest_framework.routers import SimpleRouter

from deployments.api import keys, pool_secrets, pools, releases, rollouts

router = SimpleRouter()
router.register("pools", pools.PoolViewSet, basename="pool")
router.register("pool-secret-bindings", pool_secrets.PoolSecretBindingViewSet, basename="pool-secret-binding")
router.register("endpoints", rollouts.EndpointViewSet, basename="endpoint")
router.register("rollouts", rollouts.RolloutViewSet, basename="rollout")
router.register("inference-keys", keys.InferenceKeyViewSet, basename="inference-key")
router.register("releases", releases.ReleaseViewSet, basename="release")

urlpatterns = [
    path("gateway/routes", rollouts.GatewayRoutesView.as_view(), name="gateway-routes"),
    path("", include(router.urls)),
]
