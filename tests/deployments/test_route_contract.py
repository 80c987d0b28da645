"""The route table contract from both sides: any table the control plane can
produce, the gateway's compiler accepts whole, with no refused entry or key.

Configurations are drawn with a seeded generator (deterministic): endpoints public or
closed, with and without ready replicas, rollouts in every active state and strategy
(shadow, canary with and without the fair baseline, blue-green), experiments with two and
three arms, keys scoped and unscoped, revoked and not; plus rows the API would refuse,
written straight into the database (a candidate of another model with the stable's
variant name, a GPU variant on a CPU pool, a rebuild of the stable's version and variant,
a rollout whose plan does not hold, an inference key whose digest is not one): those must
cost only their own split (the endpoint serves its stable alone) or their own key, never
an entry the gateway refuses nor a table the builder cannot make."""

import random

import pytest

from deployments.models import InferenceKey, PoolModel, PoolModelState, Rollout
from deployments.rollout_machine import ACTIVE, State, Strategy
from deployments.routes import route_build
from deployments.services import endpoints as endpoint_services
from deployments.services import keys as key_services
from experiments.services import online as experiment_services
from gateway.table.routes import compile_table, validate
from harness import factories
from registry.models import Artifact, Build, BuildStatus, Role

pytestmark = pytest.mark.django_db
ORIGINS = ["https://provider.example.test"]  # where the contract test's provider secret may be sent
SEED = 21
ROUNDS = 24


def accepted_whole(table: dict) -> None:
    validate(table)  # strict: any refusal raises, naming it
    compiled = compile_table(table, {})
    assert compiled.refusals == [] and set(compiled.endpoints) == {e["name"] for e in table["endpoints"]}


def rebuild_of(artifact: Artifact) -> Artifact:
    """Another artifact of the same version and variant (a second build)."""
    build = Build.objects.create(version=artifact.version, targets=[artifact.variant], status=BuildStatus.SUCCEEDED)
    return Artifact.objects.create(
        version=artifact.version,
        build=build,
        variant=artifact.variant,
        status=artifact.status,
        triton_model_name=artifact.triton_model_name,
        path=artifact.path,
        sha256=artifact.sha256,
    )


BAD_PLANS = (  # rows no form or API accepts: each makes Rollout.plan raise
    {"strategy": Strategy.BLUE_GREEN, "shadow_seconds": 0, "steps_bp": [10000]},
    {"strategy": Strategy.CANARY, "steps_bp": [5000, 2500]},
    {"strategy": Strategy.CANARY, "steps_bp": [1000, 10000], "on_inconclusive": "maybe"},
    {"strategy": Strategy.CANARY, "steps_bp": [1000, 10000], "step_min_seconds": 60, "step_deadline_seconds": 5},
)


def _bad_plan_rollout(rng, endpoint, candidate):
    state = rng.choice([State.SHADOW, State.CANARY, State.PAUSED, State.PROMOTING])
    return factories.rollout(
        endpoint,
        candidate,
        state=state,
        paused_from=State.CANARY if state == State.PAUSED else "",
        **rng.choice(BAD_PLANS),
    )


def _rollout(rng, endpoint, candidate):
    state = rng.choice(sorted(s.value for s in ACTIVE))
    strategy = rng.choice([s.value for s in Strategy])
    steps = [10000] if strategy == Strategy.BLUE_GREEN else sorted(rng.sample([500, 1000, 2500, 5000], 2)) + [10000]
    baseline = ""
    if strategy == Strategy.CANARY and rng.random() < 0.5:  # with the fair baseline's copy of the stable
        baseline = f"{endpoint.stable_artifact.triton_model_name}__baseline"
    return factories.rollout(
        endpoint,
        candidate,
        state=state,
        strategy=strategy,
        steps_bp=steps,
        step_index=rng.randrange(len(steps)),
        paused_from=State.CANARY if state == State.PAUSED else "",
        shadow_seconds=30 if strategy == Strategy.BLUE_GREEN or rng.random() < 0.3 else 0,
        shadow_sample_rate=rng.choice((0.1, 1.0)),
        baseline_model=baseline,
    )


