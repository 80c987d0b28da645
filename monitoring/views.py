"""Dashboard pages of monitoring; thin: read through selectors, write through services."""

from dataclasses import asdict

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers

from kernel.errors import PlatformError
from kernel.redirects import redirect_next
from monitoring.display import charts
from monitoring.display.evidence import evidence_summary
from monitoring.forms import SilenceForm
from monitoring.models import AlertStatus
from monitoring.selectors import alerts as alert_selectors
from monitoring.selectors import metrics as metric_selectors
from monitoring.selectors import silences as silence_selectors
from monitoring.services import alerts as services
from monitoring.services import silences as silence_services
from monitoring.sources import metric_source
from monitoring.sources.prometheus import PrometheusError
from registry.selectors.events import event_list

SUMMARY_METRICS = [
    "request_rate",
    "error_rate",
    "latency_p50_ms",
    "latency_p99_ms",
    "queue_ms",
    "utilization",
    "cost_per_1k_inferences",
    # LLM endpoints' row
    "llm_request_rate",
    "llm_error_rate",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p99_ms",
    "tokens_per_s",
    "cost",
]


QUANTILE_COLUMNS = ("latency_p50_ms", "latency_p99_ms", "ttft_p50_ms", "ttft_p99_ms", "itl_p99_ms")


@login_required
@vary_on_headers("HX-Request")
def overview(request):
    """Every endpoint's summary and charts over one time range the page shares (?range=)."""
    time_range = charts.time_range(request.GET.get("range"))
    now = timezone.now()
    since = charts.range_start(time_range, now)
    source = metric_source()  # the judge's: the store, or Prometheus with PROMETHEUS_URL
    try:
        endpoints = metric_selectors.series_index(user=request.user, since=since, source=source)
        kinds = charts.endpoint_kinds(user=request.user, endpoints=[e["endpoint"] for e in endpoints])
        for entry in endpoints:
            entry["kind"] = kinds.get(entry["endpoint"], "tensor")
            entry["panels"] = [asdict(spec) for spec in charts.specs_for(entry["kind"])]
            entry["summary"] = metric_selectors.latest_values(
                user=request.user, endpoint=entry["endpoint"], since=since, metrics=SUMMARY_METRICS, source=source
            )
            # quantiles over the whole range from the bucket counts, as the judge computes them
            quantiles = metric_selectors.window_quantiles(
                user=request.user,
                endpoint=entry["endpoint"],
                variants=[v for v in entry["summary"] if v not in ("all", "none")],
                since=since,
                until=now,
                source=source,
            )
            for variant, values in entry["summary"].items():
                for name in QUANTILE_COLUMNS:
                    values.pop(name, None)  # one tick's quantile: never shown beside the window's
                values.update(quantiles.get(variant, {}))
            for values in entry["summary"].values():
                for name in ("error_rate", "utilization", "llm_error_rate"):
                    if name in values:
                        values[f"{name}_pct"] = values[name] * 100
        unknown, source_error = metric_selectors.unknown_traffic(user=request.user, since=since, source=source), ""
    except PrometheusError as exc:
        endpoints, unknown, source_error = [], None, exc.detail
    context = {
        "endpoints": endpoints,
        "range": time_range,
        "ranges": list(charts.TIME_RANGES),
        "now": now,
        "source": source.name,
        "source_error": source_error,
        "unknown": unknown,
        "chart_config": {
            **charts.chart_config(user=request.user, endpoints=[e["endpoint"] for e in endpoints]),
            "range_seconds": charts.TIME_RANGES[time_range].total_seconds(),
            "metrics_url": reverse("api:metrics"),
        },
    }
    if request.htmx:
        return render(request, "monitoring/overview.html#summary", context)
    return render(request, "monitoring/overview.html", context)


@login_required
@vary_on_headers("HX-Request")
def alert_list(request):
    status = request.GET.get("status", "")
    if status not in AlertStatus.values:
        status = ""
    alerts = alert_selectors.alert_list(user=request.user, status=status or None).order_by("-last_seen", "-id")
    page = Paginator(alerts, 50).get_page(request.GET.get("page"))
    context = {"page": page, "status": status, "statuses": AlertStatus.choices}
    if request.htmx:
        return render(request, "monitoring/alert_list.html#alert-rows", context)
    return render(request, "monitoring/alert_list.html", context)


