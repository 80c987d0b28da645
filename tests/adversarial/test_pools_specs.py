"""Red attacks the pool surfaces while blue serves (tests/adversarial/surfaces/pools.py).

Real processes: the web app (live server, real HTTP), a Celery worker and beat, the local
pool supervisor with a real tritonserver, the gateway, and blue's open-loop load through it
at 20 req/s on its own endpoint and pool (the platform's load generator, in a process of
its own). Red's deployer, over HTTP, asks for Kubernetes pools in
the platform's namespace and in blue's, running a foreign image, naming the platform's
Secret and blue's bound one, with resources past any replica, on an unknown driver; patches
blue's pool; binds a Secret (only platform admins may); and uploads LLM archives with a
path out of the directory and with more members than allowed, then one made with
`tar -C dir .` (which loads). Each hostile request is a 4xx naming the field and the rule.

Blue is unharmed, within this tolerance: every one of blue's requests during the 10 s of
attack answers 200, and its p99 stays within twice its own p99 of the 6 s before plus 50 ms
(red's requests reach web, never the gateway or Triton; on this shared 2-core machine web's
CPU still competes with them, hence a bound relative to blue's own baseline). Blue's Kubernetes
pool renders exactly as before, its generation unchanged.
"""

import shutil
import subprocess
import threading
from io import StringIO

import pytest
import requests
from django.core.management import call_command
from rest_framework.authtoken.models import Token

from deployments.models import ServingPool
from deployments.services.pool_secrets import pool_secret_bind
from deployments.services.pools import pool_create
from harness import factories
from harness.closed_loop import ClosedLoop
from harness.load import Load
from registry.factory.tune.measure import LoadClient
from registry.models import ModelVersion, Role, Task
from serving import tritonserver
from tests.conftest import require_service
from tests.registry.llm_archives import hf_files, tar_gz

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]
RATE, BASELINE_S, ATTACK_S = 20.0, 6.0, 10.0


@pytest.fixture
def pools_dir(tmp_path, settings, monkeypatch):
    """Blue's local pool lives under this test's directory; its servers end with the test."""
    path = tmp_path / "pools"
    settings.POOLS_DIR = path
    monkeypatch.setenv("POOLS_DIR", str(path))
    yield path
    for pid, _ in tritonserver.tritonservers_under(path):
        tritonserver.kill_group(pid)


