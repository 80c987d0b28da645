"""python -m bench llm_tools — the LLM benchmarking tools people bring, run through the gateway as they are.

Three tools, each in a virtualenv of its own under var/tools/ (`make llm-tools` installs them;
they pin their own torch, transformers and protobuf, so they stay out of the project's venv):
  aiperf      NVIDIA's (`aiperf profile`), the successor of genai-perf;
  guidellm    vLLM's (`guidellm run`), whose start-up check is `GET /health`;
  genai-perf  Triton's, driving the perf_analyzer of the tritonclient 2.51.0 wheel (the 2.40.0 one
              lacks `--warmup-request-count`).
Each is given only the base URL, the model and the tokenizer's directory (offline: the tiny
model's own), plus the load: streaming chat completions at a concurrency, a request count, a
short synthetic prompt and output.

Targets, one process tree on this machine (the tiny model of registry/llm/tiny.py):
  direct   `transformers serve` (OpenAI-compatible) as the tools reach it without the gateway;
  gateway  the same server behind the gateway's public endpoint `bench-openai_server`;
  triton   the tiny model on a real tritonserver (generate extension) behind `bench-triton`:
           Triton speaks no OpenAI, so it has no direct row — `python -m bench llm` compares it;
  generate the same endpoint through Triton's generate_stream route of the gateway (genai-perf's
           `--endpoint-type generate`, the only one of the three that speaks it).
For every concurrency the three targets run back to back in a rotated order so the machine's
other load falls on them alike; added = gateway - direct per tool (TTFT and ITL at p50 and p99).
The gateway's CPU per request comes from its own /proc counters over its runs. The table also
says whether each tool ran clean (exit 0, no errored request): `--check` makes a failed tool
run the command's failure, which is how `make test-llm-tools` runs them on a bounded load.
Writes var/bench/llm_tools.json.

Options: --quick, --streams 1,4,16,64, --requests N (per stream; at least 8 per run),
--tools aiperf,guidellm,genai-perf, --check.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import print_table, write_json

ROOT = Path(__file__).resolve().parents[1]
TOOLS_DIR = Path(os.environ.get("LLM_TOOLS_DIR") or ROOT / "var" / "tools")
TOOLS = ("aiperf", "guidellm", "genai-perf")
# What `make llm-tools` installs, one venv per tool (ranges: the CLIs and JSON read here).
REQUIREMENTS = {
    "aiperf": ["aiperf>=0.13,<0.14"],
    # torch first, from this machine's CPU wheel: guidellm requires torch, and a bare resolve takes a CUDA build
    "guidellm": ["torch==2.13.0", "guidellm>=0.8,<0.9"],
    "genai-perf": ["genai-perf>=0.0.16,<0.1", "tritonclient[all]==2.51.0"],
}
PROMPT_TOKENS, OUTPUT_TOKENS = 32, 16


@dataclass(frozen=True)
class Target:
    label: str  # direct | gateway | triton | generate
    url: str  # the base URL the tool is given
    model: str


@dataclass(frozen=True)
class Run:
    tool: str
    target: Target
    streams: int
    requests: int
    tokenizer: str
    out: Path


# --- the tools ---------------------------------------------------------------------------------------
def tool_bin(tool: str) -> Path:
    return TOOLS_DIR / tool / "bin" / tool


def perf_analyzer_libs() -> Path:
    """The libraries genai-perf's perf_analyzer needs beside it (bench/gateway_clients.py's)."""
    from bench.gateway_clients import link_perf_analyzer_libs

    return link_perf_analyzer_libs(TOOLS_DIR / "genai-perf" / "palib")


def install(tools=TOOLS) -> None:
    """One venv per tool under var/tools/ (skips those already there); says what it does."""
    for tool in tools:
        if tool_bin(tool).exists():
            print(f"llm-tools: {tool} is installed ({tool_bin(tool)})")
            continue
        venv = TOOLS_DIR / tool
        print(f"llm-tools: installing {tool} into {venv} ({', '.join(REQUIREMENTS[tool])}); a few minutes", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        for requirement in REQUIREMENTS[tool]:  # in order: guidellm's torch before guidellm
            subprocess.run([*pip, requirement], check=True)


def command(run: Run) -> list[str]:
    """The tool's own command line for one run: URL, model, tokenizer and the load, nothing else."""
    t = run.target
    if run.tool == "aiperf":
        return [
            str(tool_bin("aiperf")), "profile", "-m", t.model, "--url", t.url, "--endpoint-type", "chat",
            "--streaming", "--tokenizer", run.tokenizer, "--concurrency", str(run.streams),
            "--request-count", str(run.requests), "--output-tokens-mean", str(OUTPUT_TOKENS),
            "--synthetic-input-tokens-mean", str(PROMPT_TOKENS), "--artifact-dir", str(run.out), "--ui-type", "none",
        ]  # fmt: skip
    if run.tool == "guidellm":
        return [
            str(tool_bin("guidellm")), "run",
            "--backend", f"kind=openai_http,target={t.url},model={t.model},request_format=/v1/chat/completions",
            "--profile", f"kind=concurrent,streams={run.streams}",
            "--constraint", f"kind=max_requests,count={run.requests}",
            "--data", f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}",
            "--tokenizer", f"kind=huggingface_auto,model={run.tokenizer}",
            "--output", f"kind=json,path={run.out / 'guidellm.json'}", "--disable-console-interactive",
        ]  # fmt: skip
    if run.tool == "genai-perf":
        kind = "generate" if t.label == "generate" else "chat"
        return [
            str(tool_bin("genai-perf")), "profile", "-m", t.model, "--url", t.url, "--endpoint-type", kind,
            "--streaming", "--tokenizer", run.tokenizer, "--concurrency", str(run.streams),
            "--request-count", str(run.requests), "--warmup-request-count", str(min(run.streams, 4)),
            "--output-tokens-mean", str(OUTPUT_TOKENS), "--synthetic-input-tokens-mean", str(PROMPT_TOKENS),
            "--artifact-dir", str(run.out),
        ]  # fmt: skip
    raise ValueError(f"unknown tool {run.tool!r}")


