"""An LLM version registered from a model directory archive, through the pool's own load
path (its artifact's Triton generate model, the pool's config override, the local driver
publishing it to a real tritonserver), streams tokens through Triton's generate
extension: what the route table's triton backend then points the gateway at.

The model is the project's tiny generative model (registry/llm/tiny.py, made once per code
version by harness/llm.py)."""

import io
import json
import tarfile

import pytest
import requests

from deployments.drivers.base import PoolSpec
from deployments.drivers.local import LocalDriver
from deployments.services.reconcile import model_dir_for
from harness import factories
from harness import llm as harness_llm
from registry.models import Task
from registry.services import llm as llm_services
from serving import tritonserver

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def test_an_uploaded_model_directory_streams_tokens_from_a_pool(alice, team_a, tmp_path):
    try:
        tritonserver.find_binary()
    except tritonserver.TritonNotAvailable as exc:
        pytest.skip(str(exc))
    hf_dir = harness_llm.tiny_llm_dir()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(hf_dir, arcname="tiny")
    model = factories.registered_model(team_a, name="tiny-chat", task=Task.LLM)
    version = llm_services.llm_version_create_from_archive(
        user=alice, model=model, filename="tiny.tar.gz", chunks=iter([buffer.getvalue()])
    )
    artifact = version.artifacts.get()
    assert version.llm.context_length == 256 and version.llm.tokenizer["chat_template"]

    pool_row = factories.pool(team_a, "llm-itest", max_queue_size=8, queue_timeout_ms=1000)
    model_dir = model_dir_for(pool_row, artifact)  # what the pool's load task hands the driver
    driver = LocalDriver(
        PoolSpec(name="llm-itest", replicas=1, model_repository=str(tmp_path / "models"), max_queue_size=8)
    )
    try:
        driver.ensure()
        assert driver.load(model_dir, timeout=180) == {"r0": True}
        (replica,) = driver.replicas()
        messages = [{"role": "user", "content": "what does the gateway do?"}]
        reply = requests.post(
            f"{replica.http_url.rstrip('/')}/v2/models/{model_dir.name}/generate_stream",
            json={"messages_json": json.dumps(messages), "max_tokens": 24},
            stream=True,
            timeout=60,
        )
        assert reply.status_code == 200, reply.text[:500]
        events = [json.loads(data) for data in harness_llm.sse_data(reply)]
    finally:
        driver.delete()
    *tokens, final = events
    assert len(tokens) >= 3 and all(e["text_output"] for e in tokens)
    assert final["completion_tokens"] >= len(tokens) and final["prompt_tokens"] > 0
    assert model_dir.name == "tiny-chat__v1__llm"
