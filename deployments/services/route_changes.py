"""Marking that the route table may have changed, so it is rebuilt once per change rather
than once per poll (deployments/routes.py keeps the built table keyed by `route_generation()`).

Every save, delete and many-to-many change of a model the table is built from marks a
change in the same transaction as the write (a RouteChange row): the mark commits with the
change, so a reader that sees the new generation sees the change. The table reads rows of
deployments, registry and experiments and the teams' names (auth.Group); the models below
that it never reads, and saves that touch only bookkeeping fields, mark nothing. A write
that bypasses signals (QuerySet.update) calls `route_changed()` itself; the cache also
expires after ROUTE_CACHE_MAX_AGE_S as a backstop for writes made around the services."""

from __future__ import annotations

from datetime import timedelta

from django.apps import apps as global_apps
from django.db.models import Count, Max, Sum
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.utils import timezone

from deployments.models import RouteChange

WATCHED_APPS = frozenset({"deployments", "registry", "experiments"})
WATCHED_MODELS = frozenset({"auth.group"})  # a team's name is its label in the table
# rows the table never reads: written often (events, exposures) or by builds and datasets
IGNORED_MODELS = frozenset(
    {
        "deployments.routechange",
        "registry.event",
        "registry.build",
        "experiments.exposure",
        "experiments.feedback",
        "experiments.deadletter",
        "experiments.dataset",
        "experiments.datasetbuildrequest",
    }
)
# a save of only these fields changes nothing the table reads (a replica's liveness stamp, reasons)
BOOKKEEPING_FIELDS = frozenset({"last_seen_at", "updated_at", "last_error", "status_reason"})
PRUNE_AFTER = timedelta(hours=1)
PRUNE_EVERY = 256  # ids: prune once in so many marks


def watched(label: str, update_fields) -> bool:
    """Whether a write to model `label` ("app.model") with these update_fields (None: all)
    may change the route table."""
    app = label.split(".", 1)[0]
    if label in IGNORED_MODELS or not (app in WATCHED_APPS or label in WATCHED_MODELS):
        return False
    return update_fields is None or not set(update_fields) <= BOOKKEEPING_FIELDS


def route_changed(*, model: str = "") -> None:
    """Mark a change in the current transaction (append-only: no lock on a shared row)."""
    row = RouteChange.objects.create(model=model[:100])
    if row.pk % PRUNE_EVERY == 0:
        RouteChange.objects.filter(at__lt=timezone.now() - PRUNE_AFTER).delete()


def route_generation() -> tuple:
    """What changes whenever a mark commits: (last id, rows, sum of ids) of the marks. A mark
    that commits after a later one (ids are handed out at insert, not at commit) still moves
    the count and the sum; pruning removes only rows an hour old. One query."""
    got = RouteChange.objects.aggregate(last=Max("id"), rows=Count("id"), total=Sum("id"))
    return got["last"], got["rows"], got["total"]


def _label(model) -> str | None:
    """ "app.model", or None for a migration's historical model (its table may not exist yet)."""
    return model._meta.label_lower if model._meta.apps is global_apps else None


def _on_save(sender, update_fields=None, raw=False, **_):
    label = _label(sender)
    if label and not raw and watched(label, update_fields):
        route_changed(model=label)


def _on_delete(sender, **_):
    label = _label(sender)
    if label and watched(label, None):
        route_changed(model=label)


def _on_m2m(sender, action, instance, **_):
    label = _label(type(instance))
    if label and action in ("post_add", "post_remove", "post_clear") and watched(label, None):
        route_changed(model=label)


def connect() -> None:
    """Connect the receivers (DeploymentsConfig.ready)."""
    post_save.connect(_on_save, dispatch_uid="deployments.route_changes.save")
    post_delete.connect(_on_delete, dispatch_uid="deployments.route_changes.delete")
    m2m_changed.connect(_on_m2m, dispatch_uid="deployments.route_changes.m2m")