def environment(tool: str) -> dict:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    if tool != "aiperf":  # aiperf 0.13 takes a local tokenizer directory for a hub id when offline is set
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    else:
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            env.pop(name, None)
    env["PATH"] = f"{TOOLS_DIR / tool / 'bin'}:{env.get('PATH', '')}"  # genai-perf finds perf_analyzer on PATH
    if tool == "genai-perf":
        env["LD_LIBRARY_PATH"] = f"{perf_analyzer_libs()}:{env.get('LD_LIBRARY_PATH', '')}"
    return env


# --- what they report ------------------------------------------------------------------------------------
def _stat(metric: dict | None, key: str) -> float | None:
    if not metric or metric.get(key) is None:
        return None
    return round(float(metric[key]), 3)


def parse_aiperf(out: Path, requested: int) -> dict:
    data = json.loads(next(out.rglob("profile_export_aiperf.json")).read_text())
    done = int((data.get("request_count") or {}).get("avg") or 0)
    errors = sum(int(e.get("count", 0)) for e in data.get("error_summary") or [])
    return _row(
        data["time_to_first_token"],
        data["inter_token_latency"],
        data["request_throughput"]["avg"],
        done,
        errors,
        requested,
    )


def parse_genai_perf(out: Path, requested: int) -> dict:
    data = json.loads(next(out.rglob("profile_export_genai_perf.json")).read_text())
    done = int((data.get("request_count") or {}).get("avg") or 0)
    # perf_analyzer records only the requests that succeeded: the rest of the count failed
    return _row(
        data["time_to_first_token"],
        data["inter_token_latency"],
        data["request_throughput"]["avg"],
        done,
        max(requested - done, 0),
        requested,
    )


def parse_guidellm(out: Path, requested: int) -> dict:
    data = json.loads((out / "guidellm.json").read_text())
    metrics = data["benchmarks"][0]["metrics"]

    def flat(name: str) -> dict:
        ok = metrics[name]["successful"]
        return {"p50": ok.get("median"), **(ok.get("percentiles") or {})}

    totals = metrics["request_totals"]
    rate = metrics["requests_per_second"]["successful"]["mean"]
    return _row(
        flat("time_to_first_token_ms"),
        flat("inter_token_latency_ms"),
        rate,
        int(totals["successful"]),
        int(totals["errored"]) + int(totals["incomplete"]),
        requested,
    )


PARSERS = {"aiperf": parse_aiperf, "genai-perf": parse_genai_perf, "guidellm": parse_guidellm}


