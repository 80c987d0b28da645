"""Builds (the artifact factory) and their artifacts: start a build and wait for it with a
progress bar, follow, cancel, list; list and get artifacts."""

from __future__ import annotations

import click

from modelplane_cli import exits
from modelplane_cli.commands.common import list_options, show_page, size
from modelplane_cli.exits import CliError
from modelplane_cli.output import fields, table, when
from modelplane_cli.state import json_option, pass_state
from modelplane_cli.watch import build_failure_text, wait_build

BUILD_COLUMNS = [
    ("id", "id"),
    ("model", "model"),
    ("version", "version_number"),
    ("targets", "targets"),
    ("status", "status"),
    ("progress", "progress"),
    ("created", "created_at"),
]
ARTIFACT_COLUMNS = [
    ("id", "id"),
    ("variant", "variant"),
    ("status", "status"),
    ("model", "model"),
    ("version", "version_number"),
    ("auc delta", "auc_delta"),
    ("reason", "status_reason"),
]


def wait_options(command=None, *, interval: float = 1.0):
    """--timeout and --interval (seconds between polls, `interval` by default); usable as
    @wait_options or @wait_options(interval=2.0)."""

    def add(command):
        command = click.option(
            "--timeout",
            type=click.FloatRange(min=0),
            default=None,
            help="Give up waiting after this many seconds (exit 6); default: no limit.",
        )(command)
        return click.option(
            "--interval",
            type=click.FloatRange(min=0.2),
            default=interval,
            show_default=True,
            help="Seconds between polls.",
        )(command)

    return add(command) if command is not None else add


def finish_build(state, build: dict, code: int) -> None:
    """Print the build (JSON, or a summary with its artifacts) and exit with its code."""
    if code != exits.OK:
        state.out.note(build_failure_text(build))
    state.out.result(build, _build_summary)
    if code:
        click.get_current_context().exit(code)


@click.group()
def build():
    """Builds: a version turned into validated serving artifacts."""


@build.command("start")
@click.argument("version_id", type=int)
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="VARIANT",
    help="A variant to build (repeatable): onnx-fp32, onnx-int8, onnx-fp32-gpu, onnx-fp16, tensorrt. Default: the CPU pair.",
)
@click.option(
    "--tune-slo-ms",
    type=click.FloatRange(min=0.1),
    default=None,
    help="Also tune the serving config for this p99 (ms) on a real tritonserver; the best within it is "
    "published as VARIANT-tuned.",
)
@click.option(
    "--tune-variant", "tune_variants", multiple=True, metavar="VARIANT", help="A variant to tune (repeatable)."
)
@click.option("--tune-budget-s", type=click.FloatRange(5, 1200), default=None, help="The search's wall time.")
@click.option("--idempotency-key", default=None, help="Send again with the same key: the same build, not a second one.")
@click.option(
    "--wait/--no-wait", default=True, show_default=True, help="Wait for the build to end, with a progress bar."
)
@wait_options
@json_option
@pass_state
def build_start(
    state, version_id, targets, tune_slo_ms, tune_variants, tune_budget_s, idempotency_key, wait, interval, timeout
):
    """Start a build of a version (by id) and, by default, wait for it: exit 0 when it
    succeeds, 10 when it fails or is cancelled."""
    body = {"targets": list(targets)} if targets else {}
    if tune_slo_ms is not None:
        body["tune"] = {"slo_p99_ms": tune_slo_ms}
        if tune_variants:
            body["tune"]["variants"] = list(tune_variants)
        if tune_budget_s is not None:
            body["tune"]["budget_s"] = tune_budget_s
    elif tune_variants or tune_budget_s is not None:
        raise CliError(exits.USAGE, "--tune-variant and --tune-budget-s need --tune-slo-ms (the SLO to tune for).")
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    started = state.api.post(f"versions/{version_id}/builds/", body, headers=headers)
    if not wait:
        state.out.result(
            started,
            lambda b: (
                f"Build {b['id']} of {b['model']} v{b['version_number']} {b['status']} "
                f"(targets {', '.join(b.get('targets') or [])}); follow it: modelplane build wait {b['id']}"
            ),
        )
        return
    finish_build(state, *wait_build(state.api, state.out, started["id"], interval=interval, timeout=timeout))


