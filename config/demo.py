"""The demo experiment `make run` prepares in the background (task platform.demo_experiment,
enqueued by seed_demo): demo-ctr v2 is the reference CTR model (experiments/reference)
trained briefly on the synthetic clicks — an MLflow run, registered through the registry's
services like `manage.py train_reference_model --register` — built to onnx-fp32 by the
normal build pipeline (its stages show on the dashboard), loaded into pool demo-cpu, and
experiment DEMO_EXPERIMENT on endpoint demo-ctr: control = the endpoint's stable artifact
(v1 onnx-fp32, the random tiny ranker), candidate = v2 onnx-fp32, 50/50 by X-User-Id,
primary metric CTR. `manage.py simulate_traffic --endpoint demo-ctr` then drives it.

`demo_experiment_step` does the next missing thing and returns how long to wait before the
next call (None: nothing left). The rows decide what is missing (the version by its tag,
the build by its idempotency key, the pool model by its artifact, the experiment by its
name), so a task delivered twice or `make run` restarted neither trains nor builds again;
an experiment that exists in any state (a person may have stopped or shipped it) is left
as it is. Like seed_demo it spans apps, so it lives in the project (config).
"""

from __future__ import annotations

import io
import logging
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command

from kernel.errors import PlatformError

log = logging.getLogger("modelplane.demo")

ADMIN = "admin"
MODEL = ENDPOINT = "demo-ctr"
DEMO_EXPERIMENT = "v2-vs-v1"
VERSION_TAG = "demo-v2"
BUILD_KEY = "demo-experiment"
VARIANT = "onnx-fp32"
# Small on purpose (about 5 s of training on 2 cores): the tiny DCN of the reference tests on
# 20k synthetic clicks reaches AUC ~0.85, which ranks far better than v1's random weights.
TRAINING = {
    "rows": 20_000,
    "valid_rows": 4_000,
    "epochs": 2,
    "vocab": 500,
    "emb_dim": 4,
    "cross_layers": 1,
    "mlp": "32",
    "seed": 0,
    "threads": 2,
}
# The plan shown on the experiment page: v1's CTR under simulate_traffic is ~0.24 and a
# simulated user makes ~10 requests in a few minutes; +20 % is the smallest lift worth it.
# guardrail_psi off: v2 is meant to score differently from the random v1 (PSI ~0.5 on the
# demo's traffic); its PSI is still shown, latency/error/SLO guardrails still apply.
PLAN = {
    "baseline_rate": 0.25,
    "exposures_per_unit": 10,
    "mde": 0.2,
    "alpha": 0.05,
    "power": 0.8,
    "guardrail_psi": False,
    # the demo endpoint is public: its simulated users send clicks with the replies' exposure tokens,
    # which carry one exposure each (a click, a few conversions, a bounded value), expire with the
    # attribution window and the experiment, and come one user per batch (docs/experiments.md)
    "feedback_tokens": True,
    # the users click at once: a 40 s window lets the README's loop build a dataset of the traffic
    # a minute after it was served (a training row's window must have closed: no label leakage)
    "attribution_window_s": 40,
}
HYPOTHESIS = (
    "demo-ctr v2, the reference DCN trained on 20k synthetic clicks, ranks better than v1 (random "
    "weights): users shown its top item click more."
)
BUILD_POLL_S = 3.0
LOAD_POLL_S = 2.0


class DemoFailed(Exception):
    """The demo experiment cannot be prepared; the message says why."""


def demo_experiment_step() -> float | None:
    from deployments.selectors.rollouts import endpoint_list
    from experiments.selectors.online import online_experiment_list

    admin = get_user_model().objects.filter(username=ADMIN).first()
    if admin is None:
        raise DemoFailed(f"no user {ADMIN!r} (run_platform creates it)")
    endpoint = endpoint_list(user=admin).filter(name=ENDPOINT).select_related("pool", "stable_artifact").first()
    if endpoint is None or endpoint.stable_artifact_id is None:
        raise DemoFailed(f"endpoint {ENDPOINT!r} is not seeded (seed_demo's v1 build did not finish)")
    existing = online_experiment_list(user=admin, endpoint=ENDPOINT).filter(name=DEMO_EXPERIMENT).first()
    if existing is not None:
        log.info(
            "demo experiment: %s (%s) on %s is %s; nothing to prepare",
            existing.public_id,
            existing.name,
            ENDPOINT,
            existing.state,
        )
        return None
    version = _candidate_version(admin) or _train(admin)
    artifact = _servable(admin, version)
    if artifact is None:
        return _build(admin, version)
    wait = _load(admin, endpoint.pool, artifact)
    if wait is not None:
        return wait
    _start(admin, endpoint, artifact)
    return None