def _row(ttft: dict, itl: dict, rate, done: int, errors: int, requested: int) -> dict:
    if not done:  # no request succeeded: a tool's zeros are no figures
        ttft = itl = rate = None
    return {
        "ttft_p50_ms": _stat(ttft, "p50"),
        "ttft_p99_ms": _stat(ttft, "p99"),
        "itl_p50_ms": _stat(itl, "p50"),
        "itl_p99_ms": _stat(itl, "p99"),
        "requests_per_s": round(float(rate), 2) if rate is not None else None,
        "requests": done,
        "requested": requested,
        "errors": errors,
    }


def added(rows: list[dict]) -> list[dict]:
    """gateway - direct per (tool, streams), for the runs where both have figures."""
    by = {(r["tool"], r["streams"], r["target"]): r for r in rows if r.get("ttft_p50_ms") is not None}
    out = []
    for (tool, streams, target), through in sorted(by.items()):
        direct = by.get((tool, streams, "direct"))
        if target != "gateway" or direct is None:
            continue
        row = {"tool": tool, "streams": streams}
        for key in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"):
            if through.get(key) is not None and direct.get(key) is not None:
                row[key] = round(through[key] - direct[key], 3)
        out.append(row)
    return out


def rotated(targets: list[Target], n: int) -> list[Target]:
    """The targets in a different order at each concurrency, so none always runs first."""
    k = n % len(targets)
    return targets[k:] + targets[:k]


# --- the run ---------------------------------------------------------------------------------------------
def cpu_seconds(pids: list[int]) -> float:
    """CPU time of the processes, every thread, from the scheduler's nanosecond counters
    (/proc/PID/task/TID/schedstat; /proc/PID/stat counts in 10 ms ticks, too coarse for a run)."""
    total = 0
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):
                pass
    return total / 1e9


def run_one(run: Run, gateway_pids: list[int], timeout: float) -> dict:
    run.out.mkdir(parents=True, exist_ok=True)
    log = run.out / "tool.log"
    row = {"tool": run.tool, "target": run.target.label, "streams": run.streams}
    cpu_before = cpu_seconds(gateway_pids) if run.target.label != "direct" else None
    started = time.monotonic()
    with log.open("wb") as sink:
        try:
            code = subprocess.run(
                command(run),
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=environment(run.tool),
                timeout=timeout,
                cwd=run.out,
            ).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    row["seconds"] = round(time.monotonic() - started, 1)
    row["exit"] = code
    try:
        row.update(PARSERS[run.tool](run.out, run.requests))
    except (StopIteration, OSError, KeyError, IndexError, TypeError, ValueError) as error:
        row["failed"] = (
            f"no result ({type(error).__name__}: {error}); log {log}: {log.read_text(errors='replace')[-400:]}"
        )
    if cpu_before is not None and row.get("requests"):
        row["gateway_cpu_us_per_request"] = round((cpu_seconds(gateway_pids) - cpu_before) / row["requests"] * 1e6, 1)
    return row


def clean(row: dict) -> bool:
    return row.get("exit") == 0 and "failed" not in row and row.get("errors") == 0 and row.get("requests", 0) > 0


def failures(rows: list[dict]) -> list[dict]:
    """The runs that count against the gateway: a Triton run that was not clean, and a run
    through the gateway that was not clean where the same tool ran clean on the server directly.
    A tool the server itself refuses (guidellm's vLLM fields to `transformers serve`: 422 direct,
    400 `backend_refused` naming them through the gateway) is the server's, said in the table."""
    direct = {(r["tool"], r["streams"]): r for r in rows if r["target"] == "direct"}
    out = []
    for row in rows:
        if clean(row):
            continue
        if row["target"] == "gateway" and not clean(direct.get((row["tool"], row["streams"]), {})):
            row["note"] = "failed on the server directly too"
            continue
        if row["target"] == "direct":
            row["note"] = "failed on the server directly"
            continue
        out.append(row)
    return out


def measure(args, targets: list[Target], tokenizer: str, gateway_pids: list[int], work: Path) -> list[dict]:
    rows = []
    for n, streams in enumerate(args.streams):
        requests = max(8, args.requests * streams)
        for tool in args.tools:
            for target in rotated(targets, n):
                if target.label == "generate" and tool != "genai-perf":
                    continue
                out = work / f"{tool}-{target.label}-{streams}"
                run = Run(tool, target, streams, requests, tokenizer, out)
                row = run_one(run, gateway_pids, timeout=args.timeout)
                print(
                    f"  {tool:10} {target.label:8} streams {streams:3}: "
                    + ("ok" if clean(row) else f"NOT CLEAN {row}"),
                    flush=True,
                )
                rows.append(row)
    return rows


