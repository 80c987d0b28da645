"""Figures of the rollback benchmark: the distribution of times per case, and for A/A
rollouts the share asymmetry (candidate latency over the fair baseline's and over the
stable's, in the same first step)."""

from __future__ import annotations

import numpy as np

EXPECTED = {"healthy": "promoted", "slow": "rolled back", "errors": "rolled back"}


def first_step_latency(rollout) -> dict | None:
    """p50 latency (ms) of candidate, baseline and stable over the rollout's first step,
    from the metric store, and the ratios candidate/baseline and candidate/stable."""
    from monitoring.judge.statistics import histogram_quantile
    from monitoring.sources.store import judge_arms
    from registry.models import Event, EventAction
    from registry.names import baseline_variant_name, variant_name

    start = rollout.traffic_started_at
    if start is None:
        return None
    after = (
        Event.objects.filter(
            object_type="deployments.rollout",
            object_id=str(rollout.pk),
            action=EventAction.STATUS_CHANGED,
            from_state__in=["canary[0]", "shadow"],
        )
        .order_by("time")
        .first()
    )  # the first step's end
    until = after.time if after else rollout.finished_at
    stable, candidate = variant_name(rollout.baseline_artifact), variant_name(rollout.candidate_artifact)
    baseline = baseline_variant_name(rollout.baseline_artifact)
    arms = judge_arms(endpoint=rollout.endpoint.name, variants=[stable, baseline, candidate], since=start, until=until)
    p50 = {
        name: histogram_quantile(0.5, arms[v].latency_buckets)
        for name, v in (("stable", stable), ("baseline", baseline), ("candidate", candidate))
    }
    out = {f"{k}_p50_ms": None if v is None else round(v * 1000, 3) for k, v in p50.items()}
    out["requests"] = {
        name: arms[v].requests for name, v in (("stable", stable), ("baseline", baseline), ("candidate", candidate))
    }
    # Triton's own compute time per request (where a cold small arm shows first), averaged over the step's scrapes
    from django.db.models import Avg

    from monitoring.models import MetricSample

    compute = {
        name: MetricSample.objects.filter(
            endpoint=rollout.endpoint.name, variant=v, metric="compute_ms", time__gte=start, time__lte=until
        ).aggregate(m=Avg("value"))["m"]
        for name, v in (("stable", stable), ("baseline", baseline), ("candidate", candidate))
    }
    if out["requests"]["stable"] < 100:
        compute["stable"] = None
    out["compute_ms"] = {k: None if v is None else round(v, 3) for k, v in compute.items()}
    if compute["candidate"]:
        out["compute_ratio_vs_baseline"] = (
            round(compute["candidate"] / compute["baseline"], 3) if compute["baseline"] else None
        )
        out["compute_ratio_vs_stable"] = (
            round(compute["candidate"] / compute["stable"], 3) if compute["stable"] else None
        )
    if (
        out["requests"]["stable"] < 100
    ):  # a step where the baseline took the stable's whole share: no stable to compare with
        p50["stable"] = None
    if p50["candidate"]:
        out["ratio_vs_baseline"] = round(p50["candidate"] / p50["baseline"], 3) if p50["baseline"] else None
        out["ratio_vs_stable"] = round(p50["candidate"] / p50["stable"], 3) if p50["stable"] else None
    return out


def distribution(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "min": None, "median": None, "p90": None, "max": None}
    a = np.asarray(values, dtype=float)
    return {
        "n": len(a),
        "min": round(float(a.min()), 2),
        "median": round(float(np.median(a)), 2),
        "p90": round(float(np.quantile(a, 0.9)), 2),
        "max": round(float(a.max()), 2),
    }


def summarize(rows: list[dict]) -> dict:
    """Per scenario (model, rate) and case: outcomes, the distribution of times of the
    expected outcome, client errors, and (A/A) false rollbacks and latency ratios."""
    out: dict[str, dict] = {}
    for row in rows:
        key = f"{row['model']}@{row['rate']:g}/{row['case']}"
        out.setdefault(key, {"model": row["model"], "rate_rps": row["rate"], "case": row["case"], "rows": []})[
            "rows"
        ].append(row)
    for entry in out.values():
        rows_ = entry.pop("rows")
        expected = EXPECTED[entry["case"]]
        times = [r["seconds"] for r in rows_ if r["outcome"] == expected and r["seconds"] is not None]
        entry.update(
            runs=len(rows_),
            as_expected=sum(1 for r in rows_ if r["outcome"] == expected),
            seconds=distribution(times),
            client_errors=sum(r["client_errors"] for r in rows_),
            outcomes={o: sum(1 for r in rows_ if r["outcome"] == o) for o in {r["outcome"] for r in rows_}},
        )
        if entry["case"] == "healthy":
            entry["false_rollbacks"] = sum(1 for r in rows_ if r["outcome"] == "rolled back")
            ratios = [r["latency"] for r in rows_ if r.get("latency")]
            for name in (
                "ratio_vs_baseline",
                "ratio_vs_stable",
                "compute_ratio_vs_baseline",
                "compute_ratio_vs_stable",
            ):
                entry[name] = distribution([x[name] for x in ratios if x.get(name)])
    return out


def table_rows(summary: dict) -> list[list]:
    rows = []
    for entry in summary.values():
        s = entry["seconds"]
        ratio = ""
        if entry["case"] == "healthy" and entry["ratio_vs_baseline"]["n"]:
            ratio = f"{entry['ratio_vs_baseline']['median']} / {entry['ratio_vs_stable']['median'] or '-'}"
            if entry["compute_ratio_vs_baseline"]["n"]:
                ratio += f" (Triton compute {entry['compute_ratio_vs_baseline']['median']} / {entry['compute_ratio_vs_stable']['median']})"
        rows.append(
            [
                entry["model"],
                f"{entry['rate_rps']:g}",
                entry["case"],
                f"{entry['as_expected']}/{entry['runs']}",
                s["min"],
                s["median"],
                s["p90"],
                s["max"],
                entry["client_errors"],
                entry.get("false_rollbacks", ""),
                ratio,
            ]
        )
    return rows


HEADERS = [
    "model",
    "req/s",
    "case",
    "as expected",
    "min s",
    "median s",
    "p90 s",
    "max s",
    "client errors",
    "false rollbacks",
    "A/A step 1: p50 cand/baseline / cand/stable",
]
