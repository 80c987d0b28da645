"""Admin console: useful columns, filters and search; audit events are read only;
actions call the same services as the API."""

from django.contrib import admin, messages

from kernel.admin import ReadOnlyAdmin
from kernel.errors import PlatformError
from registry.models import (
    Artifact,
    Build,
    Event,
    ItemCatalog,
    ItemCatalogVersion,
    ModelVersion,
    ProviderSecret,
    RegisteredModel,
    TeamMembership,
)
from registry.services import catalog as services


@admin.register(TeamMembership)
class TeamMembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role"]
    list_filter = ["role", "team"]
    search_fields = ["user__username", "team__name"]
    autocomplete_fields = ["user", "team"]


class VersionInline(admin.TabularInline):
    model = ModelVersion
    fields = ["version", "status", "source", "framework", "created_by", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(RegisteredModel)
class RegisteredModelAdmin(admin.ModelAdmin):
    list_display = ["name", "task", "team", "created_by", "created_at", "updated_at"]
    list_filter = ["task", "team"]
    search_fields = ["name", "description"]
    readonly_fields = ["created_by", "created_at", "updated_at"]
    inlines = [VersionInline]
    actions = ["delete_unused"]

    def save_model(self, request, obj, form, change):
        if change:
            services.model_update(user=request.user, model=obj, description=obj.description, task=obj.task)
        else:
            created = services.model_create(
                user=request.user, name=obj.name, team=obj.team, description=obj.description, task=obj.task
            )
            obj.pk = created.pk

    @admin.action(description="Delete selected models that have no versions")
    def delete_unused(self, request, queryset):
        for model in queryset:
            try:
                services.model_delete(user=request.user, model=model)
            except PlatformError as exc:
                self.message_user(request, exc.detail, messages.WARNING)
            else:
                self.message_user(request, f"Deleted {model.name}.")

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # deleting goes through the service's "unused" check
        return actions


@admin.register(ModelVersion)
class ModelVersionAdmin(admin.ModelAdmin):
    list_display = ["__str__", "status", "source", "framework", "created_by", "created_at"]
    list_filter = ["status", "source", "framework", "model__team"]
    search_fields = ["model__name", "source_uri", "file_sha256"]
    readonly_fields = [f.name for f in ModelVersion._meta.fields]
    actions = ["archive"]

    def has_add_permission(self, request):
        return False  # versions come from uploads or MLflow URIs (dashboard or API)

    @admin.action(description="Archive selected versions")
    def archive(self, request, queryset):
        for version in queryset.select_related("model__team"):
            services.version_archive(user=request.user, version=version, reason="archived from the admin console")
        self.message_user(request, f"Archived {queryset.count()} version(s).")


@admin.register(Build)
class BuildAdmin(ReadOnlyAdmin):
    list_display = ["id", "version", "status", "progress", "attempt", "created_by", "created_at", "finished_at"]
    list_filter = ["status"]
    search_fields = ["version__model__name", "idempotency_key"]


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyAdmin):
    list_display = ["triton_model_name", "variant", "status", "size_bytes", "created_at"]
    list_filter = ["status", "variant"]
    search_fields = ["triton_model_name", "sha256"]


@admin.register(ProviderSecret)
class ProviderSecretAdmin(ReadOnlyAdmin):
    """Names only: the value (encrypted) is never shown, not even its ciphertext."""

    list_display = ["name", "team", "origins", "last4", "created_by", "created_at"]
    list_filter = ["team"]
    search_fields = ["name"]
    fields = ["name", "team", "origins", "last4", "created_by", "created_at"]
    readonly_fields = fields


@admin.register(ItemCatalog)
class ItemCatalogAdmin(ReadOnlyAdmin):
    """Item catalogs of generative recommenders; versions are made through the API (a compiled trie)."""

    list_display = ["name", "team", "levels", "codes_per_level", "created_by", "created_at"]
    list_filter = ["team"]
    search_fields = ["name"]


@admin.register(ItemCatalogVersion)
class ItemCatalogVersionAdmin(ReadOnlyAdmin):
    list_display = ["catalog", "version", "items", "parent", "sha256", "created_by", "created_at"]
    search_fields = ["catalog__name", "sha256"]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["time", "actor", "team", "object_type", "object_repr", "action", "from_state", "to_state", "reason"]
    list_filter = ["object_type", "action", "team"]
    search_fields = ["object_repr", "reason", "object_id"]
    date_hierarchy = "time"
