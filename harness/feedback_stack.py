"""Teams' online experiments served for real: the stack the feedback tests and the adversarial
feedback cases attack, started one way.

The rows are the control plane's own (a pool per team whose replica is a real tritonserver,
an endpoint, a running experiment of its stable against a candidate, an inference key), and
the gateway (`python -m gateway`, one worker) reads the control plane's own route table
(deployments.routes.route_table), written to a file it watches: `refresh()` writes it again
after a change (an experiment stopped). Exposures and feedback go through the real Redis
streams (EXPOSURE_STREAM_URL) to whatever ingest the test runs (in-process, or a Celery worker).

    stack = FeedbackStack(tmp_path, onnx_path, stream_url)
    red = stack.add(team_a, deployer, "red-ctr", public=True, feedback_tokens=True)
    blue = stack.add(team_b, bea, "blue-ctr", public=False)
    with stack:
        reply = stack.infer(red, user="u1")
        stack.feedback(red, [{"event_id": "e1", "type": "click", "exposure_token": reply.headers[...]}])
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import requests

from harness import factories
from harness.gateway import METRICS_TOKEN, start_gateway, start_triton, stop_gateway
from harness.triton_models import ctr_model, infer_body


@dataclass
class Tenant:
    name: str  # the endpoint's
    team: object
    user: object
    endpoint: object
    experiment: object
    key: str  # an inference key of the team (its secret)
    artifacts: list = field(default_factory=list)  # stable first
    pool: object = None
    experiment_fields: dict = field(default_factory=dict)
    key_id: str = ""  # its id in the route table (the gateway's labels and stream names)


class FeedbackStack:
    def __init__(self, work: Path, onnx_path: Path, stream_url: str, *, gateway_env: dict | None = None):
        self.work, self.onnx_path, self.stream_url = work, onnx_path, stream_url
        self.gateway_env = gateway_env or {}
        self.tenants: list[Tenant] = []
        self.triton = self.proc = None
        self.url = ""
        self.routes = work / "routes.json"
        self.session = requests.Session()

    def add(self, team, user, name: str, *, public: bool, feedback_tokens: bool = False, **experiment_fields) -> Tenant:
        """Rows of one team's endpoint `name` (before `start`): its pool, stable and candidate, key."""
        from deployments.services.keys import inference_key_create

        pool = factories.pool(team, name=f"{name}-pool", replicas=1)
        stable = factories.artifact(team, self.onnx_path, self.work, model_name=name)
        candidate = factories.artifact(team, self.onnx_path, self.work, model_name=name)
        endpoint = factories.endpoint(pool, stable, name=name, public=public)
        key, secret = inference_key_create(user=user, team=team, name=f"{name}-key")
        fields = {"feedback_tokens": feedback_tokens, **experiment_fields}
        tenant = Tenant(name, team, user, endpoint, None, secret, [stable, candidate], pool, fields, key.gateway_id)
        self.tenants.append(tenant)
        return tenant

    def start(self) -> FeedbackStack:
        from experiments.services import online
        from registry.names import triton_name

        repo = self.work / "repo"
        names = []
        for i, tenant in enumerate(self.tenants):
            for j, artifact in enumerate(tenant.artifacts):  # the candidate ranks with other weights
                ctr_model(repo, triton_name(artifact), seed=7 + 10 * i + j)
                names.append(triton_name(artifact))
        self.triton = start_triton(self.work / "triton", repo, names)
        for tenant in self.tenants:
            factories.replica(tenant.pool, "r0", http_url=self.triton.http_url)
            for artifact in tenant.artifacts:
                factories.pool_model_ready(tenant.pool, artifact)
            experiment = online.experiment_create(
                user=tenant.user,
                endpoint=tenant.endpoint,
                name=f"{tenant.name}-exp",
                candidates=tenant.artifacts[1:],
                **tenant.experiment_fields,
            )
            tenant.experiment = online.experiment_start(user=tenant.user, experiment=experiment)
        self.refresh()
        env = {"GATEWAY_EXPOSURE_STREAM_URL": self.stream_url, "GATEWAY_RECEIVE_TIMEOUT_S": "10", **self.gateway_env}
        self.proc, port = start_gateway(self.routes, self.work, **env)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def refresh(self) -> None:
        """Write the control plane's route table for the gateway (it reloads a changed file)."""
        from deployments.routes import route_table

        tmp = self.routes.with_suffix(".tmp")
        tmp.write_text(json.dumps(route_table()))
        tmp.replace(self.routes)

    def stop(self) -> None:
        self.session.close()
        if self.proc is not None:
            stop_gateway(self.proc)
        if self.triton is not None:
            self.triton.stop()

    def __enter__(self) -> FeedbackStack:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- what clients do ----------------------------------------------------------------------
    def infer(
        self, tenant: Tenant, *, user: str, key: bool | None = None, headers: dict | None = None, seed=0, session=None
    ):
        """One ranking request as `user` (the sticky X-User-Id): with the team's key when the
        endpoint is not public (or `key` says so)."""
        sent = {"X-User-Id": user, "Content-Type": "application/json", **(headers or {})}
        if key or (key is None and not tenant.endpoint.public):
            sent["Authorization"] = f"Bearer {tenant.key}"
        return (session or self.session).post(
            f"{self.url}/v2/models/{tenant.name}/infer", data=infer_body(seed=seed), headers=sent, timeout=10
        )

    def feedback(self, tenant: Tenant, events: list | bytes, *, key: bool = True, session=None):
        """POST /v2/feedback for the tenant's endpoint, with its key or anonymous; `events` as a
        list, or a whole body already serialized (a flood's, so the client spends no CPU on it)."""
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {tenant.key}"} if key else {})}
        body = events if isinstance(events, bytes) else json.dumps({"endpoint": tenant.name, "events": events})
        return (session or self.session).post(f"{self.url}/v2/feedback", data=body, headers=headers, timeout=30)

    def metrics(self) -> str:
        return self.session.get(
            f"{self.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10
        ).text
