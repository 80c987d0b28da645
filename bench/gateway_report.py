"""The printed report of `python -m bench gateway` (bench/gateway.py measures): the table of
paths, nginx's figures beside the gateway's, what each adds to direct's latency, the goals and
where the gateway's time goes."""

from __future__ import annotations


def table_rows(paths: dict, results: dict, lat_all: dict) -> list[list]:
    """The printed table: each path's capacity and open-loop latency, then the same-rate and light rows."""
    rows = []
    for name in paths:
        r = results[name]
        rows.append(
            [
                name,
                r["capacity"]["max_rps"],
                r["capacity"]["at_concurrency"],
                r["latency"]["rate"],
                r["latency"]["p50_ms"],
                r["latency"]["p90_ms"],
                r["latency"]["p99_ms"],
                sum(v for k, v in r["latency"]["statuses"].items() if k != "200")
                + sum(s["errors"] for s in r["capacity"]["sweep"]),
                r["capacity"]["proxy_cpu_us_per_request"]
                if r["capacity"]["proxy_cpu_us_per_request"] is not None
                else "-",
            ]
        )
    for key in ("direct@gw-rate", "nginx@gw-rate", "direct@light", "nginx@light", "gateway@light"):
        if key not in lat_all:
            continue
        r = lat_all[key]
        rows.append(
            [
                key,
                float("nan"),
                "-",
                r["rate"],
                r["p50_ms"],
                r["p90_ms"],
                r["p99_ms"],
                sum(v for k, v in r["statuses"].items() if k != "200"),
                "-",
            ]
        )
    return rows


def nginx_comparison(add, lat_all: dict, ratio, paired, gw50: dict, gw99: dict) -> tuple[dict, dict, dict]:
    """(summary fields, goals met, nginx's added latencies) with nginx beside the gateway."""
    ng50, ng99 = add("nginx@gw-rate", "direct@gw-rate", 0.5), add("nginx@gw-rate", "direct@gw-rate", 0.99)
    nl50, nl99 = add("nginx@light", "direct@light", 0.5), add("nginx@light", "direct@light", 0.99)
    fields = {
        "rps_ratio_vs_nginx_paired": paired["median"],
        "rps_ratio_vs_nginx_paired_ci95": paired["ci95"],
        "rps_ratio_vs_nginx_paired_rounds": paired["ratios"],
        "nginx_added_p50_ms": ng50["ms"],
        "nginx_added_p50_ms_ci95": ng50["ci95"],
        "nginx_added_p99_ms": ng99["ms"],
        "nginx_added_p99_ms_ci95": ng99["ci95"],
        "nginx_added_p50_ms_light": nl50["ms"],
        "nginx_added_p50_ms_light_ci95": nl50["ci95"],
        "nginx_added_p99_ms_light": nl99["ms"],
        "nginx_added_p99_ms_light_ci95": nl99["ci95"],
        "nginx_p50_ms_at_its_own_50pct": lat_all["nginx"]["p50_ms"],
        "nginx_p99_ms_at_its_own_50pct": lat_all["nginx"]["p99_ms"],
    }
    goals_met = {
        "rps_ratio_vs_nginx": ratio >= 0.8,
        "rps_ratio_vs_nginx_paired": paired["median"] >= 0.8,
        "added_p50_ms": gw50["ms"] <= ng50["ms"],
        "added_p99_ms": gw99["ms"] <= 1.5 * max(ng99["ms"], 0.0),
    }
    return fields, goals_met, {"ng50": ng50, "ng99": ng99, "nl50": nl50, "nl99": nl99}


def fmt(point, ci) -> str:
    return f"{point:+.3f} ms [95% CI {ci[0]:+.3f}, {ci[1]:+.3f}]"


def print_added(gw_rate, rounds, loads, light_rate, gateway_added, nginx_added: dict) -> None:
    """What the gateway (and nginx, when it ran) adds to direct's latency, at the same rate and a light one."""
    load_before, load_after = loads
    gw50, gw99, light50, light99 = gateway_added
    ng50, ng99, nl50, nl99 = (nginx_added.get(k) for k in ("ng50", "ng99", "nl50", "nl99"))
    print()
    print(
        f"same rate {gw_rate:.0f} req/s (50% of the gateway's capacity), {rounds} interleaved rounds; load average "
        f"{load_before[0]:.1f} -> {load_after[0]:.1f}"
    )
    print(f"  gateway adds p50 {fmt(gw50['ms'], gw50['ci95'])}, p99 {fmt(gw99['ms'], gw99['ci95'])}")
    if nginx_added:
        print(f"  nginx   adds p50 {fmt(ng50['ms'], ng50['ci95'])}, p99 {fmt(ng99['ms'], ng99['ci95'])}")
    print(f"light {light_rate:.0f} req/s:")
    print(f"  gateway adds p50 {fmt(light50['ms'], light50['ci95'])}, p99 {fmt(light99['ms'], light99['ci95'])}")
    if nginx_added:
        print(f"  nginx   adds p50 {fmt(nl50['ms'], nl50['ci95'])}, p99 {fmt(nl99['ms'], nl99['ci95'])}")


def print_goals(ratio, paired, goals_met: dict) -> None:
    if ratio is not None:
        print(
            f"rps_ratio_vs_nginx: {ratio:.3f} from the sweep's best levels (goal >= 0.8) "
            f"{'met' if goals_met['rps_ratio_vs_nginx'] else 'MISSED'}; paired windows: {paired['median']:.3f} "
            f"[95% CI {paired['ci95'][0]:.3f}, {paired['ci95'][1]:.3f}] {'met' if goals_met['rps_ratio_vs_nginx_paired'] else 'MISSED'}"
        )
        print(
            f"added p50 <= nginx's: {'met' if goals_met['added_p50_ms'] else 'MISSED'}; "
            f"added p99 <= 1.5 x nginx's: {'met' if goals_met['added_p99_ms'] else 'MISSED'}"
        )
    else:
        print("rps_ratio_vs_nginx: n/a (no nginx)")


def print_proxies(pids: dict, summary: dict) -> None:
    for name in pids:
        us = summary["proxy_user_sys_us_per_request"][name]
        cs = summary["proxy_context_switches_per_request"][name]
        if us is not None:
            print(
                f"{name}: {us[0]:.1f} us user + {us[1]:.1f} us system CPU and {cs:.2f} context switches per request (closed loop)"
            )


def print_profile(profile, level: int) -> None:
    if profile and "self_top" in profile:
        busy, idle = profile["py_spy_samples_busy"], profile["py_spy_samples_idle"]
        print(
            f"\ngateway under closed-loop load at c={level}: py-spy wall-clock samples, "
            f"{100 * idle / max(1, busy + idle):.0f}% idle in epoll; shares of the busy ones (self | inclusive):"
        )
        for (frame, pct), (iframe, ipct) in zip(profile["self_top"], profile["inclusive_top"]):
            print(f"  {pct:5.1f}%  {frame:55s} | {ipct:5.1f}%  {iframe}")
        print(
            "parts (inclusive share of busy samples): "
            + ", ".join(f"{k} {v:.1f}%" for k, v in profile["parts"].items())
        )
