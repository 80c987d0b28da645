"""Row locks for concurrent writes (select_for_update), one helper per object kind."""

from registry.models import Build, ModelVersion, RegisteredModel


def model_for_update(model_id: int) -> RegisteredModel:
    return RegisteredModel.objects.select_for_update().get(pk=model_id)


def version_for_update(version_id: int) -> ModelVersion:
    return ModelVersion.objects.select_for_update().select_related("model__team").get(pk=version_id)


def build_for_update(build_id: int) -> Build:
    return Build.objects.select_for_update().get(pk=build_id)


def item_catalog_for_update(catalog_id: int):
    from registry.models import ItemCatalog

    return ItemCatalog.objects.select_for_update().get(pk=catalog_id)
