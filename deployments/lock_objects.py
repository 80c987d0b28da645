"""Row locks for concurrent writes (select_for_update), one helper per object kind."""

from deployments.models import PoolModel, ServingPool


def pool_for_update(pool_id: int) -> ServingPool:
    return ServingPool.objects.select_for_update().select_related("team").get(pk=pool_id)


def pool_model_for_update(pool_model_id: int) -> PoolModel:
    return PoolModel.objects.select_for_update().select_related("pool", "pool__team", "artifact").get(pk=pool_model_id)