def test_every_table_the_control_plane_produces_is_accepted_whole(
    deployer, team_a, artifact_factory, onnx_path, tmp_path
):
    rng = random.Random(SEED)
    pools = [factories.pool(team_a, f"pool-{i}", ready_replicas=n) for i, n in enumerate((0, 1, 2))]
    artifacts = [artifact_factory(team_a) for _ in range(4)]  # model "ctr" v1..v4
    foreign = factories.artifact(team_a, onnx_path, tmp_path / "f", model_name="demo-ctr")  # also v1-onnx-fp32
    gpu = factories.artifact(team_a, onnx_path, tmp_path / "g", variant="tensorrt")
    kinds, bad_keys = [], set()
    for i in range(ROUNDS):
        pool = rng.choice(pools)
        stable, *others = rng.sample(artifacts, 3)
        endpoint = endpoint_services.endpoint_create(
            user=deployer, name=f"ep-{i}", pool=pool, stable_artifact=stable, public=rng.random() < 0.5
        )
        PoolModel.objects.filter(pool=pool).update(
            state=PoolModelState.READY, replica_ready={"r0": True, "r1": rng.random() < 0.5}
        )
        kind = rng.choice(["none", "rollout", "experiment", "foreign", "gpu", "rebuild", "bad-plan"])
        kinds.append(kind)
        if kind == "rollout":
            _rollout(rng, endpoint, others[0])
        elif kind == "experiment":
            candidates = others[: rng.choice((1, 2))]
            experiment = experiment_services.experiment_create(
                user=deployer, endpoint=endpoint, name=f"exp-{i}", candidates=candidates, baseline_rate=0.2, mde=0.05
            )
            experiment_services.experiment_start(user=deployer, experiment=experiment)
        elif kind == "bad-plan":  # written around the API's check: costs its split alone
            _bad_plan_rollout(rng, endpoint, others[0])
        elif kind in ("foreign", "gpu", "rebuild"):  # written around the API's check
            candidate = {"foreign": foreign, "gpu": gpu, "rebuild": rebuild_of(stable)}[kind]
            _rollout(rng, endpoint, candidate)
        if rng.random() < 0.4:
            key, _ = key_services.inference_key_create(
                user=deployer, team=team_a, name=f"key-{i}", endpoints=[endpoint.name] if rng.random() < 0.5 else None
            )
            if rng.random() < 0.3:
                key_services.inference_key_revoke(user=deployer, key=key)
            elif rng.random() < 0.2:  # a row edited by hand: its digest is not one
                InferenceKey.objects.filter(pk=key.pk).update(sha256=f"edited-{i}")
                bad_keys.add(key.gateway_id)
        table, problems, key_problems = route_build()
        accepted_whole(table)
        served = {e["name"]: e for e in table["endpoints"]}
        assert set(served) == {f"ep-{j}" for j in range(i + 1)}  # every endpoint is served
        bad = {f"ep-{j}" for j, k in enumerate(kinds) if k == "bad-plan"}
        assert set(problems) == bad and set(key_problems) == bad_keys
        assert all([v["role"] for v in served[name]["variants"]] == ["stable"] for name in bad)
    assert {"rollout", "experiment", "foreign", "gpu", "rebuild", "bad-plan"} <= set(kinds)  # every kind was drawn
    assert bad_keys  # and a bad key
    assert Rollout.objects.count() >= 4


def test_tables_with_llm_endpoints_match_the_schema_whole(deployer, team_a, artifact_factory):
    """LLM entries: endpoints on a Triton generate model or a backend reference,
    with rollouts in every active state and strategy, experiments, fallbacks and secrets, beside
    tensor endpoints: the whole document matches gateway/contracts/route_table.schema.json (the gateway's
    own check of the LLM entries comes with gateway/llm/), the tensor side is still accepted
    whole by the gateway's compiler, and every secret listed is named by a backend."""
    import json

    import jsonschema_rs

    from deployments.routes import SCHEMA_PATH
    from registry.services import llm as llm_services

    schema = jsonschema_rs.validator_for(json.loads(SCHEMA_PATH.read_text()))
    rng = random.Random(SEED + 27)
    admin = factories.user("llm-admin")
    factories.member(admin, team_a, Role.ADMIN)
    secret = llm_services.secret_create(
        user=admin, team=team_a, name="provider", value="sk-contract-0123456789", origins=ORIGINS
    )
    pool = factories.pool(team_a, "llm-pool", ready_replicas=2)
    chats = [factories.llm_artifact(team_a, model_name="chat") for _ in range(4)]  # chat v1..v4 (Triton)
    for artifact in chats:
        factories.pool_model_ready(pool, artifact)
    external = factories.llm_artifact(
        team_a, model_name="ext", kind="openai", base_url=f"{ORIGINS[0]}/v1", secret=secret, cost_per_1k_prompt=0.1
    )
    tensor = artifact_factory(team_a)
    endpoint_services.endpoint_create(user=deployer, name="ranker", pool=pool, stable_artifact=tensor, public=True)
    kinds, roles = [], set()
    for i in range(ROUNDS // 2):
        stable, *others = rng.sample(chats, 3)
        fallbacks = [external.pk] if rng.random() < 0.5 else []
        endpoint = endpoint_services.endpoint_create(
            user=deployer,
            name=f"llm-{i}",
            pool=pool,
            stable_artifact=external if rng.random() < 0.2 else stable,
            kind="llm",
            public=rng.random() < 0.5,
            llm_fallbacks=fallbacks,
        )
        kind = "none" if endpoint.stable_artifact_id == external.pk else rng.choice(["none", "rollout", "experiment"])
        kinds.append(kind)
        if kind == "rollout":
            _rollout(rng, endpoint, others[0])
        elif kind == "experiment":
            experiment = experiment_services.experiment_create(
                user=deployer,
                endpoint=endpoint,
                name=f"llm-exp-{i}",
                candidates=others[:1],
                baseline_rate=0.2,
                mde=0.05,
            )
            experiment_services.experiment_start(user=deployer, experiment=experiment)
        if rng.random() < 0.4:
            key_services.inference_key_create(
                user=deployer,
                team=team_a,
                name=f"llm-key-{i}",
                tokens_per_minute=rng.choice((None, 1000)),
                max_streams=2,
            )
        PoolModel.objects.filter(pool=pool).update(state=PoolModelState.READY, replica_ready={"r0": True, "r1": True})
        table, problems, _ = route_build()
        errors = [f"{'/'.join(map(str, e.instance_path))}: {e.message}" for e in schema.iter_errors(table)]
        assert errors == [] and problems == {}
        validate({k: v for k, v in table.items() if k not in ("llm_endpoints", "secrets")})
        assert {e["name"] for e in table["llm_endpoints"]} == {f"llm-{j}" for j in range(i + 1)}
        named = {b.get("secret") for e in table["llm_endpoints"] for v in e["variants"] for b in v["backends"]}
        named |= {b.get("secret") for e in table["llm_endpoints"] for b in e["fallbacks"]}
        assert {s["id"] for s in table["secrets"]} == named - {None}
        roles |= {v["role"] for e in table["llm_endpoints"] for v in e["variants"]}
    assert {"rollout", "experiment"} <= set(kinds)
    assert {"stable", "arm"} <= roles and roles & {"canary", "shadow"}  # splits were emitted, not only stables
