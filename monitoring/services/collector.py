"""The collector's tick: scrape every target (the gateway, each Triton replica), diff each
scrape against the previous one, and store the derived samples at one common time. The
parsing is pure and lives in monitoring/collection/collect.py (samples out of the text:
monitoring/collection/exposition.py); the HTTP side in monitoring/collection/scraper.py; the targets in
monitoring/collection/targets.py.

What a tick costs at 1,000 targets (make bench-collector measures it): the scrapes on one
asyncio loop, the parse before any lock is taken, then one transaction that reads the
targets' previous counters, writes every state in one executemany and the samples in one
bulk insert. Django's bulk_update was most of it (about 1.2 CPU-seconds for 1,000 states:
it compiles a CASE WHEN per field per row), so the states are written by one parameterised
UPDATE per row, sent together. And the cyclic garbage collector is paused for the tick: a
tick makes some 100,000 short-lived objects (freed by reference counting), and the full
collections they triggered walked every object of the worker each time, about a third of
the tick's CPU."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection, transaction
from django.utils import timezone

from monitoring import conf, lock_objects
from monitoring.collection import collect, gateway_samples, triton_samples
from monitoring.collection.scraper import fetch_all, scrape_headers
from monitoring.collection.targets import ScrapeTarget, scrape_targets
from monitoring.models import ScrapeState, Severity
from monitoring.services.alerts import alert_raise
from monitoring.services.route_refusals import refused_entries, route_refusals_alert
from monitoring.services.store import samples_store

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
STATE_FIELDS = ("counters", "scraped_at", "ok", "error", "failing_since", "updated_at")


@dataclass
class Scrape:
    target: ScrapeTarget
    fetched_at: datetime
    snapshot: dict | None = None  # the target's cumulative values, parsed
    error: str = ""
    refused: list | None = None  # a gateway's refused route entries [(kind, name, code)] (route_refusals.py)


@contextmanager
def _gc_paused():
    """No cyclic collection inside the block (the tick's objects are acyclic and freed as
    it goes); collection resumes after it, whatever happened."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _names(target: ScrapeTarget) -> gateway_samples.GatewayNames:
    return gateway_samples.GatewayNames(prefix=target.metric_prefix or conf.get("MONITORING_GATEWAY_METRIC_PREFIX"))


def _snapshot(target: ScrapeTarget, text: str) -> dict:
    if target.kind == "gateway":
        return gateway_samples.gateway_snapshot(text, _names(target))
    return triton_samples.triton_snapshot(text)


def _deltas(target: ScrapeTarget, prev: dict, cur: dict, seconds: float):
    if target.kind == "gateway":
        return gateway_samples.gateway_deltas(prev, cur, seconds=seconds, names=_names(target))
    return triton_samples.triton_deltas(
        prev, cur, seconds=seconds, models=target.models, cost_per_replica_hour=target.cost_per_replica_hour
    )


def scrape_all(targets: list[ScrapeTarget]) -> list[Scrape]:
    """Fetch every target at once and parse each reply (no database: this is the part of
    a tick that takes time, so it runs before any row is locked)."""
    fetched = fetch_all([(t.url, scrape_headers(t)) for t in targets])
    scrapes = []
    for target, reply in zip(targets, fetched, strict=True):
        scrape = Scrape(target=target, fetched_at=datetime.fromtimestamp(reply.fetched_at, tz=UTC), error=reply.error)
        if reply.text is not None:
            try:
                scrape.snapshot = _snapshot(target, reply.text)
                if target.kind == "gateway":
                    scrape.refused = refused_entries(reply.text, _names(target).prefix)
            except (ValueError, IndexError, KeyError) as exc:  # not (valid) Prometheus text
                scrape.error = f"unparseable metrics: {exc}"[:2000]
        scrapes.append(scrape)
    return scrapes


def _states_for_update(keys: list[str]) -> dict[str, ScrapeState]:
    """The states of `keys` this tick may write (locked; a target another tick holds is
    left out). A target seen for the first time gets its row first (rarely: once)."""
    states = lock_objects.scrape_states_for_update(keys)
    new = [k for k in keys if k not in states]
    if new:
        ScrapeState.objects.bulk_create(
            [ScrapeState(target=k, scraped_at=EPOCH, counters={}) for k in new], ignore_conflicts=True
        )
        states.update(lock_objects.scrape_states_for_update(new))
    return states


