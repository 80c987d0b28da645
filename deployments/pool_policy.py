"""Where a team's Kubernetes pool may run and what it may run: a pool spec is tenant input,
checked against what an operator allowed (never only for syntax), at the door (the
services behind the API, the admin console and the CLI) and again when the driver renders
(a row written around the services renders nothing; deployments/drivers/kubernetes/).

- Namespace: the one the platform assigns the team (POOL_NAMESPACE_TEMPLATE, "{team}" the
  team's name as a DNS label), or, for a team an operator lists in POOL_TEAM_NAMESPACES,
  exactly the namespaces listed. Never the platform's own namespace, Prometheus's, `default`
  or a `kube-*` one, whatever a setting says.
- Image: a reference parsed as distribution/reference does (docker-image-py), naming its
  registry, matching a pattern of POOL_IMAGES (every team) or of the team's entry in
  POOL_TEAM_IMAGES: `registry/repository:tag-glob` (the tag matched with fnmatch) or
  `registry/repository@sha256:digest` (that digest only). The repository is matched whole.
- Repository secret: only a Secret an admin bound to the team in that namespace
  (PoolSecretBinding); names beginning `modelplane-` are the platform's and never bound.

Pure: the policy is plain data (`PoolPolicy.from_settings()` reads it); the bindings come
in as names. Every refusal is an InvalidInput naming the field and the rule (its code).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from docker_image import reference

from deployments.pool_fields import DNS1123_LABEL
from kernel.conf import setting
from kernel.errors import InvalidInput

# Secrets the platform makes or runs on (modelplane-secrets, the pools' admin keys, ...).
PLATFORM_SECRET_PREFIX = "modelplane-"
ALWAYS_PROTECTED = ("default", "kube-system", "kube-public", "kube-node-lease")
DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")


@dataclass(frozen=True)
class PoolPolicy:
    """What an operator allowed team pools (settings; docs/pools.md)."""

    platform_namespace: str = "modelplane"
    prometheus_namespace: str = "monitoring"
    namespace_template: str = "modelplane-team-{team}"
    team_namespaces: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    images: tuple[str, ...] = ("nvcr.io/nvidia/tritonserver:*-py3",)
    team_images: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_settings(cls) -> PoolPolicy:
        def team_map(name: str) -> dict[str, tuple[str, ...]]:
            raw = setting(name) or {}
            if not isinstance(raw, Mapping):
                raise ValueError(f'{name}: give a JSON object {{"team": ["...", ...]}}, not {type(raw).__name__}')
            return {str(team): tuple(str(v) for v in (values or ())) for team, values in raw.items()}

        return cls(
            platform_namespace=setting("KUBERNETES_PLATFORM_NAMESPACE"),
            prometheus_namespace=setting("KUBERNETES_PROMETHEUS_NAMESPACE"),
            namespace_template=setting("POOL_NAMESPACE_TEMPLATE"),
            team_namespaces=team_map("POOL_TEAM_NAMESPACES"),
            images=tuple(setting("POOL_IMAGES")),
            team_images=team_map("POOL_TEAM_IMAGES"),
        )

    def protected(self, namespace: str) -> bool:
        """The platform's own, Prometheus's and the cluster's: never a pool's."""
        return namespace in (
            self.platform_namespace,
            self.prometheus_namespace,
            *ALWAYS_PROTECTED,
        ) or namespace.startswith("kube-")

    def namespaces_for(self, team: str) -> tuple[str, ...]:
        """The namespaces `team`'s pools may run in, its default first; () when none."""
        if team in self.team_namespaces:
            listed = self.team_namespaces[team]
        else:
            slug = re.sub(r"[^a-z0-9-]+", "-", team.lower()).strip("-")
            listed = (self.namespace_template.format(team=slug),) if slug else ()
        return tuple(ns for ns in listed if len(ns) <= 63 and DNS1123_LABEL.match(ns) and not self.protected(ns))

    def images_for(self, team: str) -> tuple[str, ...]:
        return (*self.images, *self.team_images.get(team, ()))


def _refuse(field_name: str, code: str, message: str) -> InvalidInput:
    return InvalidInput(f"{field_name}: {message}", code=code, field=field_name)