def _candidate_version(admin):
    from registry.selectors.catalog import model_list, version_list

    model = model_list(user=admin).filter(name=MODEL).first()
    if model is None:
        raise DemoFailed(f"model {MODEL!r} is not seeded")
    return version_list(user=admin, model=model).filter(tags__version_tag=VERSION_TAG).order_by("version").first()


def _train(admin):
    log.info(
        "demo experiment: training %s v2 (reference DCN, 20k synthetic clicks, 2 epochs) and logging it to MLflow…",
        MODEL,
    )
    started = time.monotonic()
    out = io.StringIO()
    try:
        args = [a for k, v in TRAINING.items() for a in (f"--{k.replace('_', '-')}", str(v))]
        call_command(
            "train_reference_model",
            *args,
            "--version-tag",
            VERSION_TAG,
            "--register",
            MODEL,
            "--user",
            admin.username,
            stdout=out,
        )
    except Exception as exc:  # CommandError, an MLflow store error: the task says why and stops
        raise DemoFailed(f"training {MODEL} v2: {exc}") from exc
    version = _candidate_version(admin)
    if version is None:
        raise DemoFailed(f"training {MODEL} v2 registered no version: {out.getvalue()[-300:]}")
    log.info(
        "demo experiment: registered %s v%s (trained in %.1f s, validation AUC %.3f; %.0f s with MLflow logging)",
        MODEL,
        version.version,
        version.metrics.get("train_seconds", float("nan")),
        version.metrics.get("auc", float("nan")),
        time.monotonic() - started,
    )
    return version


def _servable(admin, version):
    from registry.models import ArtifactStatus
    from registry.selectors.builds import artifact_list

    return (
        artifact_list(user=admin, version=version)
        .filter(variant=VARIANT, status=ArtifactStatus.SERVABLE)
        .order_by("-pk")
        .first()
    )


def _build(admin, version) -> float:
    from registry.models import BuildStatus
    from registry.services.builds import build_start

    build, created = build_start(user=admin, version=version, targets=[VARIANT], idempotency_key=BUILD_KEY)
    if created:
        log.info(
            "demo experiment: building %s v%s → %s (build #%s; its stages show on the model's page)…",
            MODEL,
            version.version,
            VARIANT,
            build.pk,
        )
    elif build.status in BuildStatus.terminal():
        raise DemoFailed(
            f"build #{build.pk} of {MODEL} v{version.version} is {build.status}: {build.error or 'no servable ' + VARIANT}"
        )
    return BUILD_POLL_S


def _load(admin, pool, artifact) -> float | None:
    """Load the candidate before the experiment starts, so its users never meet a model
    that is still loading; None once every replica has it."""
    from deployments.models import PoolModelState
    from deployments.selectors.pools import pool_models
    from deployments.services.pools import pool_load_request

    pool_model = pool_models(pool=pool, include_unloaded=True).filter(artifact=artifact).order_by("-pk").first()
    if pool_model is None or pool_model.state == PoolModelState.UNLOADED:
        pool_load_request(user=admin, pool=pool, artifact=artifact)
        return LOAD_POLL_S
    if pool_model.state == PoolModelState.READY:
        return None
    if pool_model.state == PoolModelState.FAILED:
        raise DemoFailed(f"loading {pool_model.triton_model_name} into pool {pool.name} failed: {pool_model.error}")
    return LOAD_POLL_S


def _start(admin, endpoint, artifact) -> None:
    from experiments.services.online import experiment_create, experiment_start

    try:
        experiment = experiment_create(
            user=admin, endpoint=endpoint, name=DEMO_EXPERIMENT, candidates=[artifact], hypothesis=HYPOTHESIS, **PLAN
        )
        experiment_start(user=admin, experiment=experiment)
    except PlatformError as exc:  # e.g. a rollout someone started on demo-ctr meanwhile
        raise DemoFailed(f"experiment {DEMO_EXPERIMENT} on {ENDPOINT}: {exc.detail}") from exc
    arms = " vs ".join(f"{arm.name} {arm.allocation_bp / 100:.0f} %" for arm in experiment.arms.all())
    log.info(
        "demo experiment ready: %s (%s) running on %s, %s by %s; drive it with "
        "`.venv/bin/python manage.py simulate_traffic --endpoint %s --seconds 300` and watch /experiments/%s/",
        experiment.public_id,
        DEMO_EXPERIMENT,
        ENDPOINT,
        arms,
        experiment.unit_header,
        ENDPOINT,
        experiment.pk,
    )
    if not settings.EXPOSURE_STREAM_URL:
        log.warning(
            "demo experiment: no exposure stream (EXPOSURE_STREAM_URL): the gateway logs no exposures, so %s "
            "counts no traffic; start make run with CELERY_BROKER_URL=redis://127.0.0.1:6379/0",
            experiment.public_id,
        )
