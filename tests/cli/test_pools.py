"""`modelplane pool create` against a live server: a Kubernetes pool's namespace, image and
repository secret are checked against what the operator allowed the team (the same rule
as the API), each refusal printed with its field and rule and exit 4; the team's default
namespace is assigned when none is given."""

import pytest

from deployments.models import ServingPool
from harness import factories
from modelplane_cli import exits
from registry.models import Role

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_a_kubernetes_pool_outside_the_teams_confinement_is_refused_naming_the_rule(cli_as, db):
    red = factories.team("red")
    deployer = factories.user("red-deployer")
    factories.member(deployer, red, Role.DEPLOYER)
    cli = cli_as(deployer)
    base = ["pool", "create", "red-k8s", "--team", "red", "--driver", "kubernetes"]
    base += ["--model-repository", "s3://red/models", "--max-replicas", "1"]
    for extra, words in (
        (["--namespace", "modelplane"], "namespace: 'modelplane' is the platform's or the cluster's own namespace"),
        (["--image", "evil.example/steal:1"], "image: 'evil.example/steal:1' is not an image team 'red' may run"),
        (["--repository-secret", "modelplane-secrets"], "repository_secret: 'modelplane-secrets' is a name of"),
    ):
        refused = cli(*base, *extra)
        assert refused.code == exits.API and words in refused.err, refused
    assert not ServingPool.objects.exists()
    made = cli(*base, "--json")
    assert made.code == 0, made
    assert made.json()["namespace"] == "modelplane-team-red"
    assert made.json()["image"] == "nvcr.io/nvidia/tritonserver:24.10-py3"


def test_endpoint_update_sets_the_latency_margin_and_back_to_derived(cli_as, deployer, team_a):
    """`modelplane endpoint update --latency-margin X`, then `derived` (null: the margin from
    the SLO's headroom again); a value that is neither is a usage error before any request."""
    from deployments.models import Endpoint

    endpoint = factories.endpoint(factories.pool(team_a, "margin-pool"), name="margin-cli")
    cli = cli_as(deployer)
    set_ = cli("endpoint", "update", "margin-cli", "--latency-margin", "0.5", "--json")
    assert set_.code == 0 and set_.json()["latency_margin"] == 0.5, set_
    assert Endpoint.objects.get(pk=endpoint.pk).latency_margin == 0.5
    reset = cli("endpoint", "update", "margin-cli", "--latency-margin", "derived")
    assert reset.code == 0 and "latency margin" in reset.out and "derived from the SLO" in reset.out, reset
    assert Endpoint.objects.get(pk=endpoint.pk).latency_margin is None
    bad = cli("endpoint", "update", "margin-cli", "--latency-margin", "lots")
    assert bad.code == exits.USAGE and "neither a fraction" in bad.err, bad
    refused = cli("endpoint", "update", "margin-cli", "--latency-margin", "9")
    assert refused.code == exits.API and "latency_margin" in refused.err, refused
