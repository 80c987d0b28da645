"""Who sees what: the teams a user belongs to with a role, and the one helper every
app's selectors scope their querysets with (team_scoped)."""

from django.contrib.auth.models import Group
from django.db.models import QuerySet

from registry.models import Role, TeamMembership


def team_ids_for(user, *, min_role: str = Role.VIEWER) -> set[int] | None:
    """The teams in which `user` holds at least `min_role`; None means every team (staff)."""
    if not user or not user.is_authenticated:
        return set()
    if user.is_staff or user.is_superuser:
        return None
    allowed = [r.value for r in Role if Role.rank(r.value) >= Role.rank(min_role)]
    return set(TeamMembership.objects.filter(user=user, role__in=allowed).values_list("team_id", flat=True))


def team_scoped(qs: QuerySet, user, team_field: str = "team_id", min_role: str = Role.VIEWER) -> QuerySet:
    """Rows of the teams in which `user` holds at least `min_role` (`team_field` names the
    team id, e.g. "version__model__team_id"); rows with no team are staff only."""
    ids = team_ids_for(user, min_role=min_role)
    if ids is None:
        return qs
    return qs.filter(**{f"{team_field}__in": ids})


def team_list(*, user, min_role: str = Role.VIEWER) -> QuerySet:
    return team_scoped(Group.objects.order_by("name"), user, "id", min_role)


def user_role_in(*, user, team) -> str | None:
    if user.is_staff or user.is_superuser:
        return Role.ADMIN
    return TeamMembership.objects.filter(user=user, team=team).values_list("role", flat=True).first()