def namespace_check(policy: PoolPolicy, *, team: str, namespace: str) -> str:
    """`namespace` when team's pools may run there; "" asks for the team's default."""
    allowed = policy.namespaces_for(team)
    if not namespace:
        if not allowed:
            raise _refuse(
                "namespace",
                "namespace_not_assigned",
                f"team {team!r} has no namespace for pools; an operator assigns one (POOL_TEAM_NAMESPACES).",
            )
        return allowed[0]
    if policy.protected(namespace):
        raise _refuse(
            "namespace",
            "namespace_protected",
            f"{namespace!r} is the platform's or the cluster's own namespace; pools never run there "
            f"(team {team!r} may use {', '.join(allowed) or 'none yet'}).",
        )
    if namespace not in allowed:
        raise _refuse(
            "namespace",
            "namespace_not_allowed",
            f"{namespace[:80]!r} is not a namespace of team {team!r}; its pools run in "
            f"{', '.join(allowed) or 'none yet'} (POOL_NAMESPACE_TEMPLATE, POOL_TEAM_NAMESPACES).",
        )
    return namespace


def _parse_image(value: str) -> tuple[str, str | None, str | None]:
    """(repository with its registry, tag, digest) as distribution/reference reads it."""
    try:
        parsed = reference.Reference.parse(value)
    except Exception as exc:  # the library raises one class per grammar rule
        raise _refuse("image", "bad_image", f"{value[:80]!r} is not an image reference: {exc}") from None
    registry, _ = parsed.split_hostname()
    if not registry:
        raise _refuse(
            "image",
            "image_registry_required",
            f"{value[:80]!r} names no registry; give it in full (e.g. nvcr.io/nvidia/tritonserver:24.10-py3).",
        )
    return parsed["name"], parsed["tag"], parsed["digest"]


def _matches(pattern: str, repository: str, tag: str | None, digest: str | None) -> bool:
    if "@" in pattern:
        want_repository, _, want_digest = pattern.partition("@")
        return repository == want_repository and digest == want_digest
    want_repository, _, tag_glob = pattern.rpartition(":")
    if "/" in tag_glob or not want_repository:  # "host:port/repo" with no tag: not a usable pattern
        return False
    return repository == want_repository and tag is not None and fnmatch.fnmatchcase(tag, tag_glob)


def image_check(policy: PoolPolicy, *, team: str, image: str) -> str:
    repository, tag, digest = _parse_image(image)
    patterns = policy.images_for(team)
    if not any(_matches(pattern, repository, tag, digest) for pattern in patterns):
        raise _refuse(
            "image",
            "image_not_allowed",
            f"{image[:120]!r} is not an image team {team!r} may run; allowed: "
            f"{', '.join(patterns) or 'none'} (POOL_IMAGES, POOL_TEAM_IMAGES).",
        )
    return image


def secret_check(*, team: str, namespace: str, secret: str, bound: Collection[str]) -> str:
    """ "" (none) or a Secret an admin bound to `team` in `namespace`."""
    if not secret:
        return ""
    if secret.startswith(PLATFORM_SECRET_PREFIX):
        raise _refuse(
            "repository_secret",
            "secret_platform",
            f"{secret[:80]!r} is a name of the platform's own Secrets ({PLATFORM_SECRET_PREFIX}*); "
            "pool pods never receive them.",
        )
    if secret not in bound:
        raise _refuse(
            "repository_secret",
            "secret_not_bound",
            f"{secret[:80]!r} is not bound to team {team!r} in namespace {namespace!r}; an admin binds a "
            "team's Secrets (/api/v1/pool-secret-bindings/, the admin console).",
        )
    return secret


def spec_check(
    policy: PoolPolicy, *, team: str, namespace: str, image: str, repository_secret: str, bound: Collection[str]
) -> None:
    """Every infrastructure field of a team's Kubernetes pool against the policy; raises
    the first refusal (namespace, then image, then secret)."""
    if not namespace:
        raise _refuse("namespace", "namespace_missing", "the pool names no namespace.")
    namespace_check(policy, team=team, namespace=namespace)
    image_check(policy, team=team, image=image)
    secret_check(team=team, namespace=namespace, secret=repository_secret, bound=bound)
