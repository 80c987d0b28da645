"""Plain factory functions for test data (each call makes fresh, uniquely named rows)."""

import itertools

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from registry.models import RegisteredModel, Role, TeamMembership

_seq = itertools.count(1)


def user(username: str | None = None, *, staff: bool = False, password: str = "pw-for-tests-only"):
    username = username or f"user{next(_seq)}"
    return get_user_model().objects.create_user(
        username=username, password=password, is_staff=staff, is_superuser=staff, email=f"{username}@example.test"
    )


def team(name: str | None = None) -> Group:
    return Group.objects.create(name=name or f"team{next(_seq)}")


def member(u, t: Group, role: str = Role.DEVELOPER) -> TeamMembership:
    u.groups.add(t)
    return TeamMembership.objects.create(user=u, team=t, role=role)


def registered_model(t: Group, name: str | None = None, **fields) -> RegisteredModel:
    return RegisteredModel.objects.create(name=name or f"model-{next(_seq)}", team=t, **fields)
