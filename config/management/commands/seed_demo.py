"""Demo data for `make run` (idempotent): team "demo" (admin is its admin), a small CTR
model with one version built into servable artifacts (onnx-fp32, onnx-int8), a local
serving pool with one replica, and the endpoint "demo-ctr" serving the fp32 variant —
so the dashboard, the gateway and a first rollout (fp32 → int8) work at once."""

import tempfile
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from registry.services.catalog import model_create, version_create_from_upload
from registry.services.teams import team_create
from registry.models import ArtifactStatus, RegisteredModel, Role, TeamMembership


class Command(BaseCommand):
    help = "Create the demo team, model, built artifacts, pool and endpoint (idempotent)."

    def handle(self, *args, **options):
        admin = get_user_model().objects.filter(username="admin").first()
        if admin is None:
            self.stderr.write("no admin user; run `manage.py run_platform` or create one first")
            return
        team = team_create(user=admin, name="demo")
        TeamMembership.objects.get_or_create(user=admin, team=team, defaults={"role": Role.ADMIN})
        admin.groups.add(team)
        model = RegisteredModel.objects.filter(name="demo-ctr").first() or self._model(admin, team)
        version = model.versions.order_by("version").first()
        artifacts = {a.variant: a for a in version.artifacts.filter(status=ArtifactStatus.SERVABLE)}
        if "onnx-fp32" not in artifacts:
            artifacts = self._build(admin, version)
        self._serve(admin, team, artifacts.get("onnx-fp32"))

    def _model(self, admin, team):
        from tests.make_onnx import write  # the same generated tiny CTR ranker the tests use

        model = model_create(
            user=admin, name="demo-ctr", team=team, task="ctr",
            description="A tiny CTR ranker (13 dense + 26 hashed sparse features) generated for the demo.",
        )
        with tempfile.TemporaryDirectory() as tmp:
            path = write(Path(tmp) / "demo-ctr.onnx")
            with open(path, "rb") as fh:
                version_create_from_upload(user=admin, model=model, filename="demo-ctr.onnx",
                                                    chunks=iter(lambda: fh.read(1 << 20), b""))
        self.stdout.write("seed: registered model demo-ctr v1")
        return model

    def _build(self, admin, version) -> dict:
        from registry.factory import runner
        from registry.services.builds import build_start

        build, _ = build_start(user=admin, version=version, targets=["onnx-fp32", "onnx-int8"], idempotency_key="demo-seed")
        self.stdout.write(f"seed: building demo-ctr v1 (build #{build.pk}: canonicalize → optimize → variants → validate → benchmark → package)…")
        outcome = runner.run(build.pk, owner="seed_demo")
        self.stdout.write(f"seed: build #{build.pk} {outcome}")
        return {a.variant: a for a in version.artifacts.filter(status=ArtifactStatus.SERVABLE)}

    def _serve(self, admin, team, artifact) -> None:
        from deployments.services import endpoints as endpoint_services
        from deployments.services import pools as pool_services
        from deployments.models import Endpoint, ServingPool

        if artifact is None or Endpoint.objects.filter(name="demo-ctr").exists():
            return
        pool = ServingPool.objects.filter(name="demo-cpu").first() or pool_services.pool_create(
            user=admin, name="demo-cpu", team=team, replicas=1, cost_per_replica_hour="0.10"
        )
        endpoint_services.endpoint_create(user=admin, name="demo-ctr", pool=pool, stable_artifact=artifact, slo_p99_ms=50)
        self.stdout.write("seed: pool demo-cpu (1 local tritonserver replica) and endpoint demo-ctr → demo-ctr v1 onnx-fp32")
