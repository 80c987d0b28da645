"""`modelplane alias` and model URIs wherever the CLI names an artifact or a version, against a
live server: an alias set, moved, resolved and deleted (each an audit event); an endpoint
created on `models:/ctr@champion`, a rollout and an experiment started on
`models:/ctr@challenger`; a URI the server cannot resolve is the API's refusal (exit 4)
naming the alias, and a value that is neither an id nor a URI never leaves the CLI (exit 2)."""

import pytest

from deployments.models import Endpoint, Rollout
from experiments.models import Experiment
from harness import factories
from modelplane_cli import exits
from registry.models import Event, VersionAlias

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def ctr(team_a, artifact_factory):
    """Model `ctr` with versions 1, 2 and 3, each with a servable onnx-fp32 artifact."""
    return [artifact_factory(team_a) for _ in range(3)]


def test_set_move_resolve_delete(cli_as, alice, ctr):
    cli = cli_as(alice)
    v1, v2 = ctr[0].version, ctr[1].version
    made = cli("alias", "set", "ctr", "champion", "1")
    assert made.code == 0 and "models:/ctr@champion -> version 1" in made.out, made
    moved = cli("alias", "set", "ctr", "champion", "2", "--json")
    assert moved.code == 0 and moved.json()["version_id"] == v2.pk, moved
    assert VersionAlias.objects.get(name="champion").version == v2

    listed = cli("alias", "list", "ctr")
    assert listed.code == 0 and "champion" in listed.out and "models:/ctr@champion" in listed.out, listed
    resolved = cli("alias", "resolve", "models:/ctr@champion")
    assert resolved.code == 0 and f"id:        {v2.pk}" in resolved.out and "champion" in resolved.out, resolved
    by_number = cli("alias", "resolve", "models:/ctr/1", "--field", "id")
    assert by_number.out.strip() == str(v1.pk), by_number

    malformed = cli("alias", "resolve", "models:/ctr")
    assert malformed.code == exits.API and "bad_model_uri" in malformed.err and "@<alias>" in malformed.err
    bad_name = cli("alias", "set", "ctr", "v3", "3")  # reads as a version: refused by the server
    assert bad_name.code == exits.API and "alias" in bad_name.err, bad_name

    gone = cli("alias", "delete", "ctr", "champion")
    assert gone.code == 0 and "Deleted models:/ctr@champion" in gone.out, gone
    again = cli("alias", "delete", "ctr", "champion")
    assert again.code == exits.API and "no alias 'champion'" in again.err, again
    actions = list(
        Event.objects.filter(object_type="registry.registeredmodel", action__startswith="alias")
        .order_by("pk")
        .values_list("action", flat=True)
    )
    assert actions == ["alias_set", "alias_set", "alias_deleted"]


def test_endpoint_rollout_and_experiment_by_model_uri(cli_as, alice, deployer, team_a, ctr):
    stable, candidate, third = ctr
    owner = cli_as(alice)
    assert owner("alias", "set", "ctr", "champion", "1").code == 0
    assert owner("alias", "set", "ctr", "challenger", "2").code == 0
    cli = cli_as(deployer)
    factories.pool(team_a, "cpu-pool", ready_replicas=1)

    made = cli("endpoint", "create", "ctr", "--pool", "cpu-pool", "--stable-artifact", "models:/ctr@champion")
    assert made.code == 0, made
    assert Endpoint.objects.get(name="ctr").stable_artifact == stable

    unknown = cli("rollout", "start", "ctr", "--candidate", "models:/ctr@nightly", "--steps", "50,100")
    assert unknown.code == exits.API and "alias_not_found" in unknown.err and "challenger" in unknown.err, unknown
    no_variant = cli("rollout", "start", "ctr", "--candidate", "models:/ctr@challenger", "--variant", "onnx-int8")
    assert no_variant.code == exits.API and "no servable 'onnx-int8'" in no_variant.err, no_variant
    neither = cli("rollout", "start", "ctr", "--candidate", "ctr@challenger")
    assert neither.code == exits.USAGE and "models:/NAME@ALIAS" in neither.err, neither
    assert not Rollout.objects.exists()

    started = cli(
        "experiment",
        "create",
        "ctr",
        "uri-arms",
        "--candidate",
        "models:/ctr@challenger",
        "--candidate",
        "models:/ctr/3",
    )
    assert started.code == 0, started
    arms = Experiment.objects.get(name="uri-arms").arms.order_by("pk")
    assert [a.artifact for a in arms] == [stable, candidate, third]
    Experiment.objects.all().delete()  # an experiment holds the endpoint: make room for the rollout

    rolled = cli("rollout", "start", "ctr", "--candidate", "models:/ctr@challenger", "--steps", "50,100", "--json")
    assert rolled.code == 0, rolled
    assert Rollout.objects.get().candidate_artifact == candidate
