"""Demo data for `make run` (idempotent): team "demo" (admin is its admin), a small CTR
model with one version built into servable artifacts (onnx-fp32, onnx-int8), a local
serving pool with one replica, and the public endpoint "demo-ctr" serving the fp32 variant —
so the dashboard, the gateway and a first rollout (fp32 → int8) work at once. Then the
public LLM endpoint "demo-llm": the project's tiny generative model
(registry.llm.tiny, trained here in seconds) registered as an LLM version from its model
directory and loaded into the same pool, so the README's first `curl .../v1/chat/completions`
streams tokens. Last it
enqueues the demo experiment (config/demo.py: train demo-ctr v2, build it, run it against
v1), which a worker prepares in the background once `make run` is up: the dashboard does
not wait for it.

It seeds two apps, so it lives in the project (config), and like any caller it reads
through their selectors and writes through their services."""

import tarfile
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from deployments.selectors.pools import pool_list
from deployments.selectors.rollouts import endpoint_list
from deployments.services.endpoints import endpoint_create
from deployments.services.pools import pool_create
from registry.factory import runner
from registry.models import ArtifactStatus, BuildStatus, Role
from registry.selectors.builds import artifact_list, build_get
from registry.selectors.catalog import model_list, version_list
from registry.services.builds import build_start
from registry.services.catalog import model_create, version_create_from_upload
from registry.services.teams import membership_set, team_create

LLM_DEMO = "demo-llm"


