import pytest

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
