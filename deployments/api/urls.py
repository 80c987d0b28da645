from django.urls import include, path
from rest_framework.routers import SimpleRouter

from deployments.api import pools as api

router = SimpleRouter()
router.register("pools", api.PoolViewSet, basename="pool")

urlpatterns = [path("", include(router.urls))]
