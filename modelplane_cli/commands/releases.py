"""Releases: one flow from a build request to a canary. `release start` builds a version,
tunes the variant against the endpoint's p99 SLO on a scratch tritonserver and canaries
what it made against the stable; `--watch` follows the build (progress bar, one line per
stage), then the canary (transitions and the judge's verdicts) to the end."""

from __future__ import annotations

import click

from modelplane_cli import exits
from modelplane_cli.commands.builds import wait_options
from modelplane_cli.commands.common import ID_OR_MODEL_URI, list_options, show_page
from modelplane_cli.commands.rollouts import forecast_steps, parse_steps
from modelplane_cli.output import fields, when
from modelplane_cli.state import json_option, pass_state
from modelplane_cli.watch import WATCH_INTERVAL_S, Clock, wait_build, watch_rollout

RELEASE_COLUMNS = [
    ("id", "id"),
    ("endpoint", "endpoint"),
    ("variant", "variant"),
    ("state", "state"),
    ("build", "build"),
    ("candidate", "candidate_variant"),
    ("rollout", "rollout"),
    ("created", "created_at"),
]
RELEASE_DONE = {"promoted": exits.OK, "rolled_back": exits.ROLLED_BACK, "failed": exits.ROLLOUT_FAILED}


def _text(release: dict) -> str:
    prediction = release.get("prediction") or {}
    gain = prediction.get("gain")
    return fields(
        [
            ("release", f"#{release['id']} on {release['endpoint']}: {release['state']}"),
            ("variant", f"{release['variant']} tuned for p99 <= {release['slo_p99_ms']:g} ms"),
            ("build", f"#{release['build']} {release.get('build_status')} ({release.get('build_progress')}%)"),
            ("candidate", release.get("candidate_variant") or "—"),
            ("rollout", f"#{release['rollout']} {release.get('rollout_state')}" if release.get("rollout") else "—"),
            (
                "predicted",
                f"{prediction.get('tuned_rps'):,.0f} vs {prediction.get('default_rps'):,.0f} req/s within the SLO"
                + (f" ({gain:.2f}x)" if gain else "")
                if prediction
                else "—",
            ),
            ("why", release.get("reason") or ""),
            ("created", when(release.get("created_at"))),
        ]
    )


def _follow(state, release: dict, *, interval: float, timeout: float | None) -> None:
    """The build with its progress, then the canary, then the release's end."""
    pace = Clock(interval=interval, timeout=timeout, what=f"release {release['id']}")
    if release.get("build"):
        build, code = wait_build(state.api, state.out, release["build"], interval=interval, timeout=timeout)
        if code:
            state.out.event(f"release #{release['id']}: build #{build['id']} {build['status']}: {build.get('error')}")
    while True:
        release = state.api.get(f"releases/{release['id']}/")
        if release.get("rollout") and release["state"] == "canary":
            state.out.event(f"release #{release['id']}: {release.get('reason')}")
            watch_rollout(state.api, state.out, release["rollout"], interval=interval, timeout=timeout)
            continue
        if release["state"] in RELEASE_DONE:
            state.out.event(f"release #{release['id']} {release['state']}: {release.get('reason')}")
            state.out.result(release, None)
            code = RELEASE_DONE[release["state"]]
            if code:
                click.get_current_context().exit(code)
            return
        pace.tick()


@click.group()
def release():
    """Releases: build a version, tune it against the endpoint's SLO, canary it against the stable."""


@release.command("start")
@click.argument("endpoint_name")
@click.option(
    "--version",
    "version_id",
    type=ID_OR_MODEL_URI,
    required=True,
    help="The model version to build: its id or a model URI (models:/ctr@challenger, models:/ctr/3).",
)
@click.option("--variant", default="onnx-int8", show_default=True, help="The variant to build and tune.")
@click.option("--slo-ms", type=click.FloatRange(min=0.1), help="Tune for this p99 (default: the endpoint's SLO).")
@click.option("--tune-budget-s", type=click.FloatRange(5, 1200), help="The search's wall time (default 120 s).")
@click.option("--max-trials", type=click.IntRange(2, 200), help="Configs measured at most.")
@click.option(
    "--steps",
    default=None,
    help="Canary steps in percent, e.g. 10,25,50,100 (default: the plan the rollout forecast suggests for the "
    "endpoint's traffic, as `rollout start`; the server's 10,25,50,100 without one).",
)
@click.option("--step-min-seconds", type=click.FloatRange(min=0))
@click.option("--step-min-requests", type=click.IntRange(min=0))
@click.option("--step-deadline-seconds", type=click.FloatRange(min=1))
@click.option("--watch", is_flag=True, help="Follow it to the end (exit 0 promoted, 11 rolled back, 12 failed).")
@wait_options(interval=WATCH_INTERVAL_S)
@json_option
@pass_state
def release_start(state, endpoint_name, version_id, variant, slo_ms, steps, watch, interval, timeout, **options):
    """Build VERSION as VARIANT, tune it against ENDPOINT's p99 SLO, canary it against the stable."""
    body = {"endpoint": endpoint_name, "version": version_id, "variant": variant}
    if slo_ms is not None:
        body["slo_p99_ms"] = slo_ms
    if steps:
        body["steps_bp"] = parse_steps(steps)
    elif suggested := forecast_steps(
        state, endpoint_name, options
    ):  # the traffic now: the canary comes after the build
        body["steps_bp"] = suggested
    body.update({key: value for key, value in options.items() if value is not None})
    started = state.api.post("releases/", body)
    if not watch:
        state.out.result(started, _text)
        return
    state.out.event(f"Started release #{started['id']}: build #{started['build']}, then tune, then canary.")
    _follow(state, started, interval=interval, timeout=timeout)


@release.command("watch")
@click.argument("release_id", type=int)
@wait_options(interval=WATCH_INTERVAL_S)
@json_option
@pass_state
def release_watch(state, release_id, interval, timeout):
    """Follow a release to its end (exit 0 promoted, 11 rolled back, 12 failed)."""
    _follow(state, state.api.get(f"releases/{release_id}/"), interval=interval, timeout=timeout)


@release.command("get")
@click.argument("release_id", type=int)
@json_option
@pass_state
def release_get(state, release_id):
    """A release: state, build, candidate, rollout, the tune's prediction."""
    state.out.result(state.api.get(f"releases/{release_id}/"), _text)


@release.command("list")
@click.option(
    "--state", "release_state", type=click.Choice(["building", "canary", "promoted", "rolled_back", "failed"])
)
@list_options
@json_option
@pass_state
def release_list(state, release_state, page, page_size, everything):
    """Releases of your teams' endpoints."""
    show_page(
        state,
        state.api.page("releases/", everything=everything, state=release_state, page=page, page_size=page_size),
        RELEASE_COLUMNS,
        empty="No releases.",
    )


COMMANDS = [release]
