"""Writes of inference keys: create (the secret is returned once, never stored) and revoke.

Who: a team's deployers and admins (the role that may change who calls its endpoints);
viewers and developers read the list. Every create and revoke writes its audit Event in
the same transaction; the gateway sees the change in the next route table it polls
(the table's ETag is a digest of its content, keys included).
"""

from __future__ import annotations

import hashlib
import math
import secrets

from django.db import IntegrityError, transaction
from django.utils import timezone

from deployments.lock_objects import inference_key_for_update
from deployments.models import Endpoint, InferenceKey
from deployments.models.keys import DISPLAY_PREFIX_LENGTH, SECRET_PREFIX
from kernel.errors import Conflict, InvalidInput
from registry.models import EventAction, Role
from registry.services.events import event_record
from registry.services.teams import require_role

DEFAULT_RATE_PER_S = 100.0
DEFAULT_MAX_CONCURRENCY = 64
MAX_LIMIT = 1_000_000  # the route table's bound (gateway/contracts/route_table.schema.json)
MAX_SCOPED_ENDPOINTS = 500
DEFAULT = object()  # "not given": use the default (None means "no limit")


def secret_hash(secret: str) -> str:
    """What is stored and sent to the gateway: hex SHA-256 of the secret's UTF-8 bytes."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    """mpk_ + 43 URL-safe characters: 256 random bits from the OS."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def _name(value) -> str:
    name = str(value or "").strip()
    if not 1 <= len(name) <= 100:
        raise InvalidInput("name: give 1..100 characters.", field="name")
    if not name.isprintable():
        raise InvalidInput("name: control characters are not allowed.", field="name")
    return name