def _states_write(states: list[ScrapeState]) -> None:
    """Every changed state in one batched call: the ORM's own column names and value
    adaptation (JSON, times), one UPDATE per row sent together (a pipeline on PostgreSQL)."""
    if not states:
        return
    meta, quote = ScrapeState._meta, connection.ops.quote_name
    fields = [meta.get_field(name) for name in STATE_FIELDS]
    sql = "UPDATE {} SET {} WHERE {} = %s".format(
        quote(meta.db_table), ", ".join(f"{quote(f.column)} = %s" for f in fields), quote(meta.pk.column)
    )
    rows = [[f.get_db_prep_save(getattr(s, f.attname), connection) for f in fields] + [s.pk] for s in states]
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)


def _apply(scrape: Scrape, state: ScrapeState, summary: dict, outages: dict) -> tuple | None:
    """One target's scrape against its previous state: the state updated in place, the
    interval's totals returned (None on a failed or first scrape)."""
    if scrape.snapshot is None:
        summary["failed"] += 1
        summary["errors"][scrape.target.url] = scrape.error
        state.ok, state.error = False, scrape.error
        state.failing_since = state.failing_since or scrape.fetched_at
        if (scrape.fetched_at - state.failing_since).total_seconds() >= conf.get("MONITORING_SCRAPE_ALERT_AFTER_S"):
            outages[scrape.target.url] = {"error": scrape.error, "failing_since": state.failing_since.isoformat()}
        return None
    totals = None
    if state.scraped_at > EPOCH:
        seconds = (scrape.fetched_at - state.scraped_at).total_seconds()
        totals = _deltas(scrape.target, state.counters, scrape.snapshot, seconds)
    state.counters, state.scraped_at, state.ok, state.error, state.failing_since = (
        scrape.snapshot,
        scrape.fetched_at,
        True,
        "",
        None,
    )
    summary["scraped"] += 1
    return totals


def metrics_collect(*, targets: list[ScrapeTarget] | None = None, now: datetime | None = None) -> dict:
    """One collector tick: scrape every target at once (bounded batch,
    MONITORING_SCRAPE_MAX_TARGETS), diff each against its previous scrape, add replicas up
    per endpoint x variant and store the derived metrics at one common time, every state
    and sample in batched writes. A target another tick holds is skipped; the first scrape
    of a target only records its counters. Returns a summary."""
    targets = list(targets if targets is not None else scrape_targets())[: conf.get("MONITORING_SCRAPE_MAX_TARGETS")]
    summary = {"targets": len(targets), "scraped": 0, "failed": 0, "skipped": 0, "samples": 0, "errors": {}}
    if not targets:
        summary["route_refused"] = 0
        return summary
    with _gc_paused():
        outages = _tick(targets, now, summary)
    summary["outages"] = sorted(outages)  # failing for MONITORING_SCRAPE_ALERT_AFTER_S or longer
    summary["route_refused"] = route_refusals_alert(summary.pop("_refused"), complete=summary.pop("_gateways_read"))
    if outages:
        # Monitoring that cannot see is itself worth an alert: the judge would wait forever.
        alert_raise(
            kind="scrape_failed",
            severity=Severity.WARNING,
            reason=f"{len(outages)} metrics target(s) unreachable for over {conf.get('MONITORING_SCRAPE_ALERT_AFTER_S'):.0f} s: "
            + ", ".join(sorted(outages))[:1500],
            evidence={"targets": outages},
        )
    return summary


def _tick(targets: list[ScrapeTarget], now: datetime | None, summary: dict) -> dict:
    """Scrape, diff and store (the summary filled in); returns the targets down for long
    enough to alert on."""
    scrapes = scrape_all(targets)
    summary["_refused"] = {(s.target.url, r): s.target.endpoint_teams for s in scrapes for r in s.refused or ()}
    gateways = [s for s in scrapes if s.target.kind == "gateway"]
    # every gateway read: what none of them refuses is accepted (its refusal alert resolves)
    summary["_gateways_read"] = bool(gateways) and all(s.error is None and s.snapshot is not None for s in gateways)
    at = now or timezone.now()
    parts, team_ids, outages, changed = [], {}, {}, []
    written_at = timezone.now()
    with transaction.atomic():
        states = _states_for_update([s.target.key for s in scrapes])
        for scrape in scrapes:
            state = states.get(scrape.target.key)
            if state is None or state.scraped_at >= scrape.fetched_at:
                summary["skipped"] += 1
                continue
            totals = _apply(scrape, state, summary, outages)
            if totals is not None:
                parts.append(totals)
            if scrape.snapshot is not None:
                team_ids.update(scrape.target.endpoint_teams)
            state.updated_at = written_at
            changed.append(state)
        _states_write(changed)
        rows = []
        for (endpoint, variant), totals in collect.merge(*parts).items():
            for metric, value in collect.derive(totals).items():
                rows.append((endpoint, variant, metric, value))
        summary["samples"] = samples_store(rows=rows, at=at, team_ids=team_ids)
    return outages