@login_required
def alert_detail(request, pk):
    alert = alert_selectors.alert_get(user=request.user, alert_id=pk)
    context = {
        "alert": alert,
        "summary": evidence_summary(alert.evidence),
        "carried": list(alert.carried.all()[:20]),
        "deliveries": alert_selectors.delivery_list(alert=alert),
        "events": event_list(user=request.user, object_type="monitoring.alert", object_id=str(alert.pk))[:20],
    }
    return render(request, "monitoring/alert_detail.html", context)


def _alert_action(request, pk, service, done: str):
    alert = alert_selectors.alert_get(user=request.user, alert_id=pk)
    try:
        alert = service(user=request.user, alert=alert, note=request.POST.get("note", ""))
    except PlatformError as exc:
        if request.htmx:
            return render(
                request,
                "monitoring/alert_list.html#alert-row",
                {"alert": alert, "error": exc.detail},
                status=exc.status,
            )
        messages.error(request, exc.detail)
    else:
        if request.htmx:
            return render(
                request,
                "monitoring/alert_list.html#alert-row",
                {"alert": alert_selectors.alert_get(user=request.user, alert_id=pk)},
            )
        messages.success(request, f"Alert {alert.pk} {done}.")
    return redirect_next(request, "monitoring:alert-list")


@login_required
@require_POST
def alert_acknowledge(request, pk):
    return _alert_action(request, pk, services.alert_acknowledge, "acknowledged")


@login_required
@require_POST
def alert_resolve(request, pk):
    return _alert_action(request, pk, services.alert_resolve, "resolved")


# --- silences ---------------------------------------------------------------------------------------------------
def _silence_initial(request) -> dict:
    """The form's fields prefilled from an alert (?alert=<id>: its team, endpoint, kind, severity)."""
    if not request.GET.get("alert", "").isdigit():
        return {}
    alert = alert_selectors.alert_get(user=request.user, alert_id=int(request.GET["alert"]))
    return {
        "team": str(alert.team_id or ""),
        "endpoint": alert.endpoint,
        "check": alert.kind,
        "severity": alert.severity,
        "alert": alert,
    }


def _silence_page(request, *, form=None, status: int = 200):
    now = timezone.now()
    initial = _silence_initial(request) if form is None else {}
    if form is None:
        form = SilenceForm(user=request.user, initial={k: v for k, v in initial.items() if k != "alert"})
    silences = list(silence_selectors.silence_list(user=request.user, now=now)[:200])
    for silence in silences:
        silence.state = silence_selectors.silence_state(silence, now)
    context = {
        "form": form,
        "from_alert": initial.get("alert"),
        "current": [s for s in silences if s.state != "expired"],
        "expired": [s for s in silences if s.state == "expired"][:50],
        "now": now,
    }
    return render(request, "monitoring/silence_list.html", context, status=status)


@login_required
def silence_list(request):
    return _silence_page(request)


@login_required
@require_POST
def silence_create(request):
    form = SilenceForm(request.POST, user=request.user)
    if form.is_valid():
        try:
            silence = silence_services.silence_create(user=request.user, **form.service_arguments())
        except PlatformError as exc:
            if exc.status in (403, 404):
                raise
            form.add_error(exc.field if exc.field in form.fields else None, exc.detail)
        else:
            messages.success(request, f"Silence #{silence.pk} active until {silence.ends_at:%Y-%m-%d %H:%M} UTC.")
            return redirect_next(request, "monitoring:silence-list")
    return _silence_page(request, form=form, status=400)


@login_required
@require_POST
def silence_expire(request, pk):
    silence = silence_selectors.silence_get(user=request.user, silence_id=pk)
    try:
        silence_services.silence_expire(user=request.user, silence=silence)
    except PlatformError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, f"Silence #{silence.pk} expired: matching alerts are notified again.")
    return redirect_next(request, "monitoring:silence-list")
