"""LLM backends as real processes, the one way tests and benchmarks start them:

- `tiny_llm_dir()`: the project's tiny model (registry/llm/tiny.py), made once per machine
  and code version under TINY_LLM_CACHE or VAR_DIR/llm-cache/ (a few seconds the first time) and reused.
- `TritonLLM`: a real tritonserver serving a model dir through the decoupled python-backend
  adapter (registry/llm/triton.py): `POST {url}/v2/models/{name}/generate_stream`.
- `OpenAIServer`: backend kind (b), a real OpenAI-compatible server on this CPU:
  `transformers serve` (transformers' own server: /v1/chat/completions, /v1/completions,
  /v1/models; streaming and usage) with the model dir preloaded. Its model id is the dir's path.
- `ProviderStandIn`: backend kind (c), a stand-in for an external provider requiring a bearer
  key (harness/llm_provider.py; a fake, since providers are on the internet), with switches
  for 429 / 5xx / a slow first token / connect refused.

Each has start() and stop() and is a context manager; module-scoped fixtures share one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx2
import requests
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from gateway.contracts.outbound_rules import origin_of
from harness.processes import free_port, spawn, stop, wait_for
from registry.llm import tiny
from registry.llm.triton import write_llm_model
from serving.tritonserver import TritonProcess

ROOT = Path(__file__).resolve().parents[1]
TINY_NAME = "tiny__v1__llm"
PROVIDER_MODEL = "provider-tiny"
# Route tables whose openai backends are local processes (stand-ins, `transformers serve`) allow
# loopback for them, as an operator allow-lists the network of internal backends
# (OUTBOUND_ALLOWED_NETWORKS); the platform's own listeners stay refused (gateway/llm/guard.py).
LOOPBACK_RULES = {"allowed_networks": ["127.0.0.0/8"]}


def origins(*urls: str) -> list[str]:
    """The origins of `urls`: what a route table's secret is bound to."""
    return sorted({origin_of(url) for url in urls})


def _var_dir() -> Path:
    return Path(os.environ.get("VAR_DIR", ROOT / "var"))


def tiny_llm_dir(*, seed: int = 7, cache: Path | None = None) -> Path:
    """The tiny model's directory, made on first use (registry/llm/tiny.py's cache): one for
    every test worker (TINY_LLM_CACHE, tests/xdist_workers.py) and for the `make run` a test
    starts, which inherits it."""
    return tiny.cached_tiny_llm(cache or tiny.cache_dir(_var_dir()), seed=seed)


def sse_data(reply):
    """The `data` of each server-sent event of a streamed `requests` reply, until OpenAI's
    `[DONE]`: httpx2's EventSource (what the gateway reads its backends with, gateway/llm/
    backends.py) over the reply's body as it arrives; a reply that is not `text/event-stream`
    raises httpx2.SSEError."""
    response = httpx2.Response(
        reply.status_code,
        headers={"content-type": reply.headers.get("Content-Type", "")},
        content=reply.iter_content(chunk_size=None),  # each read as it arrives (requests has decoded it)
        request=httpx2.Request("POST", reply.url),
    )
    for event in httpx2.EventSource(response):
        if event.data == "[DONE]":
            return
        if event.data:
            yield event.data


