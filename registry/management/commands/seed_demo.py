"""Demo data for `make run`: team "demo" (admin is its admin) and a small CTR model with
one version, so the dashboard has something to show. Idempotent."""

import tempfile
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from registry import services
from registry.models import RegisteredModel, Role, TeamMembership


class Command(BaseCommand):
    help = "Create the demo team and model (idempotent)."

    def handle(self, *args, **options):
        admin = get_user_model().objects.filter(username="admin").first()
        if admin is None:
            self.stderr.write("no admin user; run `manage.py run_platform` or create one first")
            return
        team = services.team_create(user=admin, name="demo")
        TeamMembership.objects.get_or_create(user=admin, team=team, defaults={"role": Role.ADMIN})
        admin.groups.add(team)
        if RegisteredModel.objects.filter(name="demo-ctr").exists():
            return
        from tests.make_onnx import write  # the same generated tiny CTR ranker the tests use

        model = services.model_create(
            user=admin, name="demo-ctr", team=team, task="ctr",
            description="A tiny CTR ranker (13 dense + 26 hashed sparse features) generated for the demo.",
        )
        with tempfile.TemporaryDirectory() as tmp:
            path = write(Path(tmp) / "demo-ctr.onnx")
            with open(path, "rb") as fh:
                services.version_create_from_upload(
                    user=admin, model=model, filename="demo-ctr.onnx", chunks=iter(lambda: fh.read(1 << 20), b""),
                )
        self.stdout.write("seeded team demo and model demo-ctr v1")
