"""The one validator of a serving pool's fields: every value a create or an update may
carry is checked here, before anything is written, with a 400 that names the field
(`resources.cpu`, `namespace`, `min_replicas`, ...). What the Kubernetes API server would
refuse at apply time (a quantity like "lots", a namespace like "Bad_NS!", replicas below
the autoscaler's floor) is refused at the door instead.

Quantities are parsed by the kubernetes client (`kubernetes.utils.quantity`), the rules
for names are the API server's (DNS-1123 labels and subdomains, apimachinery's
validation), and bounds keep one team's absurd value from costing the cluster anything.
Pure: no Django model, no database; services call `pool_fields_check`.
"""

from __future__ import annotations

import re
from decimal import Decimal

from kubernetes.utils.quantity import parse_quantity

from kernel.errors import InvalidInput

# apimachinery/pkg/util/validation: IsDNS1123Label / IsDNS1123Subdomain.
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# An image reference: [registry[:port]/]path[:tag][@digest] (distribution/reference, simplified to its alphabet).
IMAGE_REFERENCE = re.compile(r"^[a-z0-9][a-z0-9._\-/:]*(@sha256:[a-f0-9]{64})?$")

# Per replica; beyond these a request is a typo or a denial of the cluster, not a pool.
RESOURCE_BOUNDS = {
    "cpu": (Decimal("0.001"), Decimal(256)),
    "memory": (Decimal(2**20), Decimal(2**42)),  # 1 MiB .. 4 TiB
    "ephemeral-storage": (Decimal(2**20), Decimal(2**44)),  # 1 MiB .. 16 TiB
}

AUTOSCALE_METRICS = {
    # metric -> (what the target means, default target, low, high)
    "cpu": ("average CPU utilization in % of the request", 70.0, 1.0, 100.0),
    "queue_time": (
        "Triton's mean queue time per request in ms (Prometheus Adapter: triton_queue_time_ms)",
        20.0,
        0.1,
        60_000.0,
    ),
    "pending_requests": (
        "requests waiting in Triton per pod (nv_inference_pending_request_count)",
        8.0,
        0.1,
        100_000.0,
    ),
}


def whole_number(value, field: str, *, low: int, high: int) -> int:
    """`value` as an int in low..high, or InvalidInput (a 400 naming `field`): an int, a float
    with no fraction (2.0) or the text of an int ("2"); never a bool, and never a fraction
    (2.5 is refused, not truncated). The one check every pool integer goes through."""
    if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
        value = None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{field}: {value!r} is not a whole number.", field=field) from None
    if number < low or number > high:
        raise InvalidInput(f"{field}: {number} is out of range; give {low}..{high}.", code=f"bad_{field}", field=field)
    return number


def resources_check(resources) -> dict[str, str]:
    """{"cpu": "2", "memory": "4Gi"} requests per replica, each a valid quantity within bounds."""
    if resources in (None, ""):
        return {}
    if not isinstance(resources, dict):
        raise InvalidInput(
            'resources: give an object of Kubernetes quantities, e.g. {"cpu": "2", "memory": "4Gi"}.', field="resources"
        )
    clean = {}
    for key, value in resources.items():
        if key not in RESOURCE_BOUNDS:
            raise InvalidInput(
                f"resources: unknown key {str(key)[:40]!r}; use {', '.join(RESOURCE_BOUNDS)}.", field="resources"
            )
        field = f"resources.{key}"
        if isinstance(value, bool) or not isinstance(value, str | int) or len(str(value)) > 32:
            raise InvalidInput(f'{field}: give a Kubernetes quantity such as "2", "500m" or "4Gi".', field=field)
        try:
            amount = parse_quantity(value)
        except (ValueError, ArithmeticError):
            raise InvalidInput(
                f'{field}: {str(value)!r} is not a Kubernetes quantity (e.g. "2", "500m", "4Gi").',
                code="bad_quantity",
                field=field,
            ) from None
        low, high = RESOURCE_BOUNDS[key]
        if not low <= amount <= high:
            raise InvalidInput(f"{field}: {value} is out of range for one replica.", code="bad_quantity", field=field)
        clean[key] = str(value)
    return clean


def namespace_check(value) -> str:
    if not isinstance(value, str) or len(value) > 63 or not DNS1123_LABEL.match(value):
        raise InvalidInput(
            f"namespace: {str(value)[:80]!r} is not a Kubernetes namespace name "
            "(1-63 lower-case letters, digits or '-', starting and ending with a letter or digit).",
            code="bad_namespace",
            field="namespace",
        )
    return value