class _Started:
    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class TritonLLM(_Started):
    """tritonserver with one LLM model `name` serving `hf_dir` (delays: a slower model)."""

    def __init__(
        self,
        work: Path,
        hf_dir: Path,
        *,
        name: str = TINY_NAME,
        **serving,
    ):
        """`serving`: write_llm_model's settings (delay_first_token_ms, delay_per_token_ms, max_streams...)."""
        self.work, self.hf_dir, self.name, self.serving = Path(work), Path(hf_dir), name, serving
        self.repo = self.work / "repo"
        self.triton: TritonProcess | None = None

    @property
    def url(self) -> str:
        return self.triton.http_url

    @property
    def generate_stream_url(self) -> str:
        return self.generate_url(self.name, stream=True)

    def generate_url(self, name: str, *, stream: bool = True) -> str:
        return f"{self.url}/v2/models/{name}/generate{'_stream' if stream else ''}"

    def add_model(self, name: str, hf_dir: Path | None = None, *, timeout: float = 120.0, **serving) -> str:
        """Write and load another LLM model (e.g. a slower one) into the running server."""
        write_llm_model(self.repo, name, hf_dir or self.hf_dir, **serving)
        self.triton.load(name, timeout=timeout)
        return name

    def add_older_model(self, name: str, without: tuple = ("logprobs", "top_logprobs"), timeout: float = 120.0) -> str:
        """Write and load a model as an older adapter's config had it: without those inputs and
        outputs (Triton refuses a request that sends one: "unexpected inference input")."""
        path = write_llm_model(self.repo, name, self.hf_dir)
        config = text_format.Parse((path / "config.pbtxt").read_text(), mc.ModelConfig())
        for fields in (config.input, config.output):
            kept = [f for f in fields if f.name not in without]
            del fields[:]
            fields.extend(kept)
        (path / "config.pbtxt").write_text(text_format.MessageToString(config))
        self.triton.load(name, timeout=timeout)
        return name

    def start(self, timeout: float = 120.0) -> TritonLLM:
        write_llm_model(self.repo, self.name, self.hf_dir, **self.serving)
        self.triton = TritonProcess(model_repository=self.repo, work_dir=self.work).start()
        try:
            self.triton.wait_live(60)
            self.triton.load(self.name, timeout=timeout)
        except Exception:
            self.triton.stop()
            raise
        return self

    def stop(self) -> None:
        if self.triton is not None:
            self.triton.stop()


class OpenAIServer(_Started):
    """`transformers serve` with `hf_dir` preloaded on 127.0.0.1:{port}; OpenAI API at {url}/v1."""

    def __init__(self, work: Path, hf_dir: Path, *, port: int = 0):
        self.work, self.hf_dir = Path(work), Path(hf_dir)
        self.port = port or free_port()
        self.log = self.work / f"transformers-serve-{self.port}.log"
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def model(self) -> str:
        """The model id requests name (transformers serve calls a local model by its path)."""
        return str(self.hf_dir)

    def start(self, timeout: float = 90.0) -> OpenAIServer:
        self.work.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(self.hf_dir)]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu", "--log-level", "warning"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.proc = spawn(command, env, self.log)
        try:
            wait_for(self._ready, timeout=timeout, what=f"transformers serve on {self.url} (log {self.log})")
        except Exception:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"transformers serve exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
        try:
            return requests.get(f"{self.url}/health", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        stop(self.proc)


class ProviderStandIn(_Started):
    """The external-provider stand-in (harness/llm_provider.py) serving `hf_dir` as `model`,
    requiring `Authorization: Bearer {key}`."""

    def __init__(self, work: Path, hf_dir: Path, *, key: str = "sk-stand-in-key", model: str = PROVIDER_MODEL):
        self.work, self.hf_dir, self.key, self.model = Path(work), Path(hf_dir), key, model
        self.port, self.admin_port = free_port(), free_port()
        self.log = self.work / f"provider-{self.port}.log"
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> ProviderStandIn:
        self.work.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "harness.llm_provider", "--model-dir", str(self.hf_dir), "--model", self.model]
        command += ["--port", str(self.port), "--admin-port", str(self.admin_port)]
        env = {**os.environ, "PROVIDER_API_KEY": self.key, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        self.proc = spawn(command, env, self.log)
        try:
            wait_for(self._ready, timeout=timeout, what=f"provider stand-in on {self.url} (log {self.log})")
        except Exception:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"provider stand-in exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
        try:
            return requests.get(f"http://127.0.0.1:{self.admin_port}/stats", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def control(self, **change) -> dict:
        """status=429|500|200, first_token_delay_ms=N, token_delay_ms=N, listening=False|True (connect refused)."""
        reply = requests.post(f"http://127.0.0.1:{self.admin_port}/control", json=change, timeout=5)
        reply.raise_for_status()
        return reply.json()

    def healthy(self) -> dict:
        """Back to normal: answering, 200s, no delay."""
        return self.control(status=200, first_token_delay_ms=0, token_delay_ms=0, listening=True)

    def stats(self) -> dict:
        return requests.get(f"http://127.0.0.1:{self.admin_port}/stats", timeout=5).json()

    def stop(self) -> None:
        stop(self.proc)
