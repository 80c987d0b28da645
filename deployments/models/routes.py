"""Route table changes: one row per committed write that may change the gateway's route
table (deployments/services/route_changes.py appends them). The route table is built once
per change and served from a cache keyed by these rows; see deployments/routes.py."""

from django.db import models


class RouteChange(models.Model):
    """Append-only (rows older than an hour are pruned): an insert never waits on another
    writer's lock, so marking a change costs no lock ordering against the rows it follows."""

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    model = models.CharField(max_length=100, blank=True)  # what changed, e.g. "deployments.inferencekey"

    def __str__(self):
        return f"route change #{self.pk} ({self.model})"
