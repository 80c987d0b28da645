"""A build's tune request (Build.tune), checked at the door: every value bounded, unknown
keys refused, each problem a sentence naming the field. Pure: the build service turns a
TuneRequestError into a 400."""

from __future__ import annotations

from registry.factory import VARIANTS
from registry.factory.tune import space

LIMITS = {
    "slo_p99_ms": (0.1, 60_000.0),
    "budget_s": (
        5.0,
        1_200.0,
    ),  # under the build task's soft time limit (BUILD_SOFT_TIME_LIMIT_S, 1800 s) with the other stages
    "max_trials": (2, 200),
    "max_queue_size": (0, 1_000_000),
    "queue_timeout_ms": (0, 600_000),
}
KEYS = ("slo_p99_ms", "variants", "budget_s", "max_trials", "search_space", "max_queue_size", "queue_timeout_ms")


class TuneRequestError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def _number(raw: dict, key: str, *, integer: bool):
    value = raw[key]
    low, high = LIMITS[key]
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not low <= value <= high:
        raise TuneRequestError(
            f"tune.{key}", f"give {'an integer' if integer else 'a number'} in [{low:g}, {high:g}], not {value!r}"
        )
    return int(value) if integer else float(value)


def _variants(variants, targets: list[str]) -> list[str]:
    if not isinstance(variants, list) or not variants or not all(isinstance(v, str) for v in variants):
        raise TuneRequestError("tune.variants", "give a non-empty list of variant names")
    for variant in variants:
        if variant not in VARIANTS:
            raise TuneRequestError(
                "tune.variants", f"unknown variant {variant[:40]!r}; choose from {', '.join(VARIANTS)}"
            )
        if variant not in targets:
            raise TuneRequestError(
                "tune.variants", f"{variant} is not one of the build's targets ({', '.join(targets)})"
            )
    return list(dict.fromkeys(variants))


def clean(raw, *, targets: list[str]) -> dict:
    """The request as stored on the Build, or {} for none. `targets`: the build's targets
    (a variant to tune must be one of them)."""
    if raw in (None, {}):
        return {}
    if not isinstance(raw, dict):
        raise TuneRequestError("tune", 'give an object such as {"slo_p99_ms": 25}')
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise TuneRequestError(f"tune.{unknown[0]}", f"unknown field; the fields are {', '.join(KEYS)}")
    if "slo_p99_ms" not in raw:
        raise TuneRequestError("tune.slo_p99_ms", "the latency SLO to tune for is required (p99 in ms)")
    out = {"slo_p99_ms": _number(raw, "slo_p99_ms", integer=False)}
    for key in ("budget_s",):
        if key in raw:
            out[key] = _number(raw, key, integer=False)
    for key in ("max_trials", "max_queue_size", "queue_timeout_ms"):
        if key in raw:
            out[key] = _number(raw, key, integer=True)
    if "variants" in raw:
        out["variants"] = _variants(raw["variants"], targets)
    if "search_space" in raw:
        try:
            out["search_space"] = space.check_overrides(raw["search_space"])
        except ValueError as exc:
            raise TuneRequestError("tune.search_space", str(exc)) from None
    return out
