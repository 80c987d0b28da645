"""Validation before acceptance: what the gateway would refuse is refused first,
with a 400 saying why, by the one check (deployments/selectors/compatibility.py) that the
API, the dashboard, experiments and the route table builder share."""

import pytest
from google.protobuf import text_format

from deployments.models import PoolModel, PoolModelState, Rollout
from deployments.routes import route_table
from deployments.selectors.compatibility import signature_problem
from deployments.services import endpoints as endpoint_services
from experiments.services import online as experiment_services
from harness import factories
from harness.packaging import model_config
from kernel.errors import InvalidInput
from registry import storage
from registry.selectors.serving import _CONFIG_SIGNATURES

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoint(deployer, team_a, artifact_factory):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    stable = artifact_factory(team_a)  # model "ctr", v1 onnx-fp32
    ep = endpoint_services.endpoint_create(user=deployer, name="ux-cli", pool=pool, stable_artifact=stable)
    PoolModel.objects.update(state=PoolModelState.READY, replica_ready={"r0": True})
    return ep


def other_model_artifact(team, onnx_path, tmp_path):
    """v1 onnx-fp32 of another model: the same variant name as the stable (v1-onnx-fp32)."""
    return factories.artifact(team, onnx_path, tmp_path / "other", model_name="demo-ctr")


def with_inputs(artifact, change):
    """Rewrite the artifact's stored config.pbtxt with `change(config)` applied."""
    config = model_config(artifact.triton_model_name)
    change(config)
    (storage.artifact_model_dir(artifact) / "config.pbtxt").write_text(text_format.MessageToString(config))
    _CONFIG_SIGNATURES.pop((artifact.pk, artifact.sha256), None)
    return artifact


def post_rollout(api, candidate):
    return api.post("/api/v1/endpoints/ux-cli/rollouts/", {"candidate_artifact": candidate.pk}, format="json")


def test_a_candidate_of_another_model_is_a_400_that_names_both_models(
    endpoint, deployer_api, team_a, onnx_path, tmp_path
):
    candidate = other_model_artifact(team_a, onnx_path, tmp_path)
    response = post_rollout(deployer_api, candidate)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "wrong_model"
    assert "'demo-ctr'" in body["detail"] and "'ctr'" in body["detail"] and "ux-cli" in body["detail"]
    assert not Rollout.objects.exists() and not PoolModel.objects.filter(artifact=candidate).exists()


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda c: c.input[0].ClearField("dims") or c.input[0].dims.extend([12]), "shape [-1, 12]"),
        (lambda c: setattr(c.input[1], "data_type", 8), "is INT32"),  # TYPE_INT32
        (lambda c: setattr(c.input[0], "name", "user_feats"), "needs input(s) ['user_feats']"),
    ],
)
def test_a_candidate_whose_signature_does_not_take_the_stables_requests_is_a_400(
    endpoint, deployer_api, team_a, artifact_factory, change, words
):
    candidate = with_inputs(artifact_factory(team_a), change)
    response = post_rollout(deployer_api, candidate)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "incompatible_signature" and words in response.json()["detail"]
    assert not Rollout.objects.exists()


def test_a_compatible_candidate_is_accepted(endpoint, deployer_api, team_a, artifact_factory):
    response = post_rollout(deployer_api, artifact_factory(team_a))
    assert response.status_code == 201, response.content


def test_a_gpu_variant_on_a_cpu_pool_is_a_400(endpoint, deployer_api, team_a, onnx_path, tmp_path):
    candidate = factories.artifact(team_a, onnx_path, tmp_path / "gpu", variant="tensorrt")
    response = post_rollout(deployer_api, candidate)
    assert response.status_code == 400 and response.json()["code"] == "variant_not_servable_here"
    assert "needs a GPU" in response.json()["detail"]


def test_the_dashboard_form_goes_through_the_same_check(endpoint, deployer, team_a, onnx_path, tmp_path):
    from django.test import Client

    client = Client()
    client.force_login(deployer)
    candidate = other_model_artifact(team_a, onnx_path, tmp_path)
    response = client.post(
        "/deployments/endpoints/ux-cli/rollouts/",
        {"candidate_artifact": candidate.pk, "steps_pct": "10,100", "step_min_seconds": "5"},
    )
    assert response.status_code in (200, 400) and not Rollout.objects.exists()


def test_an_experiment_arm_of_another_model_is_refused(endpoint, deployer, team_a, onnx_path, tmp_path):
    arm = other_model_artifact(team_a, onnx_path, tmp_path)
    with pytest.raises(InvalidInput) as caught:
        experiment_services.experiment_create(
            user=deployer, endpoint=endpoint, name="cross", candidates=[arm], baseline_rate=0.2, mde=0.05
        )
    assert caught.value.code == "wrong_model" and "candidates" in str(caught.value)


def test_a_bad_rollout_written_around_the_check_costs_only_its_own_split(
    endpoint, deployer, team_a, onnx_path, tmp_path, artifact_factory
):
    """A rollout row the API would have refused (written straight into the database):
    the builder serves that endpoint's stable alone, and every entry stays one the
    gateway accepts."""
    healthy = endpoint_services.endpoint_create(
        user=deployer, name="healthy", pool=endpoint.pool, stable_artifact=endpoint.stable_artifact
    )
    factories.rollout(endpoint, other_model_artifact(team_a, onnx_path, tmp_path), state="canary", step_index=0)
    factories.rollout(healthy, artifact_factory(team_a), state="canary", step_index=0, steps_bp=[1000, 10000])
    table = {e["name"]: e for e in route_table()["endpoints"]}
    assert [(v["name"], v["weight_bp"]) for v in table["ux-cli"]["variants"]] == [("v1-onnx-fp32", 10000)]
    assert sorted(v["role"] for v in table["healthy"]["variants"]) == ["canary", "stable"]


@pytest.mark.parametrize(
    "stable, other, problem",
    [
        (None, {"inputs": []}, None),
        (
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]},
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [8, 4]}]},
            None,
        ),
        (
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]},
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4, 1]}]},
            "shape [-1, 4, 1]",
        ),
        (
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}]},
            {
                "inputs": [
                    {"name": "x", "datatype": "FP32", "shape": [4]},
                    {"name": "y", "datatype": "FP32", "shape": [1], "optional": True},
                ]
            },
            None,
        ),
        (
            {
                "inputs": [
                    {"name": "x", "datatype": "FP32", "shape": [4]},
                    {"name": "y", "datatype": "FP32", "shape": [1]},
                ]
            },
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}]},
            "does not take input(s) ['y']",
        ),
    ],
)
def test_signature_rules(stable, other, problem):
    found = signature_problem(stable, other)
    assert (found is None) if problem is None else (problem in found)
