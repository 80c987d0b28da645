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
