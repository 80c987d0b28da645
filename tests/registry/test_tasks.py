"""The registry's tasks are thin: build_run loads the build by id and runs one attempt
under its lease; builds_reclaim requeues what lost its worker. Run in-process with
Celery's `apply` (a real worker runs them in test_build_integration.py)."""

import datetime as dt

import pytest
from django.utils import timezone

from harness import factories
from registry.models import Artifact, Build, BuildStatus
from registry.services import builds as build_services
from registry.tasks import build_run, builds_reclaim
from tests.registry.build_helpers import fast_build_settings, upload_version

# transaction=True: the runner's heartbeat thread has its own connection and must see the rows.
pytestmark = pytest.mark.django_db(transaction=True)


def test_build_run_task_publishes_once_and_a_second_delivery_does_nothing(alice, team_a, onnx_path, settings):
    fast_build_settings(settings)
    version = upload_version(alice, factories.registered_model(team_a, name="ranker"), onnx_path)
    build, _ = build_services.build_start(user=alice, version=version)
    assert build_run.apply(args=(build.pk,)).get() == "published"
    build.refresh_from_db()
    assert build.status == BuildStatus.SUCCEEDED and build.lease_owner == ""
    assert build_run.apply(args=(build.pk,)).get() == "nothing-to-do"  # delivered twice: the row decides
    assert Artifact.objects.filter(build=build).count() == 2


def test_builds_reclaim_task_requeues_a_build_whose_lease_expired(alice, team_a, onnx_path):
    version = upload_version(alice, factories.registered_model(team_a, name="ranker"), onnx_path)
    build, _ = build_services.build_start(user=alice, version=version)
    build_services.build_claim(build_id=build.pk, owner="lost-worker")
    assert builds_reclaim.apply().get() == 0  # its lease is live
    Build.objects.filter(pk=build.pk).update(lease_expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert builds_reclaim.apply().get() == 1
    build.refresh_from_db()
    assert build.status == BuildStatus.QUEUED and build.lease_owner == ""
