"""Abuse beside honest traffic, the one way the adversarial suite and `make bench-gateway` play
it: a real tritonserver with a CTR model behind a real gateway (HTTP and gRPC), a second
tenant's traffic measured alone and beside each abuse class, and the tolerance it is held to.
The abusers are in harness/abusers.py and harness/h2streams.py.

Each abuser comes from its own loopback address (127.0.0.0/8 all reaches the host, and the
gateway counts its per-client caps by address: gateway/wire/peers.py), the honest tenant from
127.0.0.1, so the caps meet the abuser and not the tenant beside it.

The host's own noise. "Alone" is measured before the abuse and "beside" during it, so a host
that got busier in between (another test's build, a browser, the abuser's own client code on
the same two cores) would read as harm done by the abuse. The tenant therefore sends each
request twice, through the gateway and straight to tritonserver (the host witness: a path the
abuse cannot reach but the host's load does), and the tolerance is widened by what the witness
lost between the two windows, in milliseconds, at the same quantile: the comparison the judge
makes (both measured at the same moments), never a wider factor. The witness is a different
process from the gateway, though: a gateway short of CPU among other tests' processes does the
abuse's work later, which the witness does not see. So the tenant's side (the gateway,
tritonserver, the tenant's client: `favour`) runs above everything else on the host, as it would
on machines of its own, while the abusers run niced; the abuse's work inside the gateway is at
the tenant's own priority, and that is what is measured.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import requests
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from harness.gateway import METRICS_TOKEN, start_gateway, start_triton, stop_gateway
from harness.onnx import N_DENSE, N_SPARSE
from harness.triton_models import SIGNATURE, ctr_model, infer_body
from serving.tritonserver import free_port

MODEL = "ctr__v1__onnx"


# blue's side over everything else on the host (favour): -10 weighs about 9:1 against a nice-0
# process in the kernel's scheduler, -5 only 3:1, so a dozen runnable processes of other tests
# (a CI run has that many) could leave each of the attacked gateway's workers half a core, and
# red's burst then holds blue's requests twice as long as on a quiet host (a CI run: blue's p95
# 15 -> 136 ms while the control gateway's stayed at 17 -> 24 ms). Red's work in the gateway
# runs at blue's own priority: what is measured.
FAVOURED_NICE = -10


def favour(pid: int) -> None:
    """Blue's side of the host (the gateway, blue's backends and blue's client, every thread and
    every process they started) at a higher CPU priority than the abuser's own client and hostile backend and
    than the other tests beside this one on two cores: in production those run on machines of
    their own, and what red may cost blue is what it costs through the gateway. Red's requests
    in the gateway still compete with blue's at the same priority (what is measured). Without
    the right to raise a priority (not root), nothing changes."""
    pids, seen = [pid], set()
    while pids:
        current = pids.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():  # every thread (Linux: a nice is a thread's)
                os.setpriority(os.PRIO_PROCESS, int(task.name), FAVOURED_NICE)
                pids += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, PermissionError):
            continue


@dataclass
class Stack:
    """Triton + gateway on free ports; `stop()` ends both."""

    work: Path
    triton: object
    proc: object
    port: int
    grpc_port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def metric(self, name: str, **labels) -> float:
        text = requests.get(f"{self.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=5).text
        total = 0.0
        for line in text.splitlines():
            series, _, value = line.rpartition(" ")
            metric, _, rest = series.partition("{")
            if metric == name and all(f'{k}="{v}"' in rest for k, v in labels.items()):
                total += float(value)
        return total

    def stop(self) -> None:
        stop_gateway(self.proc)
        self.triton.stop(timeout=0.05)
        shutil.rmtree(self.work, ignore_errors=True)


def start_stack(work: Path | None = None, **gateway_env) -> Stack:
    """A public endpoint `ctr` (the CTR model's signature, HTTP and gRPC) behind one gateway worker."""
    work = work or Path(tempfile.mkdtemp(prefix="abuse-"))
    repo = work / "repo"
    ctr_model(repo, MODEL, instances=2)
    triton = start_triton(work / "triton", repo, [MODEL])
    stable = {
        "name": "v1",
        "model_version": "1",
        "triton_model": MODEL,
        "role": "stable",
        "weight_bp": 10000,
        "replicas": [triton.http_url],
        "grpc_replicas": [triton.grpc_url],
        "signature": SIGNATURE,
    }
    # A public LLM endpoint whose backend is never reached: prompts past its context are refused first.
    backend = {"id": "chat", "kind": "triton", "urls": ["http://llm-backend.example:8000"], "model": "chat__v1__llm"}
    chat = {
        "name": "chat",
        "auth": {"public": True},
        "context_length": 4096,
        "variants": [{"name": "v1", "model_version": "1", "role": "stable", "weight_bp": 10000, "backends": [backend]}],
    }
    table = {
        "version": "abuse-1",
        "endpoints": [{"name": "ctr", "timeout_ms": 5000, "auth": {"public": True}, "variants": [stable]}],
        "llm_endpoints": [chat],
    }
    routes = work / "routes.json"
    routes.write_text(json.dumps(table))
    grpc_port = free_port()
    try:
        proc, port = start_gateway(routes, work, GATEWAY_GRPC_PORT=str(grpc_port), **gateway_env)
    except Exception:
        triton.stop(timeout=0.05)
        raise
    favour(proc.pid)  # the tenant's side (favour); the abusers run niced (harness/abusers.py)
    favour(triton.process.pid)
    return Stack(work, triton, proc, port, grpc_port)


# --- the honest tenant ------------------------------------------------------------------------
def _quantile_ms(seconds: list[float], p: float) -> float | None:
    if not seconds:
        return None
    ordered = sorted(seconds)
    return 1000 * ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def summary(results: list, witness: list[float] = ()) -> dict:
    """Success rate and latency quantiles of [(ok, seconds)], and the host witness' quantiles
    (seconds of the same requests sent straight to tritonserver at the same moments) when given."""
    if not results:
        return {"n": 0, "success_rate": 0.0, "p50_ms": None, "p99_ms": None}
    lat = [s for _, s in results]
    out = {
        "n": len(results),
        "success_rate": sum(1 for ok, _ in results if ok) / len(results),
        "p50_ms": _quantile_ms(lat, 0.5),
        "p99_ms": _quantile_ms(lat, 0.99),
    }
    if witness:
        out |= {"host_p50_ms": _quantile_ms(list(witness), 0.5), "host_p99_ms": _quantile_ms(list(witness), 0.99)}
    return out


class Honest:
    """A second tenant calling `ctr` all along over HTTP (keep-alive, and a new connection every
    `fresh_every` requests so the connection slots are exercised too) or gRPC, in a process of
    its own (so an abuser in the caller's process does not slow it through the GIL), each request
    followed by the same request straight to tritonserver (the host witness, module docstring;
    `witness=False` leaves it out): each request a line (start, ok, seconds, error, witness
    seconds or -) in a file; `mark()` is a time, `since(mark)` the summary of the requests that
    started after it."""

    def __init__(
        self, stack: Stack, *, protocol: str = "http", pause_s: float = 0.005, fresh_every: int = 10, witness=True
    ):
        self.stack, self.protocol, self.pause_s, self.fresh_every = stack, protocol, pause_s, fresh_every
        self.witness = witness
        self.log = stack.work / f"honest-{protocol}-{time.monotonic_ns()}.log"
        self.proc = None
        self.stop_event = None

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")  # not fork: this process has grpc's threads
        self.stop_event = context.Event()
        direct = (self.stack.triton.http_url, self.stack.triton.grpc_url) if self.witness else None
        args = (self.stack.url, self.stack.grpc_target, self.protocol, self.pause_s, self.fresh_every, str(self.log))
        self.proc = context.Process(target=_honest_main, args=(*args, direct, self.stop_event), daemon=True)
        self.proc.start()
        favour(self.proc.pid)
        deadline = time.monotonic() + 60
        while not self._lines() and time.monotonic() < deadline:
            time.sleep(0.05)

    def _lines(self) -> list[list[str]]:
        try:
            text = self.log.read_text()
        except FileNotFoundError:
            return []
        return [line.split() for line in text.splitlines() if line.count(" ") == 4]

    def mark(self) -> float:
        return time.monotonic()

    def since(self, mark: float) -> dict:
        lines = [line for line in self._lines() if float(line[0]) >= mark]
        witness = [float(w) for *_, w in lines if w != "-"]
        return summary([(ok == "1", float(s)) for _, ok, s, _, _ in lines], witness)

    @property
    def errors(self) -> set[str]:
        return {error for _, ok, _, error, _ in self._lines() if ok != "1"}

    def finish(self) -> None:
        if self.proc is not None:
            self.stop_event.set()
            self.proc.join(15)
            if self.proc.is_alive():
                self.proc.kill()


def _honest_main(url, grpc_target, protocol, pause_s, fresh_every, log, direct, stop_event) -> None:
    call = _grpc_caller(grpc_target) if protocol == "grpc" else _http_caller(url, fresh_every)
    witness = None
    if direct is not None:  # the same protocol and connection habits, straight to tritonserver
        http_url, grpc_url = direct
        witness = _grpc_caller(grpc_url, MODEL) if protocol == "grpc" else _http_caller(http_url, fresh_every, MODEL)
    with open(log, "a", buffering=1) as out:
        while not stop_event.is_set():
            t0 = time.monotonic()
            started = time.perf_counter()
            error = call()
            seconds = time.perf_counter() - started
            host = "-"
            if witness is not None:
                started = time.perf_counter()
                host = "-" if witness() else f"{time.perf_counter() - started:.6f}"
            out.write(f"{t0:.6f} {0 if error else 1} {seconds:.6f} {error or '-'} {host}\n")
            time.sleep(pause_s)


def _http_caller(url: str, fresh_every: int, model: str = "ctr"):
    body, state = infer_body(), {"session": None, "n": 0}
    url = f"{url}/v2/models/{model}/infer"

    def call():
        if state["session"] is None or state["n"] % fresh_every == 0:
            if state["session"] is not None:
                state["session"].close()
            state["session"] = requests.Session()
        state["n"] += 1
        try:
            status = state["session"].post(url, data=body, timeout=10).status_code
        except requests.RequestException as exc:
            state["session"] = None
            return type(exc).__name__
        return None if status == 200 else str(status)

    return call


def _grpc_caller(target: str, model: str = "ctr"):
    request = grpc_request()
    request.model_name = model
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(target))

    def call():
        try:
            stub.ModelInfer(request, timeout=10)
        except grpc.RpcError as exc:
            return str(exc.code()).replace(" ", "_")
        return None

    return call