def report(results: dict) -> None:
    keys = ["ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "requests_per_s", "requests", "errors"]
    print("\nthe tools as they are: direct (transformers serve), through the gateway to it, and to Triton (ms)")
    print_table(
        ["tool", "target", "streams", *keys, "gw µs/req", "clean", "note"],
        [
            [
                r["tool"],
                r["target"],
                r["streams"],
                *(r.get(k, "") for k in keys),
                r.get("gateway_cpu_us_per_request", ""),
                clean(r),
                r.get("note", ""),
            ]
            for r in results["runs"]
        ],
    )
    print("\nadded by the gateway (gateway - direct, ms)")
    keys = ["ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"]
    print_table(
        ["tool", "streams", *keys], [[r["tool"], r["streams"], *(r.get(k, "") for k in keys)] for r in results["added"]]
    )
    if results["missing"]:
        print(f"\nnot installed (make llm-tools): {', '.join(results['missing'])}")
    print(f"\nload average before {results['load_average']['before']}, after {results['load_average']['after']}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench llm_tools", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="streams 1 and 4, fewer requests")
    parser.add_argument("--streams", default="1,4,16,64")
    parser.add_argument("--requests", type=int, default=8, help="requests per stream in each run")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one tool run may take")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every tool ran clean on every target")
    parser.add_argument("--install", action="store_true", help="install the missing tools first")
    args = parser.parse_args(argv)
    args.streams = [int(s) for s in args.streams.split(",")]
    args.tools = [t for t in args.tools.split(",") if t]
    unknown = sorted(set(args.tools) - set(TOOLS))
    if unknown:
        parser.error(f"unknown tool(s) {', '.join(unknown)}: choose from {', '.join(TOOLS)}")
    if args.quick:
        args.streams, args.requests = [s for s in args.streams if s <= 4] or [1], min(args.requests, 4)
    if args.install:
        install(args.tools)
    missing = [t for t in args.tools if not tool_bin(t).exists()]
    args.tools = [t for t in args.tools if t not in missing]
    if missing:
        print(f"bench llm_tools: not installed, skipped: {', '.join(missing)} (make llm-tools installs them)")
    if not args.tools:
        return 1 if args.check else 0

    from types import SimpleNamespace

    from bench.llm import route_table, start_backends
    from harness.gateway import start_gateway, stop_gateway
    from harness.procstats import process_tree

    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench-llm-tools-"))
    backends, gateway = {}, None
    try:
        print("starting the tiny model on tritonserver and on transformers serve, and the gateway", flush=True)
        backends = start_backends(work, SimpleNamespace(concurrency=[max(args.streams)], no_openai_server=False))
        routes = work / "routes.json"
        routes.write_text(json.dumps(route_table(backends, {}, 0)))
        gateway, port = start_gateway(routes, work)
        gateway_url, server = f"http://127.0.0.1:{port}", backends["openai_server"]
        targets = [
            Target("direct", server.url, server.model),
            Target("gateway", gateway_url, "bench-openai_server"),
            Target("triton", gateway_url, "bench-triton"),
            Target("generate", gateway_url, "bench-triton"),
        ]
        rows = measure(args, targets, str(server.hf_dir), process_tree(gateway.pid), work)
    finally:
        if gateway is not None:
            stop_gateway(gateway)
        for backend in backends.values():
            backend.stop()
    dirty = failures(rows)  # notes the runs the server itself refused
    results = {
        "runs": rows,
        "added": added(rows),
        "failures": len(dirty),
        "missing": missing,
        "streams": args.streams,
        "cores": os.cpu_count(),
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "prompt_tokens": PROMPT_TOKENS,
        "output_tokens": OUTPUT_TOKENS,
    }
    report(results)
    print(f"\nwrote {write_json('llm_tools', results)}")
    if all(clean(r) for r in rows):
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"bench llm_tools: logs of the runs that were not clean are under {work}")
    if dirty and args.check:
        print(f"bench llm_tools: {len(dirty)} run(s) failed through the gateway", file=sys.stderr)
        return 1
    return 0
