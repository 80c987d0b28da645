"""Who registers what a training command made: the acting user and the team its run and
model belong to (shared by train_reference_model and train_gr_model)."""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import CommandError


def acting_user(username: str):
    """`username`, or the first superuser when none is named."""
    users = get_user_model().objects
    user = (
        users.filter(username=username).first() if username else users.filter(is_superuser=True).order_by("pk").first()
    )
    if user is None:
        raise CommandError(
            f"--user: no user {username!r}" if username else "--register needs --user (no superuser exists)"
        )
    return user


def run_team(*, user, model_name: str, team_name: str):
    """The team the run is logged for: the model's (when --register names an existing one),
    else --team, else the user's first team; None without --register or --team."""
    from registry.selectors.catalog import model_list
    from registry.selectors.teams import team_list

    if model_name:
        model = model_list(user=user).filter(name=model_name).first()
        if model is not None:
            return model.team
    if team_name:
        team = Group.objects.filter(name=team_name).first()
        if team is None:
            raise CommandError(f"--team: no team {team_name!r}")
        return team
    if model_name:
        team = team_list(user=user).first()
        if team is None:
            raise CommandError("--team: the user belongs to no team")
        return team
    return None