def secret_name_check(value, field: str = "repository_secret") -> str:
    if value in (None, ""):
        return ""
    if not isinstance(value, str) or len(value) > 253 or not DNS1123_SUBDOMAIN.match(value):
        raise InvalidInput(
            f"{field}: {str(value)[:80]!r} is not a Kubernetes Secret name (a DNS-1123 subdomain).",
            code="bad_secret_name",
            field=field,
        )
    return value


def image_check(value) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 255 or not IMAGE_REFERENCE.match(value):
        raise InvalidInput(
            f"image: {str(value)[:80]!r} is not an image reference (e.g. nvcr.io/nvidia/tritonserver:24.10-py3).",
            code="bad_image",
            field="image",
        )
    return value


def autoscale_check(metric, target, *, device_kind: str) -> tuple[str, float]:
    """(metric, target); an empty metric is the device's default: CPU pools scale on CPU,
    GPU pools on Triton's queue time (a GPU pool's CPU is not what runs out)."""
    metric = metric or ("cpu" if device_kind == "cpu" else "queue_time")
    if metric not in AUTOSCALE_METRICS:
        raise InvalidInput(
            f"autoscale_metric: {str(metric)[:40]!r} is not one of {', '.join(AUTOSCALE_METRICS)}.",
            field="autoscale_metric",
        )
    _, default, low, high = AUTOSCALE_METRICS[metric]
    if target in (None, "", 0):
        return metric, default
    if isinstance(target, bool):
        target = None
    try:
        value = float(target)
    except (TypeError, ValueError):
        raise InvalidInput(f"autoscale_target: {target!r} is not a number.", field="autoscale_target") from None
    if not low <= value <= high:
        raise InvalidInput(
            f"autoscale_target: {value:g} is out of range for {metric}; give {low:g}..{high:g}.",
            code="bad_autoscale_target",
            field="autoscale_target",
        )
    return metric, value


def replica_bounds_check(*, replicas: int, min_replicas: int, max_replicas: int, kubernetes: bool) -> None:
    """min <= max always; on Kubernetes a running pool's replicas lie inside [min, max]
    (the HPA's floor and ceiling: a count outside would be undone by it at once)."""
    if min_replicas > max_replicas:
        raise InvalidInput(
            f"min_replicas: {min_replicas} is above max_replicas {max_replicas}.",
            code="bad_replica_bounds",
            field="min_replicas",
        )
    if kubernetes and replicas and not min_replicas <= replicas <= max_replicas:
        raise InvalidInput(
            f"replicas: {replicas} is outside min_replicas..max_replicas ({min_replicas}..{max_replicas}); "
            "give 0 (stopped) or a count inside them.",
            code="bad_replica_bounds",
            field="replicas",
        )


def pool_fields_check(fields: dict, *, kubernetes: bool, device_kind: str, limit: int) -> dict:
    """Check and normalise the pool fields present in `fields` (a create's or an update's
    values merged over the pool's current ones); returns them cleaned. Raises InvalidInput
    naming the first field that is wrong."""
    clean = dict(fields)
    if "resources" in fields:
        clean["resources"] = resources_check(fields["resources"])
    if "namespace" in fields:
        clean["namespace"] = namespace_check(fields["namespace"])
    if "image" in fields:
        clean["image"] = image_check(fields["image"])
    if "repository_secret" in fields:
        clean["repository_secret"] = secret_name_check(fields["repository_secret"])
    for key, low in (("replicas", 0), ("min_replicas", 1), ("max_replicas", 1)):
        if key in fields:
            clean[key] = whole_number(fields[key], key, low=low, high=limit)
    if "autoscale_metric" in fields or "autoscale_target" in fields:
        clean["autoscale_metric"], clean["autoscale_target"] = autoscale_check(
            fields.get("autoscale_metric"), fields.get("autoscale_target"), device_kind=device_kind
        )
    if {"replicas", "min_replicas", "max_replicas"} <= clean.keys():
        replica_bounds_check(
            replicas=clean["replicas"],
            min_replicas=clean["min_replicas"],
            max_replicas=clean["max_replicas"],
            kubernetes=kubernetes,
        )
    if (
        kubernetes
        and clean.get("autoscale_metric") == "cpu"
        and clean.get("max_replicas", 1) > clean.get("min_replicas", 1)
        and "cpu" not in (clean.get("resources") or {})
    ):
        raise InvalidInput(
            "resources.cpu: a pool that autoscales on CPU needs a CPU request (utilization is a share of it); "
            'give resources {"cpu": "2", ...}, or min_replicas = max_replicas.',
            code="cpu_request_required",
            field="resources.cpu",
        )
    return clean
