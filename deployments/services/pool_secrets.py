"""Binding a Kubernetes Secret to a team's pools (deployments/pool_policy.py): what a pool's
`repository_secret` may name. Platform admins only (staff): a Secret in a namespace is
infrastructure the team does not own by saying so.

Guarantees: the namespace is one of the team's (the operator's policy), the name is a
Secret name that is not the platform's (`modelplane-*`), one Secret serves one team, and
a Secret a pool of the team still names cannot be unbound (409). Each change writes its
audit event in the same transaction.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from deployments.models import PoolSecretBinding, PoolStatus, ServingPool
from deployments.pool_fields import secret_name_check
from deployments.pool_policy import PLATFORM_SECRET_PREFIX, PoolPolicy, namespace_check
from kernel.errors import Conflict, Forbidden, InvalidInput
from registry.models import EventAction
from registry.services.events import event_record


def require_platform_admin(user) -> None:
    if not (user.is_staff or user.is_superuser):
        raise Forbidden("Only platform admins bind Secrets to teams' pools.", code="admin_required")


def pool_secret_bind(*, user, team, namespace: str, secret_name: str) -> PoolSecretBinding:
    """Let `team`'s pools in `namespace` name the Secret `secret_name`; idempotent."""
    require_platform_admin(user)
    namespace = namespace_check(PoolPolicy.from_settings(), team=team.name, namespace=namespace or "")
    secret_name = secret_name_check(secret_name, field="secret_name")
    if not secret_name:
        raise InvalidInput("secret_name: give the Secret's name.", field="secret_name")
    if secret_name.startswith(PLATFORM_SECRET_PREFIX):
        raise InvalidInput(
            f"secret_name: {secret_name!r} is a name of the platform's own Secrets ({PLATFORM_SECRET_PREFIX}*); "
            "they are never bound to a team.",
            code="secret_platform",
            field="secret_name",
        )
    try:
        with transaction.atomic():
            binding, created = PoolSecretBinding.objects.get_or_create(
                namespace=namespace, secret_name=secret_name, defaults={"team": team, "created_by": user}
            )
            if binding.team_id != team.pk:
                raise Conflict(
                    f"secret_name: {namespace}/{secret_name} is bound to another team; unbind it there first.",
                    code="secret_bound_elsewhere",
                    field="secret_name",
                )
            if created:
                event_record(
                    actor=user,
                    obj=binding,
                    team=team,
                    action=EventAction.CREATED,
                    data={"namespace": namespace, "secret_name": secret_name},
                )
    except IntegrityError:  # a concurrent bind of the same Secret won
        raise Conflict(
            f"secret_name: {namespace}/{secret_name} was just bound.", code="secret_bound_elsewhere"
        ) from None
    return binding


def pool_secret_unbind(*, user, binding: PoolSecretBinding) -> None:
    """Remove a binding no pool of its team still names."""
    require_platform_admin(user)
    with transaction.atomic():
        users = ServingPool.objects.filter(
            team=binding.team, namespace=binding.namespace, repository_secret=binding.secret_name
        ).exclude(status=PoolStatus.DELETING)
        names = sorted(users.values_list("name", flat=True))[:5]
        if names:
            raise Conflict(
                f"{binding.namespace}/{binding.secret_name} is the repository secret of pool(s) {', '.join(names)}; "
                "change them first.",
                code="secret_in_use",
            )
        event_record(
            actor=user,
            obj=binding,
            team=binding.team,
            action=EventAction.DELETED,
            data={"namespace": binding.namespace, "secret_name": binding.secret_name},
        )
        binding.delete()
