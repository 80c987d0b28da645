"""Two tenants on one gateway for the LLM adversarial cases (tests/adversarial/test_llm_*.py):
blue, the honest tenant, whose traffic must hold, and red, the abuser.

Blue's traffic: KServe v2 infer requests to blue's tensor endpoint (a real tritonserver model
behind the gateway) and short streamed chats to blue's LLM endpoint (a pool stand-in,
tests/gateway/llm_upstream.py, in a process of its own), sent from a process of its own
(`python -m tests.adversarial.llm_tenants`): the abuser's load in the test process (its
clients, the hostile stand-ins) shares no interpreter with blue's clients or backend, so it
cannot slow blue's measurements by taking the GIL; what it costs blue goes through the gateway,
what is measured. Each reply is recorded as (unix time, kind, HTTP status, seconds; for chats
the time to the first token).

The tolerance every case states and checks with `assert_unharmed`, comparing blue's window
during the attack with blue's window just before it: at least 99% of blue's requests of each
kind succeed; its p50 latency (TTFT for chats) at most 2x the quiet p50 + 10 ms; its p95 at most
3x the quiet p95 + 50 ms. The abuse of the issue took blue to 1 success in 280 and a p50 of
5 -> 179 ms; a check this loose still fails on any of that.

The control gateway. The quiet window comes before the attack, so a host that got busier in
between (other tests' processes on these two cores, the abuser's own client and hostile
backend, which in production run on machines of their own) would read as harm. A second gateway
process (same code, same table, same priority, its own workers and memory) serves blue alone, and
blue's process sends the same tensor requests and chats through it all along ("control-tensor",
"control-chat" records): what the host does to a gateway process and to blue's backends shows
there at the same moments, and the quiet figures a window is held to are raised by what the
control lost between the quiet and the attack windows, at the same quantile, in seconds (as
harness/abuse.py does with its direct path): never a wider factor. A path straight to the
backends was not enough: in three loaded runs blue's chat p95 went 21-27 -> 270 ms through the
attacked gateway while the direct path held (a gateway process short of CPU on a busy host does
the flood's work, about 0.5 CPU-s per 100-call wave per worker, later; quiet, blue's p95 rose
~40 ms). What it cannot tell: CPU the flood takes from the control too, by taking it from the host.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import aiohttp
import requests

from harness.abuse import favour, lost
from harness.gateway import TOKEN, GatewayProcess, RouteServer, start_triton
from harness.processes import spawn, stop, wait_for
from harness.triton_models import behaviour_model, infer_body
from serving.tritonserver import free_port

BLUE_KEY = "sk-blue-honest-tenant-0001"
RED_KEY = "sk-red-abusing-tenant-0001"
SUCCESS_RATE = 0.99
P50_FACTOR, P50_SLACK_S = 2.0, 0.010
P95_FACTOR, P95_SLACK_S = 3.0, 0.050
CHAT = [{"role": "user", "content": "how is the canary doing"}]


def key_doc(kid: str, key: str, team: str, **limits) -> dict:
    return {"id": kid, "sha256": hashlib.sha256(key.encode()).hexdigest(), "team": team, **limits}


def llm_entry(name: str, team: str, backends: list, keys: list, **extra) -> dict:
    variant = {"name": "stable", "model_version": "1", "role": "stable", "weight_bp": 10000, "backends": backends}
    return {"name": name, "team": team, "auth": {"keys": keys}, "variants": [variant], **extra}


def backend(bid: str, kind: str, url: str, model: str, **extra) -> dict:
    return {"id": bid, "kind": kind, "urls": [url], "model": model, **extra}


def blue_table(triton_url: str, blue_llm_url: str) -> dict:
    """Blue's tensor endpoint on tritonserver and its LLM endpoint on a pool stand-in; red's key."""
    variant = {
        "name": "stable",
        "model_version": "1",
        "triton_model": "blue-ctr",
        "role": "stable",
        "weight_bp": 10000,
        "replicas": [triton_url],
    }
    tensor = {"name": "blue-ctr", "team": "blue", "auth": {"keys": ["kb"]}, "variants": [variant]}
    return {
        "version": "adversarial-llm",
        "endpoints": [tensor],
        "keys": [key_doc("kb", BLUE_KEY, "blue"), key_doc("kr", RED_KEY, "red")],
        "secrets": [],
        "llm_endpoints": [llm_entry("blue-chat", "blue", [backend("blue-pool", "triton", blue_llm_url, "b")], ["kb"])],
    }


# --- the stack: tritonserver, blue's pool stand-in, the gateway fed by a route server ----------------
class Stack:
    """Real processes for one test module: tritonserver with blue's tensor model, a pool stand-in
    for blue's LLM endpoint, the gateway (`workers` processes) polling a route server, and the
    control gateway beside it (module docstring)."""

    def __init__(self, work: Path, *, workers: int = 2, **env):
        self.work = work
        repo = work / "repo"
        behaviour_model(repo, "blue-ctr")
        self.triton = start_triton(work, repo, ["blue-ctr"])
        self.blue_pool, self.blue_pool_url = stand_in(work, "pool")
        self.routes = RouteServer().start()
        self.base = blue_table(self.triton.http_url, self.blue_pool_url)
        self.routes.set_table(self.base)
        self.workers = workers
        gateway_env = {
            "GATEWAY_ROUTES_URL": self.routes.url,
            "GATEWAY_TOKEN": TOKEN,
            "GATEWAY_WORKERS": str(workers),
            "GATEWAY_METRICS_OPEN": "1",
            **env,
        }
        self.gateway = GatewayProcess(work, gateway_env).start(timeout=60)
        (work / "control").mkdir(exist_ok=True)
        self.control = GatewayProcess(work / "control", gateway_env).start(timeout=60)
        self.version = 0
        for pid in (self.gateway.proc.pid, self.control.proc.pid, self.triton.process.pid, self.blue_pool.pid):
            favour(pid)

    @property
    def url(self) -> str:
        return self.gateway.url

    def install(self, *, llm_endpoints=(), secrets=(), llm_rules=None, keys=()) -> None:
        """Blue's table plus red's entries; back when every worker serves it."""
        self.version += 1
        doc = json.loads(json.dumps(self.base))
        doc["version"] = f"adversarial-llm-{self.version}"
        doc["llm_endpoints"] += list(llm_endpoints)
        doc["secrets"] = list(secrets)
        replaced = {k["id"] for k in keys}  # a key given again (red's, with limits) replaces the base one
        doc["keys"] = [k for k in doc["keys"] if k["id"] not in replaced] + list(keys)
        if llm_rules is not None:
            doc["llm_rules"] = llm_rules
        self.routes.set_table(doc)
        deadline, seen = time.monotonic() + 20, 0
        while seen < 4 * self.workers:  # consecutive answers with it, from whichever worker took each
            assert time.monotonic() < deadline, "the gateway did not take the table"
            status = requests.get(f"{self.url}/status", timeout=5).json()
            seen = seen + 1 if status["routes"]["version"] == doc["version"] else 0
            time.sleep(0.05)

    def stop(self) -> None:
        self.gateway.stop()
        self.control.stop()
        self.routes.stop()
        stop(self.blue_pool)
        self.triton.stop()


def stand_in(work: Path, name: str):
    """An LLM stand-in (tests/gateway/llm_upstream.py) in a process of its own: (process, URL)."""
    port = free_port()
    proc = spawn(
        [sys.executable, "-m", "tests.gateway.llm_upstream", str(port)], dict(os.environ), work / f"{name}.log"
    )
    wait_for(lambda: _listening(port), timeout=30, what=f"the {name} stand-in")
    return proc, f"http://127.0.0.1:{port}"


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def red_chat(base: str, model: str, *, key: str = RED_KEY, timeout: float = 30, **body) -> tuple[int, dict]:
    """One chat request of red (not streamed unless `body` says): (status, JSON body or {})."""
    payload = {"model": model, "messages": CHAT, "max_tokens": 8, **body}
    reply = requests.post(
        f"{base}/v1/chat/completions", json=payload, headers={"Authorization": f"Bearer {key}"}, timeout=timeout
    )
    try:
        return reply.status_code, reply.json()
    except ValueError:
        return reply.status_code, {}


def red_wave(base: str, model: str, count: int, *, key: str = RED_KEY, **body) -> list[tuple[int, dict]]:
    """`count` concurrent chat requests of red on one event loop: [(status, JSON body or {})].
    One loop, not `count` threads: on two cores the abuser's own client must not be what slows
    blue (a hundred `requests` threads took five seconds of CPU for 400 small replies, more
    than the gateway spent on the whole flood); what red costs blue must go through the gateway."""
    payload = {"model": model, "messages": CHAT, "max_tokens": 8, **body}

    async def one(session) -> tuple[int, dict]:
        async with session.post(f"{base}/v1/chat/completions", json=payload) as reply:
            raw = await reply.read()
            try:
                return reply.status, json.loads(raw)
            except ValueError:
                return reply.status, {}

    async def wave() -> list[tuple[int, dict]]:
        timeout = aiohttp.ClientTimeout(total=30)
        connector = aiohttp.TCPConnector(limit=count, force_close=True)
        headers = {"Authorization": f"Bearer {key}"}
        async with aiohttp.ClientSession(timeout=timeout, connector=connector, headers=headers) as session:
            return list(await asyncio.gather(*(one(session) for _ in range(count))))

    return asyncio.run(wave())


# --- blue's traffic, in a process of its own -------------------------------------------------------
class BlueTraffic:
    """Blue's requests from a child process until `stop`; `records` then holds every reply."""

    def __init__(self, gateway_url: str, work: Path, control_url: str = ""):
        """`control_url`: the control gateway, blue's traffic through it too (module docstring)."""
        self.out = work / f"blue-{time.monotonic_ns()}.jsonl"
        self.proc = spawn(
            [sys.executable, "-m", "tests.adversarial.llm_tenants", gateway_url, str(self.out), control_url],
            dict(os.environ),
            work / "blue.log",
        )
        self.records: list[tuple] = []
        favour(self.proc.pid)

    def wait_warm(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.out.exists() and sum(1 for _ in self.out.open()) >= 20:
                return
            time.sleep(0.2)
        raise TimeoutError("blue's traffic did not start")

    def stop(self) -> list[tuple]:
        stop(self.proc)  # each reply was written and flushed as it came
        self.records = [tuple(json.loads(line)) for line in self.out.read_text().splitlines() if line]
        return self.records


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def window(records, start: float, end: float, kind: str) -> dict:
    return windows(records, [(start, end)], kind)


def windows(records, spans: list[tuple[float, float]], kind: str) -> dict:
    """Blue's figures over the union of `spans`."""
    rows = [r for r in records if r[1] == kind and any(start <= r[0] < end for start, end in spans)]
    ok = [r[3] for r in rows if r[2] == 200]
    return {
        "n": len(rows),
        "success": len(ok) / len(rows) if rows else 0.0,
        "p50": _percentile(ok, 0.5) if ok else float("inf"),
        "p95": _percentile(ok, 0.95) if ok else float("inf"),
        "statuses": sorted({r[2] for r in rows}),
    }


def assert_unharmed_interleaved(records, quiet: list, attack: list, kinds=("tensor", "chat")):
    """As assert_unharmed, over attack windows interleaved with quiet ones (each wave of the
    attack follows a quiet window of its own): what the host does over seconds (other tests'
    processes on these two cores) falls on both alike, as the judge compares arms per window."""
    for kind in kinds:
        before, during = windows(records, quiet, kind), windows(records, attack, kind)
        assert before["n"] >= 10 and during["n"] >= 10, (kind, before, during)
        witness = WITNESS[kind]
        _held(kind, before, during, control_figures(records, quiet, witness), control_figures(records, attack, witness))


def assert_unharmed(records, quiet: tuple[float, float], attack: tuple[float, float], kinds=("tensor", "chat")):
    """Blue's success and latency during `attack` against the `quiet` window before it (the
    module docstring's tolerance)."""
    for kind in kinds:
        before, during = window(records, *quiet, kind), window(records, *attack, kind)
        witness = WITNESS[kind]
        _held(
            kind,
            before,
            during,
            control_figures(records, [quiet], witness),
            control_figures(records, [attack], witness),
        )


WITNESS = {"tensor": "control-tensor", "chat": "control-chat"}  # each kind through the control gateway


def control_figures(records, spans: list[tuple[float, float]], witness: str) -> dict | None:
    """The control's figures over `spans` (None when there are too few to tell)."""
    figures = windows(records, spans, witness)
    return figures if figures["success"] > 0 and figures["n"] >= 10 else None


def _held(kind: str, before: dict, during: dict, host_before: dict | None, host_during: dict | None) -> None:
    assert before["n"] >= 10 and during["n"] >= 10, (kind, before, during)
    assert during["success"] >= SUCCESS_RATE, (kind, before, during)
    host_before, host_during = host_before or {}, host_during or {}
    delay = {q: lost(host_before.get(q), host_during.get(q)) for q in ("p50", "p95")}
    why = (kind, before, during, {"control before": host_before, "control during": host_during})
    assert during["p50"] <= P50_FACTOR * (before["p50"] + delay["p50"]) + P50_SLACK_S, why
    assert during["p95"] <= P95_FACTOR * (before["p95"] + delay["p95"]) + P95_SLACK_S, why


def _tensor_loop(gateway: str, out, lock, stop: threading.Event, kind: str = "tensor") -> None:
    """Blue's tensor requests through `gateway` (recorded as `kind`)."""
    session = requests.Session()
    body = infer_body(1)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {BLUE_KEY}"}
    while not stop.is_set():
        started = time.monotonic()
        try:
            status = session.post(f"{gateway}/v2/models/blue-ctr/infer", data=body, headers=headers, timeout=10)
            status = status.status_code
        except requests.RequestException:
            status = 0
        _record(out, lock, kind, status, time.monotonic() - started)
        time.sleep(0.03)


def _chat_loop(gateway: str, out, lock, stop: threading.Event, kind: str = "chat") -> None:
    """Blue's streamed chats through `gateway` (recorded as `kind`); the time to the first token."""
    session = requests.Session()
    body = {"model": "blue-chat", "messages": CHAT, "max_tokens": 4, "stream": True}
    headers = {"Authorization": f"Bearer {BLUE_KEY}"}
    while not stop.is_set():
        started = time.monotonic()
        status, first = 0, None
        try:
            with session.post(
                f"{gateway}/v1/chat/completions", json=body, headers=headers, stream=True, timeout=10
            ) as r:
                status = r.status_code
                for chunk in r.iter_content(chunk_size=None):
                    if first is None and b"content" in chunk:
                        first = time.monotonic() - started
                    if b"[DONE]" in chunk:
                        break
        except requests.RequestException:
            status = 0
        ok = status == 200 and first is not None
        _record(out, lock, kind, status if ok or status != 200 else 502, first or time.monotonic() - started)
        time.sleep(0.05)


def _record(out, lock, kind: str, status: int, seconds: float) -> None:
    with lock:
        out.write(json.dumps([time.time(), kind, status, round(seconds, 6)]) + "\n")
        out.flush()


def main(gateway: str, path: str, control: str = "") -> None:
    """Until the test stops this process (SIGTERM)."""
    done, lock = threading.Event(), threading.Lock()
    with open(path, "w") as out:
        loops = [_tensor_loop, _tensor_loop, _chat_loop]
        threads = [threading.Thread(target=f, args=(gateway, out, lock, done), daemon=True) for f in loops]
        if control:
            for loop, kind in ((_tensor_loop, "control-tensor"), (_chat_loop, "control-chat")):
                threads.append(threading.Thread(target=loop, args=(control, out, lock, done, kind), daemon=True))
        for thread in threads:
            thread.start()
        done.wait()


if __name__ == "__main__":
    main(*sys.argv[1:4])
