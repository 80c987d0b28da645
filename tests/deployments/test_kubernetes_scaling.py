"""Who owns a pool Deployment's `spec.replicas`: the driver while the pool has no HPA, the
HPA once it has one, and never both (re-applying every 15 s used to undo every
HPA scale-up).

The API server is the one fake here (no cluster can run on these machines): the recorded
fake API server of tests/deployments/fake_apiserver.py, which implements server-side
apply with field managers (conflicts, force, fields removed when their manager drops
them, the scale subresource updated by `kube-controller-manager` as the HPA controller
does). The driver and the kubernetes client are the real ones.
"""

import pytest
from kubernetes import client

from deployments.drivers.base import PoolSpec
from deployments.drivers.kubernetes import KubernetesDriver, render
from tests.deployments.fake_apiserver import FakeApiServer

DEPLOYMENT = "/apis/apps/v1/namespaces/serving/deployments/triton-ranker"
HPA = "/apis/autoscaling/v2/namespaces/serving/horizontalpodautoscalers/triton-ranker"
PDB = "/apis/policy/v1/namespaces/serving/poddisruptionbudgets/triton-ranker"
REPLICAS = ("spec", "replicas")


def spec(**overrides) -> PoolSpec:
    base = dict(
        name="ranker",
        replicas=2,
        model_repository="s3://bucket/repo",
        device_kind="cpu",
        resources={"cpu": "2", "memory": "4Gi"},
        namespace="serving",
        team="team-a",
        min_replicas=2,
        max_replicas=8,
        admin_key="ranker-admin-key",
    )
    base.update(overrides)
    return PoolSpec(**base)


@pytest.fixture(autouse=True)
def serving_namespace(settings):
    """The operator gave team-a the namespace `serving` (deployments/pool_policy.py)."""
    settings.POOL_TEAM_NAMESPACES = {"team-a": ["serving"]}


@pytest.fixture
def api():
    server = FakeApiServer()
    yield server
    server.close()


def driver(api, pool: PoolSpec) -> KubernetesDriver:
    return KubernetesDriver(pool, api_client=client.ApiClient(client.Configuration(host=api.url)), admin_key="k")


def test_reconciles_never_undo_the_hpas_scale_up(api):
    pool = driver(api, spec())
    pool.apply()
    assert api.get(DEPLOYMENT)["spec"]["replicas"] == 2  # seeded by the handover manager
    assert api.owner_of(DEPLOYMENT, REPLICAS) == ["modelplane-handover"]
    api.controller_scales(DEPLOYMENT, 7)  # load arrives: the HPA scales up
    assert api.owner_of(DEPLOYMENT, REPLICAS) == ["kube-controller-manager"]
    for _ in range(3):  # run_pools re-applies every 15 s
        pool.apply()
    assert api.get(DEPLOYMENT)["spec"]["replicas"] == 7
    assert api.owner_of(DEPLOYMENT, REPLICAS) == ["kube-controller-manager"]
    applied = [r for r in api.requests if r["method"] == "PATCH" and r["path"] == DEPLOYMENT]
    assert sum(b'"replicas"' in r["body"] and b'"template"' in r["body"] for r in applied) == 0


def test_a_pool_without_an_hpa_is_sized_by_the_driver(api):
    fixed = driver(api, spec(replicas=3, min_replicas=3, max_replicas=3))
    fixed.apply()
    assert api.get(DEPLOYMENT)["spec"]["replicas"] == 3
    assert api.owner_of(DEPLOYMENT, REPLICAS) == ["modelplane"]
    assert api.get(HPA) is None
    fixed.spec = spec(replicas=4, min_replicas=4, max_replicas=4)
    fixed.apply()
    assert api.get(DEPLOYMENT)["spec"]["replicas"] == 4


