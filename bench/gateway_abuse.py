"""python -m bench gateway_abuse — abuse beside honest traffic (also the last table of `make
bench-gateway`): a second tenant's p50/p99 and success rate alone and beside each abuse class,
on a real gateway (one worker, default limits) in front of a real tritonserver (harness/abuse.py:
every abuser from its own loopback address, the tenant from 127.0.0.1).

Classes, as reproduced on the issue that bounded them:
  hoarding     one address opening 8,400 idle HTTP connections;
  big bodies   four addresses each starting a 7-8 MB body to a 13-float model 10 times a second
               (three with Content-Length, one chunked), each sending until the answer comes,
               then hanging up;
  slowloris    400 connections sending their head a byte every 0.5 s;
  half-open    80 HTTP/2 connections from one address, each opening 128 HEADERS-only
               ModelInfer streams (framed by h2); the tenant calls over gRPC here.
Each class: the tenant alone for a window, then beside the abuse for a window, then a pause.
Also the gateway's CPU per refused big body (its CPU beside the abuse minus its rate alone,
over the abusive requests answered: the connection, the head, the body bytes already sent). Writes var/bench/gateway_abuse.json with the load average.
Options: --window S (default 6).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from bench.common import print_table, write_json
from harness.abuse import Honest, harm, start_stack
from harness.abusers import Abuser, big_body, close_all, hoard, niced, slowloris
from harness.h2streams import HalfOpenStreams

# the gateway's own defaults (the harness shortens some for tests)
DEFAULT_LIMITS = {
    "GATEWAY_MAX_BODY_BYTES": str(8 << 20),
    "GATEWAY_RECEIVE_TIMEOUT_S": "15",
    "GATEWAY_IDLE_TIMEOUT_S": "75",
    "GATEWAY_MAX_PIPELINED": "32",
    "GATEWAY_MAX_CHUNKS": "4096",
}


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hoarding(stack, window: float):
    held, outcomes = niced(hoard, stack.port, 8400, "127.0.0.2")
    time.sleep(window)
    close_all(held)
    return {"held": outcomes.get("held", 0), "429": outcomes.get("429", 0)}


def big_bodies(stack, window: float):
    abusers = [Abuser(big_body(stack.port, f"127.0.0.{10 + i}", 7_500_000), 0.1) for i in range(3)]
    abusers.append(Abuser(big_body(stack.port, "127.0.0.13", 8_000_000, chunked=True), 0.1))
    for abuser in abusers:
        abuser.start()
    time.sleep(window)
    for abuser in abusers:
        abuser.finish()
    answered = {}
    for abuser in abusers:
        for status, n in abuser.outcomes.items():
            answered[str(status)] = answered.get(str(status), 0) + n
    seconds = sorted(s for a in abusers for s in a.seconds)
    median = 1000 * seconds[len(seconds) // 2] if seconds else None
    return {**answered, "requests": sum(answered.values()), "median_ms_to_answer": median}


def slow(stack, window: float):
    abuser = Abuser(slowloris(stack.port, "127.0.0.20", 400, interval_s=0.5))
    abuser.start()
    time.sleep(window)
    abuser.finish()
    return {str(k): v for k, v in abuser.outcomes.items()}


def half_open(stack, window: float):
    abuser = HalfOpenStreams(stack.grpc_port, "127.0.0.30", connections=80, streams=128, hold_s=window + 30)
    abuser.start()
    abuser.set_up.wait(60)
    time.sleep(window)
    outcomes = dict(abuser.outcomes)
    abuser.finish()
    names = {"grpc-status 8": "RESOURCE_EXHAUSTED", "grpc-status 4": "DEADLINE_EXCEEDED"}
    return {names.get(k, k): v for k, v in outcomes.items()} | {"streams_opened": abuser.opened}


CLASSES = [
    ("connection hoarding: 8,400 idle HTTP connections from one address", "http", hoarding),
    ("big bodies: 4 clients x 10/s x 7-8 MB to a 13-float model", "http", big_bodies),
    ("slowloris: 400 connections, a head byte every 0.5 s", "http", slow),
    ("half-open gRPC: 80 connections x 128 HEADERS-only streams", "grpc", half_open),
]


def run(window: float = 6.0) -> dict:
    load_before = os.getloadavg()
    stack = start_stack(**DEFAULT_LIMITS)
    rows, results = [], []
    try:
        for name, protocol, attack in CLASSES:
            tenant = Honest(stack, protocol=protocol)
            tenant.start()
            time.sleep(1.0)  # warm
            mark = tenant.mark()
            cpu0 = cpu_s(stack.proc.pid)
            time.sleep(window)
            alone = tenant.since(mark)
            cpu_alone = cpu_s(stack.proc.pid) - cpu0
            mark = tenant.mark()
            cpu0, t0 = cpu_s(stack.proc.pid), time.monotonic()
            abuser = attack(stack, window)
            elapsed = time.monotonic() - t0
            beside = tenant.since(mark)
            cpu_beside = cpu_s(stack.proc.pid) - cpu0
            tenant.finish()
            result = {
                "class": name,
                "protocol": protocol,
                "alone": alone,
                "beside": beside,
                "abuser": abuser,
                "held_to_tolerance": not harm(alone, beside),
                "beyond_tolerance": harm(alone, beside),
                "gateway_cpu_s": {"alone_window": cpu_alone, "abuse_window": cpu_beside, "abuse_window_s": elapsed},
            }
            if attack is big_bodies and abuser["requests"]:
                extra = cpu_beside - cpu_alone * elapsed / window
                result["gateway_cpu_us_per_refused_body"] = 1e6 * max(0.0, extra) / abuser["requests"]
            results.append(result)
            rows.append(
                [
                    name,
                    protocol,
                    f"{alone['p50_ms']:.1f} / {alone['p99_ms']:.1f}",
                    f"{beside['p50_ms']:.1f} / {beside['p99_ms']:.1f}",
                    f"{beside['success_rate']:.3f}",
                    ", ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}" for k, v in abuser.items()),
                ]
            )
            time.sleep(2.0)  # what the abuse left behind is gone before the next class
    finally:
        stack.stop()
    load_after = os.getloadavg()
    print("\nabuse beside honest traffic (the honest tenant's p50 / p99 ms alone and beside each abuse class)")
    print_table(["abuse", "tenant", "alone p50/p99", "beside p50/p99", "success", "the abuser got"], rows)
    for result in results:
        if "gateway_cpu_us_per_refused_body" in result:
            print(
                "gateway CPU per refused 7-8 MB request (its connection, its head, the body bytes that "
                f"arrived before the 413): "
                f"{result['gateway_cpu_us_per_refused_body']:.0f} us"
            )
    print(f"load average {load_before[0]:.2f} -> {load_after[0]:.2f} ({os.cpu_count()} CPUs)")
    payload = {
        "classes": results,
        "window_s": window,
        "tolerance": "success >= 0.99, p50 <= 2 x alone + 5 ms, p99 <= 4 x alone + 100 ms (harness/abuse.py)",
        "load_average": {"before": list(load_before), "after": list(load_after)},
        "cpus": os.cpu_count(),
    }
    path = write_json("gateway_abuse", payload)
    print(f"wrote {path}")
    return payload


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench gateway_abuse")
    parser.add_argument("--window", type=float, default=6.0, help="seconds alone and beside each abuse")
    args = parser.parse_args(argv)
    run(args.window)
    return 0
