import pytest

from deployments.models import PoolModel, PoolModelState
from deployments.services import endpoints as endpoint_services
from harness import factories
from harness.gr import tiny_gr


@pytest.fixture(scope="session")
def gr_source():
    """The tiny generative recommender (bundle and catalog arrays), made once per machine and code."""
    return tiny_gr()


@pytest.fixture
def fast_gr_build(settings):
    """Build settings that keep a tiny GR build to seconds: a small holdout, short benchmarks."""
    settings.BUILD_GR_HOLDOUT_USERS = 48
    settings.BUILD_BENCH_SECONDS = 0.02
    settings.BUILD_BENCH_MAX_ITERS = 20


@pytest.fixture
def catalogs(team_a):
    """Catalog versions c1 and c2 of one catalog, and another catalog (rows only)."""
    return {
        "c1": factories.item_catalog_version(team_a, "items", 1),
        "c2": factories.item_catalog_version(team_a, "items", 2),
        "other": factories.item_catalog_version(team_a, "other-items", 1),
    }


@pytest.fixture
def endpoint(deployer, team_a, catalogs):
    """A GR endpoint (recs-ep) whose stable serves catalog version c1 on a ready one-replica pool."""
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    stable = factories.gr_artifact(team_a, catalogs["c1"], version=1)
    ep = endpoint_services.endpoint_create(user=deployer, name="recs-ep", pool=pool, stable_artifact=stable)
    PoolModel.objects.update(state=PoolModelState.READY, replica_ready={"r0": True})
    return ep
