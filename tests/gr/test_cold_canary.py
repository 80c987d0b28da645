"""A generative recommender on the control plane: its route entry asks the gateway for
user-affinity routing, and its canary is always judged against a fair baseline (a copy of the
stable loaded with the candidate, its cache as cold), never the warm stable alone."""

import pytest

from deployments.models import Rollout
from deployments.routes import route_build
from gateway.table.checks import check
from harness import factories

pytestmark = pytest.mark.django_db


def test_a_gr_endpoints_route_entry_asks_for_user_affinity(endpoint):
    table = route_build()[0]
    (entry,) = [e for e in table["endpoints"] if e["name"] == "recs-ep"]
    assert entry["affinity"] == "user"
    assert check(table).refusals == []  # the gateway applies it


def test_a_gr_canary_keeps_its_fair_baseline(endpoint, deployer_api, team_a, catalogs):
    candidate = factories.gr_artifact(team_a, catalogs["c1"], version=2, target="gr-int8")
    url = "/api/v1/endpoints/recs-ep/rollouts/"
    refused = deployer_api.post(url, {"candidate_artifact": candidate.pk, "fair_baseline": False}, format="json")
    assert refused.status_code == 400, refused.content
    assert refused.json()["code"] == "cold_cache_needs_baseline" and "cold" in refused.json()["detail"]
    assert not Rollout.objects.exists()

    started = deployer_api.post(url, {"candidate_artifact": candidate.pk}, format="json")
    assert started.status_code == 201, started.content
    assert Rollout.objects.get().plan.baseline