def _limit(value, field: str, *, low: float, integer: bool = False):
    """None (no limit), or a number in low..MAX_LIMIT (low 0: more than 0)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidInput(f"{field}: give a number or null.", field=field)
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidInput(f"{field}: {value!r} is not a number.", field=field) from None
    if not math.isfinite(number) or number < low or number > MAX_LIMIT or number <= 0:
        bound = f"more than 0 and at most {MAX_LIMIT}" if low == 0 else f"{low:g}..{MAX_LIMIT}"
        raise InvalidInput(
            f"{field}: {value!r} is out of range; give {bound}, or null for no limit.", code=f"bad_{field}", field=field
        )
    if integer:
        if number != int(number):
            raise InvalidInput(f"{field}: give a whole number.", field=field)
        return int(number)
    return number


def _limits(rate_per_s, burst, max_concurrency) -> dict:
    rate = _limit(DEFAULT_RATE_PER_S if rate_per_s is DEFAULT else rate_per_s, "rate_per_s", low=0)
    if burst is DEFAULT:  # twice the rate: a client may catch up after a short pause
        burst = None if rate is None else min(MAX_LIMIT, max(1.0, 2 * rate))
    burst = _limit(burst, "burst", low=1)
    if burst is not None and rate is None:
        raise InvalidInput("burst: a burst needs a rate_per_s (without a rate there is no bucket).", field="burst")
    concurrency = _limit(
        DEFAULT_MAX_CONCURRENCY if max_concurrency is DEFAULT else max_concurrency,
        "max_concurrency",
        low=1,
        integer=True,
    )
    return {"rate_per_s": rate, "burst": burst, "max_concurrency": concurrency}


MAX_TOKENS_PER_MINUTE = 1_000_000_000  # the route table schema's bounds
MAX_BUDGET_TOKENS = 1_000_000_000_000
MAX_BUDGET_WINDOW_S = 31 * 86400  # a month
MAX_BUDGETS = 4
WINDOW_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def token_budgets_from_text(text: str) -> list[dict]:
    """ "100000/1h, 5000000/30d" (tokens/window; window in s, m, h or d; a bare number is
    seconds) as budgets; InvalidInput naming the part that does not read."""
    budgets = []
    for part in str(text or "").replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        tokens, _, window = part.partition("/")
        window = window.strip().lower()
        unit = WINDOW_UNITS.get(window[-1:], None) if window and not window[-1:].isdigit() else 1
        count = window[:-1] if window and not window[-1:].isdigit() else window
        if unit is None or not tokens.strip().isdigit() or not count.strip().isdigit():
            raise InvalidInput(
                f"token_budgets: {part[:60]!r} does not read as tokens/window (e.g. 100000/1h, 5000000/30d).",
                code="bad_token_budgets",
                field="token_budgets",
            )
        budgets.append({"tokens": int(tokens), "window_s": int(count) * unit})
    return budgets


def _token_budgets(value) -> list[dict]:
    """Budgets [{tokens, window_s}]: whole tokens in 1..MAX_BUDGET_TOKENS over a window of
    1 s..31 days, one per window, at most MAX_BUDGETS."""
    value = value or []
    if not isinstance(value, list) or len(value) > MAX_BUDGETS:
        raise InvalidInput(
            f"token_budgets: give at most {MAX_BUDGETS} budgets, each {{tokens, window_s}}.",
            code="bad_token_budgets",
            field="token_budgets",
        )
    budgets, windows = [], set()
    for item in value:
        tokens = item.get("tokens") if isinstance(item, dict) else None
        window = item.get("window_s") if isinstance(item, dict) else None
        whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (tokens, window))
        if not (whole and 1 <= tokens <= MAX_BUDGET_TOKENS and 1 <= window <= MAX_BUDGET_WINDOW_S):
            raise InvalidInput(
                f"token_budgets: {str(item)[:100]} is not a budget; give tokens 1..{MAX_BUDGET_TOKENS} over "
                f"window_s 1..{MAX_BUDGET_WINDOW_S} (a second to a month).",
                code="bad_token_budgets",
                field="token_budgets",
            )
        if window in windows:
            raise InvalidInput(
                f"token_budgets: two budgets over {window} s; give one per window.",
                code="bad_token_budgets",
                field="token_budgets",
            )
        windows.add(window)
        budgets.append({"tokens": tokens, "window_s": window})
    return sorted(budgets, key=lambda b: b["window_s"])


def _llm_limits(tokens_per_minute, max_streams, token_budgets=None) -> dict:
    """LLM limits: None (no limit) or a whole number (tokens per minute, streams in flight),
    and the token budgets over longer (or shorter) windows."""
    out = {"token_budgets": _token_budgets(token_budgets)}
    for field, value, high in (
        ("tokens_per_minute", tokens_per_minute, MAX_TOKENS_PER_MINUTE),
        ("max_streams", max_streams, MAX_LIMIT),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high):
            raise InvalidInput(
                f"{field}: {value!r} is out of range; give a whole number in 1..{high}, or null for no limit.",
                code=f"bad_{field}",
                field=field,
            )
        out[field] = value
    return out


def _scope(team, endpoint_names) -> list[Endpoint] | None:
    """None: every endpoint of the team; else the named ones, all of the team."""
    if endpoint_names is None:
        return None
    if isinstance(endpoint_names, str) or not isinstance(endpoint_names, (list, tuple, set)):
        raise InvalidInput(
            "endpoints: give a list of endpoint names, or leave it out for all of the team's endpoints.",
            field="endpoints",
        )
    names = sorted({str(n) for n in endpoint_names})
    if any("\x00" in n or len(n) > 64 for n in names):
        raise InvalidInput("endpoints: not an endpoint name.", code="endpoint_not_found", field="endpoints")
    if not names:
        raise InvalidInput(
            "endpoints: give at least one endpoint, or leave it out for all of the team's endpoints.", field="endpoints"
        )
    if len(names) > MAX_SCOPED_ENDPOINTS:
        raise InvalidInput(f"endpoints: at most {MAX_SCOPED_ENDPOINTS}.", field="endpoints")
    found = {e.name: e for e in Endpoint.objects.filter(team=team, name__in=names)}
    missing = [n for n in names if n not in found]
    if missing:
        # another team's endpoint reads like a missing one: its existence is not ours to tell
        raise InvalidInput(
            f"endpoints: team {team.name!r} has no endpoint named {missing[0][:100]!r}.",
            code="endpoint_not_found",
            field="endpoints",
        )
    return [found[n] for n in names]


def inference_key_create(
    *,
    user,
    team,
    name: str,
    endpoints=None,
    rate_per_s=DEFAULT,
    burst=DEFAULT,
    max_concurrency=DEFAULT,
    tokens_per_minute=None,
    max_streams=None,
    token_budgets=None,
) -> tuple[InferenceKey, str]:
    """Create a key of `team` scoped to the named `endpoints` (None: all of the team's,
    also later ones) with its limits (None: no limit). Returns (key, secret): the secret
    exists only in this return value; the database keeps its SHA-256 and display prefix."""
    require_role(user=user, team=team, role=Role.DEPLOYER)
    name = _name(name)
    limits = {
        **_limits(rate_per_s, burst, max_concurrency),
        **_llm_limits(tokens_per_minute, max_streams, token_budgets),
    }
    secret = new_secret()
    try:
        with transaction.atomic():
            scope = _scope(team, endpoints)
            if InferenceKey.objects.filter(team=team, name=name, revoked_at__isnull=True).exists():
                raise Conflict(
                    f"name: team {team.name!r} already has an active key named {name!r}.",
                    code="name_taken",
                    field="name",
                )
            key = InferenceKey.objects.create(
                team=team,
                name=name,
                prefix=secret[:DISPLAY_PREFIX_LENGTH],
                sha256=secret_hash(secret),
                all_endpoints=scope is None,
                created_by=user,
                **limits,
            )
            if scope:
                key.endpoints.set(scope)
            event_record(
                actor=user,
                obj=key,
                action=EventAction.CREATED,
                to_state="active",
                data={"prefix": key.prefix, "endpoints": "all" if scope is None else [e.name for e in scope], **limits},
            )
    except IntegrityError:  # a concurrent create with the same name won the race
        raise Conflict(
            f"name: team {team.name!r} already has an active key named {name!r}.", code="name_taken", field="name"
        ) from None
    return key, secret


def inference_key_revoke(*, user, key: InferenceKey, reason: str = "") -> InferenceKey:
    """Revoke `key` for good: it leaves the next route table, so the gateway refuses it
    (401) within its poll interval. Revoking a revoked key changes nothing."""
    require_role(user=user, team=key.team, role=Role.DEPLOYER)
    reason = str(reason or "")
    if "\x00" in reason or len(reason) > 2000:
        raise InvalidInput("reason: at most 2000 characters, no NUL.", field="reason")
    with transaction.atomic():
        locked = inference_key_for_update(key.pk)
        if locked.revoked_at is not None:
            return locked
        locked.revoked_at, locked.revoked_by = timezone.now(), user
        locked.save(update_fields=["revoked_at", "revoked_by"])
        event_record(
            actor=user,
            obj=locked,
            action=EventAction.REVOKED,
            from_state="active",
            to_state="revoked",
            reason=reason,
            data={"prefix": locked.prefix},
        )
    return locked
