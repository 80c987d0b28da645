"""Where the CLI finds its server and token.

Precedence: command-line options, then MODELPLANE_URL / MODELPLANE_TOKEN, then the file
`modelplane login` writes: $XDG_CONFIG_HOME/modelplane/config.json (default
~/.config/modelplane/config.json), created with mode 0600 in a 0700 folder."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from modelplane_cli import exits
from modelplane_cli.exits import CliError

API_PREFIX = "/api/v1"


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "modelplane"


def config_path() -> Path:
    return config_dir() / "config.json"


def normalize_url(url: str) -> str:
    """The server's base URL: scheme and host, any path prefix kept, a trailing /api/v1 dropped."""
    raw = (url or "").strip()
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CliError(exits.USAGE, f"--url: give the server's http:// or https:// address (got {raw!r}).")
    path = parts.path.rstrip("/")
    if path.endswith(API_PREFIX):
        path = path[: -len(API_PREFIX)]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def is_local(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host in ("localhost", "127.0.0.1", "::1") or host.endswith(".localhost")


def read_file() -> tuple[dict, list[str]]:
    """The stored settings and warnings about the file (unreadable, too open)."""
    path = config_path()
    warnings = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}, warnings
    except OSError as exc:
        return {}, [f"cannot read {path}: {exc.strerror}"]
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        warnings.append(f"{path} is readable by others (mode {mode:04o}); run: chmod 600 {path}")
    try:
        data = json.loads(text)
    except ValueError:
        return {}, [*warnings, f"{path} is not valid JSON; run `modelplane login` again"]
    return (data if isinstance(data, dict) else {}), warnings


def write_file(data: dict) -> Path:
    """Write atomically with mode 0600 (the token is a secret); the folder gets 0700."""
    folder = config_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".config-", suffix=".json")  # mkstemp creates it 0600
    except OSError as exc:
        raise CliError(
            exits.ERROR,
            f"cannot write the login to {folder}: {exc.strerror} (set XDG_CONFIG_HOME, "
            "or use MODELPLANE_URL / MODELPLANE_TOKEN instead)",
        ) from None
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=2)
            handle.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, config_path())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return config_path()


@dataclass
class Settings:
    url: str
    token: str
    url_from: str
    token_from: str


def resolve(*, url: str | None, token: str | None) -> tuple[Settings, list[str]]:
    """The URL and token to use, and where each came from (for `whoami` and errors)."""
    stored, warnings = read_file()
    chosen = {}
    for key, option, env in (("url", url, "MODELPLANE_URL"), ("token", token, "MODELPLANE_TOKEN")):
        if option:
            chosen[key] = (option, f"--{key}")
        elif os.environ.get(env):
            chosen[key] = (os.environ[env], env)
        elif stored.get(key):
            chosen[key] = (str(stored[key]), str(config_path()))
        else:
            chosen[key] = ("", "")
    if not chosen["url"][0]:
        raise CliError(
            exits.AUTH, "no server configured: run `modelplane login --url URL --token TOKEN` or set MODELPLANE_URL."
        )
    settings = Settings(
        url=normalize_url(chosen["url"][0]),
        token=chosen["token"][0].strip(),
        url_from=chosen["url"][1],
        token_from=chosen["token"][1],
    )
    return settings, warnings
