"""Which replicas the route table gets: READY ones; a pool with none READY keeps its DOWN ones
(panic routing: a slow replica that may still answer beats a certain 503 for every request)."""

import pytest

from deployments.models import ReplicaStatus
from deployments.selectors.pools import ready_replicas
from harness import factories

pytestmark = pytest.mark.django_db


def test_down_replicas_are_routed_only_when_their_pool_has_none_ready(team_a):
    mixed = factories.pool(team_a, "mixed", ready_replicas=1)
    factories.replica(mixed, "r1", status=ReplicaStatus.DOWN, http_url="http://127.0.0.1:18101")
    all_down = factories.pool(team_a, "all-down")
    factories.replica(all_down, "r0", status=ReplicaStatus.DOWN, http_url="http://127.0.0.1:18200")
    failed = factories.pool(team_a, "failed")
    factories.replica(failed, "r0", status=ReplicaStatus.FAILED, http_url="http://127.0.0.1:18300")

    routed = {(r.pool.name, r.name) for r in ready_replicas(pool_ids=[mixed.pk, all_down.pk, failed.pk])}

    assert routed == {("mixed", "r0"), ("all-down", "r0")}
