"""The audit trail's one word for a state change: old rows written as "transition"
(rollouts) or "state_changed" (experiments) read as "status_changed" after migration 0004,
and going back restores each by its object type."""

import importlib

import pytest
from django.apps import apps

from registry.models import Event, EventAction

pytestmark = pytest.mark.django_db
migration = importlib.import_module("registry.migrations.0004_event_action_vocabulary")


def _event(object_type, action):
    return Event.objects.create(object_type=object_type, object_id="1", object_repr="x", action=action)


def test_synonyms_become_status_changed_and_come_back():
    rollout = _event("deployments.rollout", "transition")
    experiment = _event("experiments.experiment", "state_changed")
    build = _event("registry.build", "status_changed")
    created = _event("deployments.rollout", "created")

    migration.one_name(apps, None)
    assert {e.pk: e.action for e in Event.objects.all()} == {
        rollout.pk: EventAction.STATUS_CHANGED,
        experiment.pk: EventAction.STATUS_CHANGED,
        build.pk: EventAction.STATUS_CHANGED,
        created.pk: EventAction.CREATED,
    }

    migration.two_names(apps, None)
    assert {e.pk: e.action for e in Event.objects.all()} == {
        rollout.pk: "transition",
        experiment.pk: "state_changed",
        build.pk: "status_changed",
        created.pk: "created",
    }
