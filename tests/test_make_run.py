"""`make run` end to end on the embedded defaults (SQLite, filesystem broker, local
MLflow store under a fresh VAR_DIR): everything comes up, /healthz is 200 naming each
component, the dashboard login works, the README's demo inference answers through the
gateway, the demo experiment is prepared in the background (after /healthz is up), it
stays quiet while idle (no line per periodic task or route poll), and Ctrl-C stops every
process it started (no tritonserver left behind)."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from kernel.tritonserver import free_port

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.integration
IDLE_S = 15


def _demo_curl(gateway_port: int) -> str:
    text = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", text, flags=re.S) if "/v2/models/demo-ctr/infer" in b)
    return block.replace("127.0.0.1:8080", f"127.0.0.1:{gateway_port}").replace("curl -s ", "curl -s -i ", 1)


def _llm_curl(gateway_port: int) -> str:
    """The README's first LLM example, as written, against this run's gateway."""
    text = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", text, flags=re.S) if "/v1/chat/completions" in b)
    return block.replace("localhost:8080", f"127.0.0.1:{gateway_port}")


def _route_table_llm_endpoints(env: dict) -> list[str]:
    """The LLM endpoints of the route table the control plane builds now (its own database)."""
    code = (
        "from deployments.routes import route_table; "
        "print(' '.join(e['name'] for e in route_table().get('llm_endpoints', [])))"
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.stdout.split()


def test_make_run_starts_everything_and_ctrl_c_stops_it(tmp_path):
    port, gateway_port = free_port(), free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "DATABASE_URL",
            "CELERY_BROKER_URL",
            "MLFLOW_TRACKING_URI",
            "ARTIFACT_ROOT",
            "POOLS_DIR",
            "HEALTHZ_TOKEN",
        }
    }
    env.update(VAR_DIR=str(tmp_path / "var"), GATEWAY_PORT=str(gateway_port), PYTHONUNBUFFERED="1")
    log_path = tmp_path / "run.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "run_platform", f"--port={port}"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 180
        health = None
        while time.monotonic() < deadline:
            assert proc.poll() is None, log_path.read_text()[-4000:]
            try:
                health = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                if health.status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.5)
        assert health is not None and health.status_code == 200, log_path.read_text()[-4000:]
        assert health.json() == {"status": "ok"}  # anyone: the status alone (issue 28)
        token = (tmp_path / "var" / "healthz_token").read_text().strip()  # make run's, 0600
        assert (tmp_path / "var" / "healthz_token").stat().st_mode & 0o777 == 0o600
        health = requests.get(
            f"http://127.0.0.1:{port}/healthz", headers={"Authorization": f"Bearer {token}"}, timeout=5
        )
        assert set(health.json()["components"]) == {
            "database",
            "broker",
            "supervisor",
            "worker",
            "beat",
            "pools",
            "gateway",
            "routes",  # the route table the gateway serves is the one desired (issue 21)
        }
        output = log_path.read_text()
        password = re.search(r"login: admin / (\S+)", output).group(1)
        assert (tmp_path / "var" / "admin_password").read_text().strip() == password

        session = requests.Session()
        login_page = session.get(f"http://127.0.0.1:{port}/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page.text).group(1)
        page = session.post(
            f"http://127.0.0.1:{port}/login/",
            data={"username": "admin", "password": password, "csrfmiddlewaretoken": token},
            headers={"Referer": f"http://127.0.0.1:{port}/login/"},
        )
        assert page.status_code == 200 and "demo-ctr" in page.text

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            result = subprocess.run(
                ["bash", "-c", _demo_curl(gateway_port)], capture_output=True, text=True, timeout=10
            )
            if result.stdout.startswith("HTTP/1.1 200"):
                break
            time.sleep(1)
        # v1 answers; once the demo experiment runs, a request without X-User-Id may get its v2 arm
        assert re.search(r"X-Model-Variant: v[12]-onnx-fp32", result.stdout) and '"name":"ctr"' in result.stdout, (
            result.stdout[-2000:]
        )

        # demo-llm (issue 27): the tiny LLM seeded as a public LLM endpoint, in the route table once
        # its Triton generate model is ready in pool demo-cpu
        assert "seed: public LLM endpoint demo-llm" in log_path.read_text(), log_path.read_text()[-4000:]
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            llm_names = _route_table_llm_endpoints(env)
            if "demo-llm" in llm_names:
                break
            time.sleep(2)
        assert "demo-llm" in llm_names, log_path.read_text()[-4000:]
        # ... and the README's curl streams tokens from it through the gateway's OpenAI API
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            result = subprocess.run(["bash", "-c", _llm_curl(gateway_port)], capture_output=True, text=True, timeout=60)
            if "data: [DONE]" in result.stdout:
                break
            time.sleep(1)
        chunks = [line for line in result.stdout.splitlines() if line.startswith("data: {")]
        assert len(chunks) >= 3 and result.stdout.rstrip().endswith("data: [DONE]"), result.stdout[-2000:]
        assert '"chat.completion.chunk"' in chunks[0], chunks[0]

        # the demo experiment: queued by the seed, prepared by the worker once everything is up
        assert "seed: demo experiment v2-vs-v1 queued" in log_path.read_text()
        deadline = time.monotonic() + 180
        while "demo experiment ready" not in (output := log_path.read_text()):
            assert "demo experiment not prepared" not in output and time.monotonic() < deadline, output[-4000:]
            time.sleep(1)

        # quiet by default: idle, the platform prints (almost) nothing, though beat runs
        # tasks every second and the gateway polls its route table ~3 times a second
        before = len(log_path.read_text().splitlines())
        time.sleep(IDLE_S)
        output = log_path.read_text()
        idle = output.splitlines()[before:]
        assert len(idle) <= 3, f"{len(idle)} lines in {IDLE_S} s idle:\n" + "\n".join(idle[:40])
        assert "Sending due task" not in output and "] succeeded in " not in output and "] received" not in output
        assert '"GET /api/v1/gateway/routes' not in output and '"GET /healthz' not in output
        assert "stage benchmark done in" in output  # the meaningful events are still there
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    time.sleep(1)
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes left behind: {left}"
    assert "stopped" in log_path.read_text()
