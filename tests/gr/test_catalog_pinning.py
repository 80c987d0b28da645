"""A rollout or experiment of a generative recommender pins the catalog: both arms serve one
catalog version unless the rollout is of the catalog itself (the stable's model version and
target on another version of the same catalog). Checked by deployments' one compatibility
check, so the API, experiments and the route table agree."""

import pytest

from deployments.models import PoolModel, Rollout
from deployments.selectors.compatibility import serving_problem
from harness import factories

pytestmark = pytest.mark.django_db


def test_a_new_model_version_on_the_stables_catalog_version_may_serve_beside_it(endpoint, team_a, catalogs):
    candidate = factories.gr_artifact(team_a, catalogs["c1"], version=2, target="gr-int8")
    assert serving_problem(endpoint=endpoint, artifact=candidate) is None


def test_the_stables_version_on_a_new_catalog_version_is_a_rollout_of_the_catalog(endpoint, team_a, catalogs):
    candidate = factories.gr_artifact(team_a, catalogs["c2"], version=1)
    assert candidate.variant == "gr-fp32-c2"
    assert serving_problem(endpoint=endpoint, artifact=candidate) is None


@pytest.mark.parametrize(
    "catalog,version,target,says",
    [
        ("c2", 2, "gr-fp32", "both arms serve the same catalog version unless the rollout is of the catalog itself"),
        ("c2", 1, "gr-int8", "both arms serve the same catalog version unless the rollout is of the catalog itself"),
        ("other", 2, "gr-fp32", "serves catalog 'other-items'; the stable serves catalog 'items'"),
    ],
    ids=["new-model-on-new-catalog", "new-precision-on-new-catalog", "another-catalog"],
)
def test_arms_on_different_catalogs_are_a_400_saying_why(
    endpoint, deployer_api, team_a, catalogs, catalog, version, target, says
):
    candidate = factories.gr_artifact(team_a, catalogs[catalog], version=version, target=target)
    response = deployer_api.post(
        "/api/v1/endpoints/recs-ep/rollouts/", {"candidate_artifact": candidate.pk}, format="json"
    )
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "catalog_mismatch"
    assert says in response.json()["detail"]
    assert not Rollout.objects.exists() and not PoolModel.objects.filter(artifact=candidate).exists()


def test_a_ranker_beside_a_generative_recommender_is_refused(endpoint, team_a, artifact_factory):
    ranker = artifact_factory(team_a, model_name="recs-ctr")
    assert serving_problem(endpoint=endpoint, artifact=ranker).code == "wrong_model"
