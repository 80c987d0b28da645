"""Admin console pieces every app shares (Django's admin autodiscovery imports this module
too; it registers nothing)."""

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows people may look at but never add, change or delete here (audit trails, data the
    platform writes itself)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
