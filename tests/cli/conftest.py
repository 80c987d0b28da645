"""Driving `modelplane` as a child process against a live server (pytest-django's
live_server: real HTTP on a free port, the test's database behind it)."""

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)

    def __str__(self):  # shown by a failing assert
        return f"exit {self.code}\n--- stdout ---\n{self.out[-3000:]}\n--- stderr ---\n{self.err[-3000:]}"


def cli_env(home: Path, **extra) -> dict:
    """The environment of a CLI child: its own HOME (so its config file), no MODELPLANE_* leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELPLANE_") and k != "XDG_CONFIG_HOME"}
    env.update(HOME=str(home), PYTHONUNBUFFERED="1", **extra)
    return env


def run_cli(*args, env: dict, stdin: str | None = None, timeout: float = 60) -> Run:
    """`modelplane ARGS…` (the console script's own entry: python -m modelplane_cli)."""
    proc = subprocess.run(
        [sys.executable, "-m", "modelplane_cli", *map(str, args)],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def popen_cli(*args, env: dict, log: Path) -> subprocess.Popen:
    handle = open(log, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "modelplane_cli", *map(str, args)],
        cwd=ROOT,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
        text=True,
    )
    handle.close()
    return proc


@pytest.fixture
def cli_home(tmp_path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.fixture
def cli_as(live_server, cli_home):
    """cli_as(user)(*args) runs the CLI with MODELPLANE_URL/MODELPLANE_TOKEN for that user."""

    def bind(user, **env_extra):
        token, _ = Token.objects.get_or_create(user=user)
        env = cli_env(cli_home, MODELPLANE_URL=live_server.url, MODELPLANE_TOKEN=token.key, **env_extra)

        def run(*args, stdin=None, timeout=60):
            return run_cli(*args, env=env, stdin=stdin, timeout=timeout)

        run.env = env
        run.token = token.key
        return run

    return bind


def pool_model_state(artifact, state):
    """What the pool supervisor reports once a model is READY on every replica, or unloaded
    (no tritonserver: a pool without processes, as harness/factories.py makes)."""
    from deployments.models import PoolModel, PoolModelState

    PoolModel.objects.filter(artifact=artifact).update(state=state, replica_ready={"r0": state == PoolModelState.READY})


def wait_log(path, needle, proc, timeout=30.0):
    """The text of a child's log once it holds `needle` (an AssertionError if the child ends first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text()
        if needle in text:
            return text
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} not in the watch output (exit {proc.poll()}):\n{path.read_text()}")


@pytest.fixture
def rollout_setup(cli_as, deployer, team_a, artifact_factory):
    """Endpoint `ctr` on pool `cpu-pool` made with the CLI by a deployer: (cli, pool, stable, [3 candidates])."""
    from deployments.models import PoolModelState
    from harness import factories

    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    stable, *candidates = (artifact_factory(team_a) for _ in range(4))
    cli = cli_as(deployer)
    created = cli(
        "endpoint",
        "create",
        "ctr",
        "--pool",
        "cpu-pool",
        "--stable-artifact",
        stable.pk,
        "--slo-p99-ms",
        "200",
        "--slo-error-rate",
        "0.05",
        "--json",
    )
    assert created.code == 0, created
    assert created.json()["stable_artifact"] == stable.pk and created.json()["pool"] == "cpu-pool"
    pool_model_state(stable, PoolModelState.READY)
    return cli, pool, stable, candidates