def test_reds_pool_specs_and_archives_are_refused_while_blue_serves(
    live_server, subprocess_env, tmp_path, pools_dir, onnx_path, settings, staff
):
    require_service("postgres", "redis")
    tritonserver.find_binary()
    settings.LLM_MAX_FILES = 20
    red, blue = factories.team("red"), factories.team("blue")
    red_deployer, blue_deployer = factories.user("red-deployer"), factories.user("blue-deployer")
    factories.member(red_deployer, red, Role.DEPLOYER)
    factories.member(blue_deployer, blue, Role.DEPLOYER)
    pool_secret_bind(user=staff, team=blue, namespace="", secret_name="blue-s3")
    blue_k8s = pool_create(
        user=blue_deployer,
        name="blue-k8s",
        team=blue,
        driver="kubernetes",
        model_repository="s3://blue/models",
        repository_secret="blue-s3",
        max_replicas=1,
    )
    before = StringIO()
    call_command("render_pool", "blue-k8s", stdout=before)
    factories.registered_model(red, name="red-chat", task=Task.LLM)

    session = requests.Session()
    session.headers["Authorization"] = f"Token {Token.objects.create(user=red_deployer).key}"
    api = f"{live_server.url}/api/v1"

    def red_pool(**fields):
        body = {"name": "red-k8s", "team": "red", "driver": "kubernetes", "model_repository": "s3://red/m"}
        return session.post(f"{api}/pools/", json={**body, "max_replicas": 1, **fields}, timeout=30)

    def upload(data: bytes, name: str):
        return session.post(f"{api}/models/red-chat/llm-versions/", files={"archive": (name, data)}, timeout=60)

    attacks = [
        ("platform namespace", lambda: red_pool(namespace="modelplane"), 400, "namespace_protected"),
        ("blue's namespace", lambda: red_pool(namespace="modelplane-team-blue"), 400, "namespace_not_allowed"),
        ("foreign image", lambda: red_pool(image="evil.example/steal:1"), 400, "image_not_allowed"),
        ("platform secret", lambda: red_pool(repository_secret="modelplane-secrets"), 400, "secret_platform"),
        ("blue's secret", lambda: red_pool(repository_secret="blue-s3"), 400, "secret_not_bound"),
        ("huge replica", lambda: red_pool(resources={"cpu": "100000"}), 400, "bad_quantity"),
        ("unknown driver", lambda: red_pool(driver="docker"), 400, "invalid_choice"),
        (
            "blue's pool",
            lambda: session.patch(f"{api}/pools/blue-k8s/", json={"image": "evil.example/steal:1"}, timeout=30),
            404,
            "pool_not_found",
        ),
        (
            "bind a secret",
            lambda: session.post(
                f"{api}/pool-secret-bindings/", json={"team": "red", "secret_name": "modelplane-secrets"}, timeout=30
            ),
            403,
            "admin_required",
        ),
        (
            "archive path out",
            lambda: upload(tar_gz(hf_files(extra={"../escape.txt": b"x"})), "m.tar.gz"),
            400,
            "archive_unsafe_path",
        ),
        (
            "archive too many files",
            lambda: upload(tar_gz(hf_files(extra={f"extra-{i}.txt": b"x" for i in range(40)})), "m.tar.gz"),
            400,
            "archive_too_many_files",
        ),
    ]

    wrong = []

    def attack_round() -> None:
        for name, attack, status, code in attacks:
            response = attack()
            json_reply = response.headers.get("Content-Type", "").startswith("application/json")
            body = response.json() if json_reply else {}
            if response.status_code != status or body.get("code") != code:
                wrong.append(f"{name}: {response.status_code} {response.text[:200]}")

    with ClosedLoop(live_server.url, subprocess_env, tmp_path, pools_dir) as loop:
        loop.serve(blue, blue_deployer, onnx_path, pool="blue-cpu", name="blue-ctr")
        # Blue's traffic from a process of its own (harness/loadgen.py): red's requests are
        # served by this test process's live server, whose GIL must not time blue's replies.
        blue_load = LoadClient(
            f"{loop.gateway.url}/v2/models/blue-ctr/infer", [Load("", rate=1).body.encode()], tmp_path / "loadgen"
        )
        try:
            baseline = blue_load.window(mode="open", rate=RATE, seconds=BASELINE_S, warmup=1.0)
            during: dict = {}
            measuring = threading.Thread(
                target=lambda: during.update(blue_load.window(mode="open", rate=RATE, seconds=ATTACK_S, warmup=0.0))
            )
            measuring.start()
            rounds = 0
            while measuring.is_alive() or rounds == 0:  # red attacks for as long as blue is measured
                attack_round()
                rounds += 1
            measuring.join()
        finally:
            blue_load.close()
        # a directory archived as `tar -C dir .` loads (it used to be a 500)
        source = tmp_path / "tiny"
        source.mkdir()
        for name, data in hf_files().items():
            (source / name).write_bytes(data)
        archive = tmp_path / "tiny.tar.gz"
        subprocess.run([shutil.which("tar"), "-C", str(source), "-czf", str(archive), "."], check=True)
        loaded = upload(archive.read_bytes(), "tiny.tar.gz")

    assert not wrong, "\n".join(wrong)
    assert loaded.status_code == 201, loaded.text
    assert ModelVersion.objects.filter(model__name="red-chat").count() == 1
    assert not ServingPool.objects.filter(team=red).exists()
    # Blue: every request answered, latency within its own baseline's bound.
    assert rounds >= 1 and baseline["ok"] >= RATE * BASELINE_S * 0.8 and not baseline["errors"], baseline
    assert during["sent"] >= RATE * ATTACK_S * 0.8 and during["ok"] == during["sent"], during
    print(f"blue p99 {baseline['p99_ms']:.1f} ms before, {during['p99_ms']:.1f} ms during {rounds} rounds of attack")
    assert during["p99_ms"] <= 2 * baseline["p99_ms"] + 50, (baseline["p99_ms"], during["p99_ms"])
    after = StringIO()
    call_command("render_pool", "blue-k8s", stdout=after)
    assert after.getvalue() == before.getvalue()
    assert ServingPool.objects.get(pk=blue_k8s.pk).generation == blue_k8s.generation