def grpc_request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="ctr")
    dense = request.inputs.add(name="dense", datatype="FP32", shape=[1, N_DENSE])
    dense.contents.fp32_contents.extend([0.5] * N_DENSE)
    sparse = request.inputs.add(name="sparse", datatype="INT64", shape=[1, N_SPARSE])
    sparse.contents.int64_contents.extend([1] * N_SPARSE)
    return request


# --- the tolerance every case holds the honest tenant to ---------------------------------------
MIN_SUCCESS_RATE = (
    0.99  # of the honest tenant's requests beside the abuse (before the caps: 0 of 239 gRPC, 43 of 148 HTTP)
)
P50_FACTOR, P50_SLACK_MS = 2.0, 5.0  # p50 beside <= 2 x p50 alone + 5 ms (before: 5 -> 179 ms)
P99_FACTOR, P99_SLACK_MS = 4.0, 100.0  # p99 beside <= 4 x p99 alone + 100 ms (before: 1.2-3.0 s)


def harm(alone: dict, beside: dict) -> list[str]:
    """What the abuse did to the honest tenant past the tolerance above (empty: nothing), the
    alone figures raised by what the host witness lost between the windows at the same quantile
    (module docstring; nothing when either window has no witness)."""
    problems = []
    if beside["n"] < max(10, alone["n"] // 10):
        problems.append(f"the honest tenant made {beside['n']} requests beside the abuse ({alone['n']} alone)")
        return problems
    if beside["success_rate"] < MIN_SUCCESS_RATE:
        problems.append(f"success rate {beside['success_rate']:.3f} < {MIN_SUCCESS_RATE}")
    for q, factor, slack in (("p50", P50_FACTOR, P50_SLACK_MS), ("p99", P99_FACTOR, P99_SLACK_MS)):
        host = host_delay_ms(alone, beside, q)
        if beside[f"{q}_ms"] > factor * (alone[f"{q}_ms"] + host) + slack:
            problems.append(
                f"{q} {beside[f'{q}_ms']:.1f} ms > {factor} x ({alone[f'{q}_ms']:.1f} + host {host:.1f}) + {slack} ms"
            )
    return problems


def lost(before: float | None, during: float | None) -> float:
    """What a witness lost between two windows at one quantile (0 when it gained or either
    window has no figure): the delay the host added to every path, the gateway's too."""
    if before is None or during is None:
        return 0.0
    return max(0.0, during - before)


def host_delay_ms(alone: dict, beside: dict, q: str) -> float:
    """What the host witness lost at quantile `q` between the two windows (`lost`)."""
    return lost(alone.get(f"host_{q}_ms"), beside.get(f"host_{q}_ms"))
