"""Teams and roles: who may do what (require_role), teams and their members."""

from django.contrib.auth.models import Group
from django.db import transaction

from kernel.errors import Forbidden, InvalidInput
from registry.models import EventAction, Role, TeamMembership
from registry.selectors.teams import user_role_in
from registry.services.events import event_record


def require_role(*, user, team, role: str) -> None:
    have = user_role_in(user=user, team=team)
    if have is None or Role.rank(have) < Role.rank(role):
        raise Forbidden(f"You need the {role} role in team {team.name!r} for this.", code="role_required")


def team_create(*, user, name: str) -> Group:
    if not (user.is_staff or user.is_superuser):
        raise Forbidden("Only staff create teams.")
    with transaction.atomic():
        team, created = Group.objects.get_or_create(name=name)
        if created:
            event_record(actor=user, obj=team, team=team, action=EventAction.CREATED, to_state="active")
    return team


def membership_set(*, user, team: Group, member, role: str) -> TeamMembership:
    """Give `member` `role` in `team` (team admins and staff only)."""
    require_role(user=user, team=team, role=Role.ADMIN)
    if role not in Role.values:
        raise InvalidInput(f"Unknown role {role!r}; one of {', '.join(Role.values)}.", field="role")
    with transaction.atomic():
        membership, _ = TeamMembership.objects.select_for_update().get_or_create(
            user=member, team=team, defaults={"role": role}
        )
        old = membership.role
        membership.role = role
        membership.save(update_fields=["role"])
        member.groups.add(team)
        event_record(actor=user, obj=membership, team=team, action=EventAction.ROLE_SET, from_state=old, to_state=role)
    return membership