@build.command("wait")
@click.argument("build_id", type=int)
@wait_options
@json_option
@pass_state
def build_wait(state, build_id, interval, timeout):
    """Follow a build until it ends (exit 0 succeeded, 10 failed or cancelled)."""
    finish_build(state, *wait_build(state.api, state.out, build_id, interval=interval, timeout=timeout))


@build.command("get")
@click.argument("build_id", type=int)
@click.option("--log", "with_log", is_flag=True, help="Also print each stage's log.")
@json_option
@pass_state
def build_get(state, build_id, with_log):
    """A build: status, stages, progress, artifacts."""
    body = state.api.get(f"builds/{build_id}/")

    def human(b):
        text = _build_summary(b)
        if with_log:
            for stage in b.get("stages") or []:
                text += f"\n--- {stage.get('name')} ({stage.get('status')}) ---\n{(stage.get('log') or '').rstrip()}"
        return text

    state.out.result(body, human)


@build.command("list")
@click.option("--version", "version_id", type=int, help="Builds of this version id.")
@click.option("--status", help="queued, running, succeeded, failed, cancelled")
@list_options
@json_option
@pass_state
def build_list(state, version_id, status, page, page_size, everything):
    """Builds of your teams, newest first."""
    page_body = state.api.page(
        "builds/", everything=everything, version=version_id, status=status, page=page, page_size=page_size
    )
    show_page(state, page_body, BUILD_COLUMNS, empty="No builds.")


@build.command("cancel")
@click.argument("build_id", type=int)
@click.option("--reason", default="", help="Recorded in the audit trail.")
@json_option
@pass_state
def build_cancel(state, build_id, reason):
    """Cancel a queued or running build."""
    body = state.api.post(f"builds/{build_id}/cancel/", {"reason": reason} if reason else {})
    state.out.result(body, lambda b: f"Build {b['id']} {b['status']}.")


def _build_summary(b: dict) -> str:
    stages = table(
        [
            {**s, "took": f"{s['duration_s']:.1f}s" if isinstance(s.get("duration_s"), (int, float)) else ""}
            for s in b.get("stages") or []
        ],
        [("stage", "name"), ("status", "status"), ("took", "took")],
    )
    text = fields(
        [
            ("build", b.get("id")),
            ("model", f"{b.get('model')} v{b.get('version_number')} (version id {b.get('version')})"),
            ("targets", b.get("targets")),
            ("status", b.get("status")),
            ("progress", f"{b.get('progress', 0)}%"),
            ("attempt", f"{b.get('attempt')} of {b.get('max_attempts')}"),
            ("error", b.get("error")),
            ("created", when(b.get("created_at"))),
            ("finished", when(b.get("finished_at"))),
        ]
    )
    text += "\n\n" + stages
    if b.get("artifacts"):
        text += "\n\n" + table(b["artifacts"], ARTIFACT_COLUMNS)
    return text


@click.group()
def artifact():
    """Serving artifacts a build made (one per variant), with their evidence."""


@artifact.command("list")
@click.argument("version_id", type=int)
@click.option("--status", help="servable, rejected, skipped, pending")
@click.option("--variant")
@list_options
@json_option
@pass_state
def artifact_list(state, version_id, status, variant, page, page_size, everything):
    """Artifacts of a version (by id)."""
    page_body = state.api.page(
        f"versions/{version_id}/artifacts/",
        everything=everything,
        status=status,
        variant=variant,
        page=page,
        page_size=page_size,
    )
    show_page(state, page_body, ARTIFACT_COLUMNS, empty="No artifacts.")


@artifact.command("get")
@click.argument("artifact_id", type=int)
@json_option
@pass_state
def artifact_get(state, artifact_id):
    """One artifact with its validation and benchmark evidence."""
    body = state.api.get(f"artifacts/{artifact_id}/")
    state.out.result(
        body,
        lambda a: fields(
            [
                ("id", a.get("id")),
                ("variant", a.get("variant")),
                ("status", a.get("status")),
                ("reason", a.get("status_reason")),
                ("model", f"{a.get('model')} v{a.get('version_number')}"),
                ("triton model", a.get("triton_model_name")),
                ("size", size(a["size_bytes"]) if isinstance(a.get("size_bytes"), int) else None),
                ("sha256", a.get("sha256")),
                ("auc delta", a.get("auc_delta")),
                ("validation", a.get("validation")),
                ("benchmark", a.get("benchmark")),
                ("download", a.get("download_url")),
                ("created", when(a.get("created_at"))),
            ]
        ),
    )


COMMANDS = [build, artifact]
