"""Fragments of monitoring that other apps' pages show: the open-alerts banner on every
page, the judge's verdicts on an endpoint's page and the traffic per inference key on
the keys page (deployments imports nothing from monitoring; its templates load these tags)."""

from datetime import UTC, datetime

from django import template

from deployments.selectors.rollouts import endpoint_list
from monitoring.selectors import alerts as alert_selectors
from monitoring.selectors.tenants import key_traffic
from monitoring.selectors.verdicts import TREND_LENGTH, canary_measured, summarize
from monitoring.sources.prometheus import PrometheusError

register = template.Library()


@register.inclusion_tag("monitoring/_alert_banner_items.html", takes_context=True)
def open_alerts_banner(context):
    """Open alerts of the user's teams, for the banner on every page."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"alerts": [], "total": 0}
    alerts = alert_selectors.open_alerts(user=user)
    return {"alerts": list(alerts[:3]), "total": alerts.count(), "request": request}


@register.inclusion_tag("monitoring/_rollout_verdicts.html", takes_context=True)
def rollout_verdicts(context, rollout, ticks: int = TREND_LENGTH):
    """The judge on `rollout`, as far as the user may see: its latest verdict and one row
    per check (latest outcome, trend over the last `ticks` verdicts, progress)."""
    verdicts = list(alert_selectors.verdict_list(user=context["request"].user, rollout_id=rollout.pk)[:ticks])
    latest = verdicts[0] if verdicts else None
    return {
        "latest": latest,
        "rows": summarize(verdicts, trend_length=ticks),
        "ticks": len(verdicts),
        "step_count": len(rollout.plan.steps_bp),
        "latest_step": latest.step + 1 if latest and latest.step is not None else None,
    }


@register.inclusion_tag("monitoring/_release_measured.html", takes_context=True)
def release_measured(context, release, prediction=None):
    """What the canary of a release measured (its candidate against the control, from the
    judge's verdicts), shown on the endpoint page beside what the tune predicted."""
    measured = None
    if release is not None and release.rollout_id:
        # every verdict, newest first, read in chunks until one has both arms: after the last
        # step (100 % to the candidate, no control beside it) the figures stay those of the canary
        verdicts = alert_selectors.verdict_list(user=context["request"].user, rollout_id=release.rollout_id)
        measured = canary_measured(verdicts.iterator(chunk_size=100))
    return {"measured": measured, "prediction": prediction, "release": release}


@register.inclusion_tag("monitoring/_rollout_charts.html")
def rollout_charts(endpoint, config):
    """The endpoint page's candidate-vs-stable charts: the panels of the metrics its judge
    decides on (an LLM endpoint's TTFT and ITL, a tensor endpoint's p99), each with its
    unit and the endpoint's SLO line (monitoring/display/charts.py), over the rollout's time range
    and arms (`config`, deployments.selectors.rollout_page.chart_config)."""
    from monitoring.display.charts import rollout_panels

    panels = rollout_panels(endpoint)
    return {"panels": panels, "config": {**(config or {}), "panels": panels}, "rollout": (config or {}).get("rollout")}


@register.inclusion_tag("monitoring/_key_traffic.html", takes_context=True)
def inference_key_traffic(context, keys):
    """Requests and refusals per inference key (and calls without a valid key to the
    user's endpoints), live from the gateway's counters: for the keys page."""
    traffic = key_traffic()
    if "error" in traffic:
        return {"error": traffic["error"]}
    rows = []
    for key in keys:
        entry = traffic["keys"].get(key.gateway_id)
        if entry:
            by_class = entry["requests"]
            rows.append(
                {
                    "key": key,
                    **entry,
                    "ok": by_class.get("2xx", 0),
                    "client": by_class.get("4xx", 0),
                    "server": by_class.get("5xx", 0),
                }
            )
    names = set(endpoint_list(user=context["request"].user).values_list("name", flat=True))
    anonymous = sorted((name, reasons) for name, reasons in traffic["anonymous"].items() if name in names)
    since = datetime.fromtimestamp(traffic["since"], tz=UTC) if traffic["since"] else None
    return {"rows": rows, "anonymous": anonymous, "since": since}


@register.filter
def reason_beside_endpoint(alert) -> str:
    """An alert's reason where its endpoint is already named beside it (the banner, the
    alerts table): without the "<endpoint>: " a notification's text starts with."""
    reason, prefix = alert.reason or "", f"{alert.endpoint}: "
    return reason[len(prefix) :] if alert.endpoint and reason.startswith(prefix) else reason


@register.filter
def evidence(value):
    """An alert's evidence as a definition list / table (monitoring/display/evidence.py)."""
    from monitoring.display.evidence import render

    return render(value)


@register.inclusion_tag("monitoring/_rollout_forecast.html", takes_context=True)
def rollout_forecast(context, endpoint):
    """Before a rollout starts: the endpoint's traffic, the steps that fit it, and each
    step's expected time to a verdict with a warning where it cannot conclude in time."""
    from monitoring.api.forecast import endpoint_forecast

    try:
        plan = endpoint_forecast(user=context["request"].user, name=endpoint.name)
    except PrometheusError as exc:  # the page still renders; the forecast says why it is missing
        return {"forecast": None, "source_error": exc.detail}
    plan["suggested_pct"] = ",".join(f"{s / 100:g}" for s in plan["suggested_steps_bp"])
    return {"forecast": plan}


@register.simple_tag(takes_context=True)
def suggested_steps_pct(context, endpoint) -> str:
    """The steps (in percent, "10,25,50,100") that fit the endpoint's traffic: the start form's default."""
    from monitoring.api.forecast import endpoint_forecast

    try:
        steps = endpoint_forecast(user=context["request"].user, name=endpoint.name)["suggested_steps_bp"]
    except PrometheusError:
        return ""
    return ",".join(f"{s / 100:g}" for s in steps)
