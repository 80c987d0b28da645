"""Settings one way: every setting is declared once, with its default, its type (the default's,
or `kind`) and one line of meaning, in its app's registry (`config/env.py` for what Django's
settings module reads at start-up, each app's `conf.py` for what it reads at call time); one
reader resolves it: a Django setting of the same name wins (tests override it in-process),
then the environment (worker processes), then the declared default. Read at call time, never
cached. docs/configuration.md's tables are generated from the registries
(`manage.py settings_doc --write`) and a test fails on any difference, so a setting nobody
declared or documented cannot ship.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

_MISSING = object()


class SettingError(ValueError):
    """An environment value that does not parse as its setting's type (said by name)."""


@dataclass(frozen=True)
class Setting:
    name: str
    default: object  # the value, or a callable returning it (a default derived from other settings)
    meaning: str
    kind: type | str | None = None  # int, float, str, bool, list, "json", "path"; None: the default's type
    shown: str | None = None  # how the docs show a derived default

    @property
    def type(self):
        if self.kind is not None:
            return self.kind
        default = self.default() if callable(self.default) else self.default
        return type(default)

    def doc_default(self) -> str:
        if self.shown is not None:
            return self.shown
        default = self.default
        if isinstance(default, bool):
            return "on" if default else "off"
        if isinstance(default, list | tuple):
            return "`" + ",".join(str(item) for item in default) + "`" if default else "(none)"
        if default in ("", None):
            return "(none)"
        return f"`{default}`"


REGISTRY: dict[str, tuple[str, Setting]] = {}  # name -> (app, declaration)


def declare(app: str, *entries: Setting) -> dict[str, Setting]:
    """Register an app's settings (each name once across the platform); returns them by name."""
    for entry in entries:
        known = REGISTRY.get(entry.name)
        if known is not None and known[0] != app:
            raise RuntimeError(f"setting {entry.name} is declared by {known[0]} and by {app}")
        REGISTRY[entry.name] = (app, entry)
    return {entry.name: entry for entry in entries}


def parse(entry: Setting, raw: str):
    """An environment value as `entry`'s type; SettingError naming the setting otherwise."""
    kind = entry.type
    try:
        if kind is bool:
            return raw.strip().lower() in {"1", "true", "yes", "on"}
        if kind in (list, tuple):
            return [item.strip() for item in raw.split(",") if item.strip()]
        if kind == "json":
            return json.loads(raw) if raw.strip() else (entry.default() if callable(entry.default) else entry.default)
        if kind in (int, float):
            return kind(raw)
        return raw
    except ValueError as exc:
        raise SettingError(f"{entry.name}={raw!r} is not a valid {getattr(kind, '__name__', kind)}: {exc}") from None


def from_environment(name: str):
    """What config/settings.py reads at start-up: the environment, else the declared default."""
    _, entry = REGISTRY[name]
    raw = os.environ.get(name)
    if raw is None:
        default = entry.default() if callable(entry.default) else entry.default
        return list(default) if isinstance(default, list) else default
    return parse(entry, raw)


def setting(name: str, default=_MISSING):
    """`name` resolved as the module docstring says. `default` only for a setting declared
    nowhere (tests of this reader); every setting the platform reads is declared."""
    if hasattr(settings, name):
        return getattr(settings, name)
    declared = REGISTRY.get(name)
    if declared is None:
        if default is _MISSING:
            raise KeyError(f"setting {name} is not declared (kernel/conf.py)")
        entry = Setting(name, default, "")
    else:
        entry = declared[1]
    raw = os.environ.get(name)
    if raw is None:
        value = entry.default() if callable(entry.default) else entry.default
        return list(value) if isinstance(value, list) else value
    return parse(entry, raw)


def getter(app_settings: dict[str, Setting]) -> Callable[[str], object]:
    """An app's `get(name)`: the reader, for one of its own declared settings."""

    def get(name: str):
        if name not in app_settings and name not in REGISTRY:
            raise KeyError(f"setting {name} is not declared (kernel/conf.py)")
        return setting(name)

    return get