class Command(BaseCommand):
    help = "Create the demo team, model, built artifacts, pool and endpoint (idempotent); queue the demo experiment."

    def add_arguments(self, parser):
        parser.add_argument(
            "--no-experiment", action="store_true", help="Do not prepare the demo experiment (v2 vs v1)."
        )
        parser.add_argument("--no-llm", action="store_true", help=f"Do not seed the LLM endpoint {LLM_DEMO}.")

    def handle(self, *args, **options):
        admin = get_user_model().objects.filter(username="admin").first()
        if admin is None:
            self.stderr.write("no admin user; run `manage.py run_platform` or create one first")
            return
        team = team_create(user=admin, name="demo")
        if not admin.groups.filter(pk=team.pk).exists():
            membership_set(user=admin, team=team, member=admin, role=Role.ADMIN)
        model = model_list(user=admin).filter(name="demo-ctr").first() or self._model(admin, team)
        version = version_list(user=admin, model=model).order_by("version").first()
        artifacts = self._servable(admin, version)
        if "onnx-fp32" not in artifacts:
            artifacts = self._build(admin, version)
        self._serve(admin, team, artifacts.get("onnx-fp32"))
        if not options["no_llm"]:
            self._serve_llm(admin, team)
        if not options["no_experiment"] and endpoint_list(user=admin).filter(name="demo-ctr").exists():
            self._enqueue_experiment()

    def _enqueue_experiment(self) -> None:
        from config.tasks import DEMO_QUEUE, demo_experiment

        demo_experiment.apply_async(queue=DEMO_QUEUE)
        self.stdout.write(
            "seed: demo experiment v2-vs-v1 queued (a worker trains demo-ctr v2, builds it and starts it "
            "against v1 in the background; the log says when it is ready)"
        )

    def _model(self, admin, team):
        from harness.onnx import write  # the same generated tiny CTR ranker the tests use

        model = model_create(
            user=admin,
            name="demo-ctr",
            team=team,
            task="ctr",
            description="A tiny CTR ranker (13 dense + 26 hashed sparse features) generated for the demo.",
        )
        with tempfile.TemporaryDirectory() as tmp:
            path = write(Path(tmp) / "demo-ctr.onnx")
            with open(path, "rb") as fh:
                version_create_from_upload(
                    user=admin, model=model, filename="demo-ctr.onnx", chunks=iter(lambda: fh.read(1 << 20), b"")
                )
        self.stdout.write("seed: registered model demo-ctr v1")
        return model

    @staticmethod
    def _servable(admin, version) -> dict:
        return {a.variant: a for a in artifact_list(user=admin, version=version).filter(status=ArtifactStatus.SERVABLE)}

    def _build(self, admin, version) -> dict:
        build, _ = build_start(
            user=admin, version=version, targets=["onnx-fp32", "onnx-int8"], idempotency_key="demo-seed"
        )
        self.stdout.write(
            f"seed: building demo-ctr v1 (build #{build.pk}: canonicalize → optimize → variants → validate → benchmark → package)…"
        )
        outcome = runner.run(build.pk, owner="seed_demo")
        if outcome == "nothing-to-do":  # make run's builder, started beside the seed, took it first
            self.stdout.write(f"seed: waiting for the builder to finish build #{build.pk}…")
            outcome = self._finished(admin, build.pk)
        self.stdout.write(f"seed: build #{build.pk} {outcome}")
        return self._servable(admin, version)

    @staticmethod
    def _finished(admin, build_id: int, timeout_s: float = 1800.0) -> str:
        """The status of build `build_id` once it is terminal (another worker runs it)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            build = build_get(user=admin, build_id=build_id)
            if build.status in BuildStatus.terminal():
                return build.status
            time.sleep(1.0)
        return f"not finished after {timeout_s:.0f} s"

    def _serve(self, admin, team, artifact) -> None:
        if artifact is None or endpoint_list(user=admin).filter(name="demo-ctr").exists():
            return
        pool = pool_list(user=admin).filter(name="demo-cpu").first() or pool_create(
            user=admin, name="demo-cpu", team=team, replicas=1, cost_per_replica_hour="0.10"
        )
        # public: the README's curl works without a key (other endpoints need inference keys)
        # latency_margin 3.0 is the demo's product choice, not an allowance for noise (the judge
        # compares latency window by window, so a busy host is no regression at the defaults): the
        # demo experiment's candidate is a DCN, the stable a linear layer, so v2 really computes
        # more (p95 3.9 ms against 1.5 ms on 2 busy cores) and the default margin (20-30 %) would
        # rightly call it slower; up to four times v1's latency, far inside the 50 ms p99 SLO, is
        # no harm here (the SLO and error guardrails still apply)
        endpoint_create(
            user=admin,
            name="demo-ctr",
            pool=pool,
            stable_artifact=artifact,
            slo_p99_ms=50,
            latency_margin=3.0,
            public=True,
            capture_share=1.0,  # every request's inputs logged with its exposure: the README's dataset and v3
        )
        self.stdout.write(
            "seed: pool demo-cpu (1 local tritonserver replica) and public endpoint demo-ctr → demo-ctr v1 onnx-fp32"
        )

    def _serve_llm(self, admin, team) -> None:
        """demo-llm: the tiny model's directory as an LLM version (kind: model directory), its
        Triton generate model loaded into pool demo-cpu, a public LLM endpoint."""
        if endpoint_list(user=admin).filter(name=LLM_DEMO).exists():
            return
        pool = pool_list(user=admin).filter(name="demo-cpu").first()
        if pool is None:
            return
        try:
            from registry.llm.tiny import cache_dir, cached_tiny_llm, made, tiny_llm_path
        except ModuleNotFoundError as exc:  # a checkout without the LLM model code
            self.stdout.write(f"seed: {LLM_DEMO} skipped ({exc})")
            return
        from registry.services.llm import llm_version_create_from_archive

        model = model_list(user=admin).filter(name=LLM_DEMO).first() or model_create(
            user=admin,
            name=LLM_DEMO,
            team=team,
            task="llm",
            description="The project's tiny generative model (Llama architecture, ~100k parameters, trained in seconds).",
        )
        version = version_list(user=admin, model=model).order_by("version").first()
        if version is None:
            cache = cache_dir(settings.VAR_DIR)  # made once per code version, and reused
            if made(tiny_llm_path(cache)):
                self.stdout.write(f"seed: the tiny LLM {LLM_DEMO} as made before ({tiny_llm_path(cache)})")
            else:
                self.stdout.write(
                    f"seed: training the tiny LLM {LLM_DEMO} (a few seconds on a free core; kept in {cache})…"
                )
            with tempfile.TemporaryDirectory() as tmp:
                hf_dir = cached_tiny_llm(cache)
                archive = Path(tmp) / f"{LLM_DEMO}.tar.gz"
                with tarfile.open(archive, "w:gz") as tar:
                    tar.add(hf_dir, arcname=LLM_DEMO)
                with open(archive, "rb") as fh:
                    version = llm_version_create_from_archive(
                        user=admin,
                        model=model,
                        filename=archive.name,
                        chunks=iter(lambda: fh.read(1 << 20), b""),
                    )
            self.stdout.write(f"seed: trained the tiny LLM and registered {LLM_DEMO} v{version.version}")
        artifact = artifact_list(user=admin, version=version).filter(status=ArtifactStatus.SERVABLE).first()
        endpoint_create(user=admin, name=LLM_DEMO, pool=pool, stable_artifact=artifact, kind="llm", public=True)
        self.stdout.write(
            f"seed: public LLM endpoint {LLM_DEMO} → {LLM_DEMO} v{version.version} llm (Triton generate model in pool "
            "demo-cpu); try the README's curl to /v1/chat/completions"
        )