def test_turning_autoscaling_on_hands_the_count_over_without_a_reset(api):
    """Dropping `replicas` from the applied config alone would let the API server reset it
    to 1 before the HPA's first write: the handover manager holds it meanwhile."""
    pool = driver(api, spec(replicas=5, min_replicas=5, max_replicas=5))
    pool.apply()
    assert api.owner_of(DEPLOYMENT, REPLICAS) == ["modelplane"]
    pool.spec = spec(replicas=5, min_replicas=2, max_replicas=8)
    pool.apply()
    assert api.get(DEPLOYMENT)["spec"]["replicas"] == 5  # never 1
    assert api.owner_of(DEPLOYMENT, REPLICAS) == ["modelplane-handover"]
    assert api.get(HPA)["spec"]["minReplicas"] == 2
    api.controller_scales(DEPLOYMENT, 3)
    pool.apply()
    assert api.get(DEPLOYMENT)["spec"]["replicas"] == 3


def test_scale_to_zero_takes_the_count_back_and_a_restart_seeds_the_hpa(api):
    pool = driver(api, spec())
    pool.apply()
    api.controller_scales(DEPLOYMENT, 6)
    pool.scale(0)
    assert api.get(DEPLOYMENT)["spec"]["replicas"] == 0
    assert api.owner_of(DEPLOYMENT, REPLICAS) == ["modelplane"]  # forced back from the HPA
    assert api.get(HPA) is None and api.get(PDB) is None
    pool.scale(3)
    assert api.get(DEPLOYMENT)["spec"]["replicas"] == 3
    assert api.owner_of(DEPLOYMENT, REPLICAS) == ["modelplane-handover"]
    assert api.get(HPA) is not None


def test_the_fake_api_server_refuses_a_conflicting_apply_without_force(api):
    """The fake is only worth trusting if it can fail: a second applier of a field owned by
    another manager with a different value gets the API server's 409."""
    pool = driver(api, spec())
    pool.apply()
    api.controller_scales(DEPLOYMENT, 6)
    apps = client.AppsV1Api(pool.api_client)
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "triton-ranker"},
        "spec": {"replicas": 1},
    }
    with pytest.raises(client.ApiException) as refused:
        apps.patch_namespaced_deployment(
            "triton-ranker", "serving", body, field_manager="someone", _content_type="application/apply-patch+yaml"
        )
    assert refused.value.status == 409 and "kube-controller-manager" in refused.value.body


@pytest.mark.parametrize(
    "pool, kinds, metric",
    [
        (spec(), ["HorizontalPodAutoscaler", "PodDisruptionBudget"], ("Resource", "cpu")),
        (spec(resources={}, min_replicas=1, max_replicas=4, replicas=1), [], None),  # CPU HPA without a request: none
        (
            spec(device_kind="nvidia-l4", gpus_per_replica=1, min_replicas=1, replicas=1),
            ["HorizontalPodAutoscaler"],
            ("Pods", "triton_queue_time_ms"),
        ),
        (
            spec(device_kind="nvidia-l4", gpus_per_replica=1, autoscale_metric="pending_requests", autoscale_target=4),
            ["HorizontalPodAutoscaler", "PodDisruptionBudget"],
            ("Pods", "nv_inference_pending_request_count"),
        ),
        (spec(replicas=1, min_replicas=1, max_replicas=1), [], None),  # one replica: no budget that blocks drains
    ],
    ids=["cpu-hpa", "cpu-no-request", "gpu-queue-time", "gpu-pending", "single"],
)
def test_what_scales_a_pool_and_what_protects_it(pool, kinds, metric):
    objects = {o["kind"]: o for o in render(pool)}
    assert [k for k in ("HorizontalPodAutoscaler", "PodDisruptionBudget") if k in objects] == kinds
    if metric:
        hpa_metric = objects["HorizontalPodAutoscaler"]["spec"]["metrics"][0]
        name = hpa_metric["resource"]["name"] if metric[0] == "Resource" else hpa_metric["pods"]["metric"]["name"]
        assert (hpa_metric["type"], name) == metric
        if metric[1] == "nv_inference_pending_request_count":
            assert hpa_metric["pods"]["target"]["averageValue"] == "4000m"
    if "PodDisruptionBudget" in objects:
        assert objects["PodDisruptionBudget"]["spec"] == {
            "minAvailable": pool.min_replicas - 1,
            "selector": objects["Deployment"]["spec"]["selector"],
        }
