"""The operator's policy for team pools (deployments/pool_policy.py), rule by rule: the
namespace a team's pools run in, the images they may run (registry and tag pattern or
digest, parsed as distribution/reference does), the Secrets they may name. Pure: no
database, no cluster."""

import pytest

from deployments import pool_policy
from deployments.pool_policy import PoolPolicy
from kernel.errors import InvalidInput

DIGEST = "sha256:" + "ab" * 32
POLICY = PoolPolicy(
    team_namespaces={"blue": ("blue-serving", "blue-batch"), "ops": ("modelplane", "kube-system")},
    images=("nvcr.io/nvidia/tritonserver:*-py3",),
    team_images={"blue": ("registry.blue.example/triton@" + DIGEST, "registry.blue.example/triton:2.*")},
)


def refused(check, **kwargs) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        check(POLICY, **kwargs)
    return caught.value


@pytest.mark.parametrize(
    "team, asked, expected",
    [
        ("red", "", "modelplane-team-red"),  # assigned by the template
        ("Red Team", "", "modelplane-team-red-team"),  # the team's name as a DNS label
        ("red", "modelplane-team-red", "modelplane-team-red"),
        ("blue", "", "blue-serving"),  # the operator's list: its first is the default
        ("blue", "blue-batch", "blue-batch"),
    ],
)
def test_a_team_runs_in_its_own_namespaces(team, asked, expected):
    assert pool_policy.namespace_check(POLICY, team=team, namespace=asked) == expected


@pytest.mark.parametrize(
    "team, namespace, code",
    [
        ("red", "modelplane", "namespace_protected"),  # the platform's
        ("red", "monitoring", "namespace_protected"),  # Prometheus's
        ("red", "kube-system", "namespace_protected"),
        ("red", "default", "namespace_protected"),
        ("red", "blue-serving", "namespace_not_allowed"),  # another team's
        ("red", "modelplane-team-blue", "namespace_not_allowed"),
        ("blue", "modelplane-team-blue", "namespace_not_allowed"),  # listed teams get only their list
    ],
)
def test_every_other_namespace_is_refused_naming_the_rule(team, namespace, code):
    error = refused(pool_policy.namespace_check, team=team, namespace=namespace)
    assert (error.field, error.code) == ("namespace", code)
    assert error.detail.startswith("namespace: ")


def test_an_operator_cannot_map_a_team_into_the_platforms_namespace():
    assert POLICY.namespaces_for("ops") == ()
    error = refused(pool_policy.namespace_check, team="ops", namespace="")
    assert error.code == "namespace_not_assigned"


@pytest.mark.parametrize(
    "team, image",
    [
        ("red", "nvcr.io/nvidia/tritonserver:24.10-py3"),
        ("red", "nvcr.io/nvidia/tritonserver:25.01-py3@" + DIGEST),  # a tag that matches, pinned further
        ("blue", "registry.blue.example/triton@" + DIGEST),
        ("blue", "registry.blue.example/triton:2.51"),
    ],
)
def test_allowed_images(team, image):
    assert pool_policy.image_check(POLICY, team=team, image=image) == image


@pytest.mark.parametrize(
    "team, image, code",
    [
        ("red", "evil.example/steal:1", "image_not_allowed"),
        ("red", "nvcr.io/nvidia/tritonserver:24.10-trtllm-python-py3-evil", "image_not_allowed"),
        ("red", "nvcr.io/nvidia/tritonserver-evil:24.10-py3", "image_not_allowed"),  # the repository, whole
        ("red", "nvcr.io/nvidia/tritonserver@" + DIGEST, "image_not_allowed"),  # no tag: only digest patterns
        ("red", "registry.blue.example/triton:2.51", "image_not_allowed"),  # blue's, not red's
        ("blue", "registry.blue.example/triton@sha256:" + "cd" * 32, "image_not_allowed"),  # another digest
        ("red", "tritonserver:24.10-py3", "image_registry_required"),  # Docker Hub by omission
        ("red", "NVCR.io/Nvidia/Tritonserver:1", "bad_image"),
        ("red", "nvcr.io/nvidia/tritonserver:24.10 -py3", "bad_image"),
    ],
)
def test_other_images_are_refused_naming_the_rule(team, image, code):
    error = refused(pool_policy.image_check, team=team, image=image)
    assert (error.field, error.code) == ("image", code)


def test_secrets_must_be_bound_and_never_the_platforms():
    bound = {"red-s3"}
    check = pool_policy.secret_check
    assert check(team="red", namespace="ns", secret="", bound=bound) == ""
    assert check(team="red", namespace="ns", secret="red-s3", bound=bound) == "red-s3"
    with pytest.raises(InvalidInput) as unbound:
        check(team="red", namespace="ns", secret="blue-s3", bound=bound)
    assert (unbound.value.field, unbound.value.code) == ("repository_secret", "secret_not_bound")
    for platform in ("modelplane-secrets", "modelplane-triton-admin-blue-pool"):
        with pytest.raises(InvalidInput) as theirs:
            check(team="red", namespace="ns", secret=platform, bound={platform})  # even if someone bound it
        assert theirs.value.code == "secret_platform"


def test_the_policy_comes_from_the_settings(settings):
    settings.POOL_NAMESPACE_TEMPLATE = "serving-{team}"
    settings.POOL_TEAM_NAMESPACES = {"blue": ["blue"]}
    settings.POOL_IMAGES = ["registry.internal/triton:*"]
    settings.POOL_TEAM_IMAGES = {"blue": ["registry.internal/blue-triton:*"]}
    settings.KUBERNETES_PLATFORM_NAMESPACE = "platform"
    policy = PoolPolicy.from_settings()
    assert policy.namespaces_for("red") == ("serving-red",) and policy.namespaces_for("blue") == ("blue",)
    assert policy.images_for("blue") == ("registry.internal/triton:*", "registry.internal/blue-triton:*")
    assert policy.protected("platform") and not policy.protected("modelplane")
