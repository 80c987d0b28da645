"""The one settings resolver the apps' conf modules use: a Django setting of the same name
wins (tests override it in-process), then the environment (worker processes), then the
app's default. Read at call time, never cached."""

import os

from django.conf import settings


def setting(name: str, default):
    """`name` resolved as above; an environment value is converted to the default's type
    (bools from 1/true/yes, lists from comma-separated items)."""
    if hasattr(settings, name):
        return getattr(settings, name)
    raw = os.environ.get(name)
    if raw is None:
        return list(default) if isinstance(default, list) else default
    if isinstance(default, bool):
        return raw.lower() in {"1", "true", "yes"}
    if isinstance(default, list):
        return [item.strip() for item in raw.split(",") if item.strip()]
    return type(default)(raw)
