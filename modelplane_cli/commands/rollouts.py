"""Rollouts: start one on an endpoint, watch it step by step with the judge's verdicts,
promote / pause / resume / roll back or abort (with the generation you saw: 409 if it
moved), retry one that rolled back, undo an endpoint's last promotion, list and get."""

from __future__ import annotations

import click

from modelplane_cli import exits
from modelplane_cli.commands.builds import wait_options
from modelplane_cli.commands.common import ID_OR_MODEL_URI, list_options, segment, show_page
from modelplane_cli.exits import CliError
from modelplane_cli.output import fields, when
from modelplane_cli.state import json_option, pass_state
from modelplane_cli.watch import WATCH_INTERVAL_S, step_text, verdict_line, watch_rollout

ROLLOUT_COLUMNS = [
    ("id", "id"),
    ("endpoint", "endpoint"),
    ("candidate", "candidate_variant"),
    ("stable", "baseline_variant"),
    ("state", "state"),
    ("step", "step"),
    ("candidate %", "candidate_pct"),
    ("generation", "generation"),
    ("created", "created_at"),
]


# The server's plan defaults (deployments/rollout_machine.py, DEFAULT_PLAN), said in --help.
# The CLI imports nothing of the server; tests/cli/test_units.py checks these agree with it.
PLAN_DEFAULTS = {
    "steps_bp": (1000, 2500, 5000, 10000),
    "step_min_seconds": 30.0,
    "step_min_requests": 200,
    "step_deadline_seconds": 600.0,
}


def parse_steps(text: str) -> list[int]:
    """ "5,25,50,100" (percent of traffic to the candidate) → basis points [500, 2500, 5000, 10000]."""
    try:
        percents = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CliError(
            exits.USAGE, f"--steps: give percentages separated by commas, e.g. 5,25,50,100 (got {text!r})."
        ) from None
    if not percents or any(not 0 < p <= 100 for p in percents):
        raise CliError(exits.USAGE, f"--steps: each step is a percentage above 0 and at most 100 (got {text!r}).")
    points = [round(p * 100) for p in percents]
    if any(b <= a for a, b in zip(points, points[1:])):
        raise CliError(exits.USAGE, f"--steps: each step must send more traffic than the one before (got {text!r}).")
    return points


FORECAST_PLAN_KEYS = ("step_min_seconds", "step_min_requests", "step_deadline_seconds")


def forecast_steps(state, endpoint_name: str, plan: dict) -> list[int] | None:
    """The steps the rollout forecast suggests for the endpoint's observed traffic (what the
    endpoint page's start form fills in), said on stderr; None (the server's default plan)
    when the forecast cannot be had."""
    query = {key: plan[key] for key in FORECAST_PLAN_KEYS if plan.get(key) is not None}
    try:
        forecast = state.api.get("rollout-forecast/", endpoint=endpoint_name, **query)
        steps = [int(step) for step in forecast["suggested_steps_bp"]]
    except CliError as exc:
        state.out.note(f"No forecast ({exc.message}): the server's default steps apply.")
        return None
    except (TypeError, KeyError, ValueError):
        state.out.note("No forecast (the server's answer had no suggested steps): the server's default steps apply.")
        return None
    rate = forecast.get("observed_rate_rps")
    traffic = f"{rate:g} req/s observed" if isinstance(rate, (int, float)) else "no traffic observed yet"
    state.out.note(
        f"Steps {'/'.join(f'{s / 100:g}' for s in steps)} % from the rollout forecast ({traffic}); "
        "--steps to choose others."
    )
    return steps


def follow(state, rollout: dict, *, watch: bool, interval: float, timeout: float | None, through_pause: bool) -> None:
    if not watch:
        state.out.result(rollout, _rollout_text)
        return
    final, code = watch_rollout(
        state.api, state.out, rollout["id"], interval=interval, timeout=timeout, through_pause=through_pause
    )
    state.out.result(final, None)  # people saw it line by line; --json gets the final rollout
    if code:
        click.get_current_context().exit(code)


def watch_options(command):
    command = wait_options(command, interval=WATCH_INTERVAL_S)
    return click.option(
        "--through-pause",
        is_flag=True,
        help="Keep watching while paused (default: stop with exit 13, it waits for a person).",
    )(command)


watch_flag = click.option(
    "--watch",
    is_flag=True,
    help="Then watch it to the end (exit 0 succeeded, 11 rolled back by the judge, 14 by a person, 12 failed, "
    "13 paused).",
)


@click.group()
def rollout():
    """Rollouts of a candidate artifact into an endpoint (canary / blue-green)."""


@rollout.command("start")
@click.argument("endpoint_name")
@click.option(
    "--candidate",
    type=ID_OR_MODEL_URI,
    required=True,
    help="The servable artifact to bring in: its id, or a model URI (models:/ctr@challenger: that version's "
    "artifact in the stable's variant, or --variant's).",
)
@click.option("--variant", default=None, help="With a model URI: the variant to roll out (e.g. onnx-int8).")
@click.option("--strategy", type=click.Choice(["canary", "blue-green"]), default=None, help="Default canary.")
@click.option(
    "--steps",
    default=None,
    help="Candidate traffic per step in percent, e.g. 5,25,50,100 (default: the plan the rollout forecast "
    "suggests for the endpoint's traffic, as the endpoint page's form; the server's "
    f"{','.join(f'{s / 100:g}' for s in PLAN_DEFAULTS['steps_bp'])} without one).",
)
@click.option(
    "--shadow-seconds", type=click.FloatRange(min=0), help="Shadow phase before the canary (blue-green needs it)."
)
@click.option("--shadow-sample-rate", type=click.FloatRange(0, 1), help="Share of requests copied to the shadow.")
@click.option(
    "--step-min-seconds",
    type=click.FloatRange(min=0),
    help=f"Least time in each step (default {PLAN_DEFAULTS['step_min_seconds']:g}).",
)
@click.option(
    "--step-min-requests",
    type=click.IntRange(min=0),
    help=f"Least candidate requests in each step (default {PLAN_DEFAULTS['step_min_requests']}).",
)
@click.option(
    "--step-deadline-seconds",
    type=click.FloatRange(min=0),
    help=f"A step without a conclusive verdict by then (default {PLAN_DEFAULTS['step_deadline_seconds']:g})…",
)
@click.option(
    "--on-inconclusive",
    type=click.Choice(["rollback", "pause", "promote"]),
    help="…is rolled back, paused (the endpoint's default unless set) or goes on unless a check failed (promote).",
)
@click.option(
    "--promote-grace-seconds",
    type=click.FloatRange(min=0),
    help="Hold at 100 % before the old stable goes (default 30).",
)
@watch_flag
@watch_options
@json_option
@pass_state
def rollout_start(
    state, endpoint_name, candidate, variant, strategy, steps, watch, interval, timeout, through_pause, **plan
):
    """Start a rollout of a candidate artifact on an endpoint."""
    body = {"candidate_artifact": candidate}
    if variant:
        body["variant"] = variant
    if strategy:
        body["strategy"] = strategy
    if steps:
        body["steps_bp"] = parse_steps(steps)
    elif strategy != "blue-green":  # blue-green has no steps
        suggested = forecast_steps(state, endpoint_name, plan)
        if suggested:
            body["steps_bp"] = suggested
    body.update({key: value for key, value in plan.items() if value is not None})
    started = state.api.post(f"endpoints/{segment(endpoint_name)}/rollouts/", body)
    if watch and not state.out.as_json:
        state.out.event(f"Started rollout #{started['id']} (generation {started['generation']}).")
    follow(state, started, watch=watch, interval=interval, timeout=timeout, through_pause=through_pause)


@rollout.command("watch")
@click.argument("rollout_id", type=int)
@watch_options
@json_option
@pass_state
def rollout_watch(state, rollout_id, interval, timeout, through_pause):
    """Follow a rollout step by step with the judge's verdicts until it ends: on a terminal
    a live view (state, step, every arm's share, guardrails, last decision) redrawn in place.
    Exit 0 succeeded, 11 rolled back by the judge, 14 by a person, 12 failed, 13 paused,
    6 --timeout."""
    follow(state, {"id": rollout_id}, watch=True, interval=interval, timeout=timeout, through_pause=through_pause)


@rollout.command("list")
@click.option("--endpoint", "endpoint_name", help="Rollouts of this endpoint.")
@click.option(
    "--state",
    "state_filter",
    help="pending, loading, shadow, canary, paused, promoting, succeeded, rolling_back, rolled_back, failed",
)
@list_options
@json_option
@pass_state
def rollout_list(state, endpoint_name, state_filter, page, page_size, everything):
    """Rollouts of your teams, newest first."""
    path = f"endpoints/{segment(endpoint_name)}/rollouts/" if endpoint_name else "rollouts/"
    if endpoint_name and state_filter:  # the endpoint's list has no state filter: filter all its pages here
        body = state.api.page(path, everything=True, page_size=500)
        kept = [r for r in body["results"] if r.get("state") == state_filter]
        body = {**body, "count": len(kept), "results": kept}
    else:
        body = state.api.page(path, everything=everything, state=state_filter, page=page, page_size=page_size)
    for row in body["results"]:
        row.setdefault(
            "step", step_text(row.get("step_index"), row.get("steps_bp") or []) if row.get("state") == "canary" else ""
        )
        row.setdefault("candidate_pct", (row.get("traffic") or {}).get("candidate_bp", 0) / 100)
    show_page(state, body, ROLLOUT_COLUMNS, empty="No rollouts.")


@rollout.command("get")
@click.argument("rollout_id", type=int)
@json_option
@pass_state
def rollout_get(state, rollout_id):
    """A rollout: state, step, traffic, generation (for promote/pause/resume/rollback) and the judge's latest verdict."""
    body = state.api.get(f"rollouts/{rollout_id}/")
    if state.out.as_json:
        state.out.result(body)
        return
    latest = state.api.get("verdicts/", rollout=rollout_id, page_size=1).get("results") or []
    text = _rollout_text(body)
    if latest:
        text += "\nlatest verdict: " + verdict_line(latest[0], body.get("steps_bp") or [])
    state.out.result(body, text)


def _action(name: str, past: str, help_text: str):
    @rollout.command(name, help=help_text)
    @click.argument("rollout_id", type=int)
    @click.option(
        "--generation",
        type=int,
        default=None,
        help="The generation you saw (`rollout get`): the API answers 409 (exit 4) if the rollout moved since.",
    )
    @click.option("--reason", default="", help="Recorded in the audit trail.")
    @json_option
    @pass_state
    def act(state, rollout_id, generation, reason):
        body = {"reason": reason} if reason else {}
        if generation is not None:
            body["generation"] = generation
        done = state.api.post(f"rollouts/{rollout_id}/{name}/", body)
        state.out.result(done, lambda r: f"Rollout #{r['id']} {past}: now {r['state']} (generation {r['generation']}).")

    act.__name__ = f"rollout_{name}"
    return act


_action("promote", "promoted", "Promote now: skip the remaining steps (100 % to the candidate, then the grace period).")
_action("pause", "paused", "Pause: hold the split and stop the step timer.")
_action("resume", "resumed", "Resume where it paused, with the step timer where it stopped.")
_action("rollback", "rolled back", "Roll back now: the candidate's weight goes to 0, then it is drained and unloaded.")


@rollout.command("abort")
@click.argument("rollout_id", type=int)
@click.option(
    "--generation",
    type=int,
    default=None,
    help="The generation you saw (`rollout get`): the API answers 409 (exit 4) if the rollout moved since.",
)
@click.option("--reason", default="", help="Recorded in the audit trail.")
@click.option("--watch", is_flag=True, help="Then watch it drain to rolled_back (exit 14: rolled back by a person).")
@watch_options
@json_option
@pass_state
def rollout_abort(state, rollout_id, generation, reason, watch, interval, timeout, through_pause):
    """Abort a running rollout (a manual rollback): the candidate's weight goes to 0 at once,
    then it is drained and unloaded; the stable keeps serving. A watch of it ends with exit 14
    (rolled back by a person), not 11 (by the judge)."""
    body = {"reason": reason} if reason else {}
    if generation is not None:
        body["generation"] = generation
    done = state.api.post(f"rollouts/{rollout_id}/rollback/", body)
    if not watch:
        state.out.result(
            done, lambda r: f"Rollout #{r['id']} aborted: now {r['state']} (generation {r['generation']})."
        )
        return
    if not state.out.as_json:
        state.out.event(f"Aborted rollout #{done['id']}: now {done['state']}.")
    follow(state, done, watch=True, interval=interval, timeout=timeout, through_pause=through_pause)


@rollout.command("retry")
@click.argument("rollout_id", type=int)
@click.option("--reason", default="", help="Recorded in the audit trail.")
@watch_flag
@watch_options
@json_option
@pass_state
def rollout_retry(state, rollout_id, reason, watch, interval, timeout, through_pause):
    """Start a rolled back or failed rollout again: a new rollout with the same candidate and
    plan (steps, minimums, deadline, policy), against the endpoint's stable now."""
    started = state.api.post(f"rollouts/{rollout_id}/retry/", {"reason": reason} if reason else {})
    if watch and not state.out.as_json:
        state.out.event(
            f"Retrying rollout #{rollout_id} as rollout #{started['id']} (generation {started['generation']})."
        )
    elif not watch:
        state.out.note(f"Rollout #{rollout_id} retried as rollout #{started['id']}.")
    follow(state, started, watch=watch, interval=interval, timeout=timeout, through_pause=through_pause)


@rollout.command("undo")
@click.argument("endpoint_name")
@click.option("--reason", default="", help="Recorded in the audit trail.")
@click.option(
    "--steps",
    default=None,
    help="Traffic to the previous stable per step in percent (default 100: all of it once it is READY).",
)
@click.option(
    "--step-min-seconds", type=click.FloatRange(min=0), help="Least time in each step (default 0: the first pass)."
)
@click.option("--promote-grace-seconds", type=click.FloatRange(min=0), help="Hold at 100 % first (default 0).")
@watch_flag
@watch_options
@json_option
@pass_state
def rollout_undo(
    state,
    endpoint_name,
    reason,
    steps,
    step_min_seconds,
    promote_grace_seconds,
    watch,
    interval,
    timeout,
    through_pause,
):
    """Roll an endpoint back to its previous stable (what it served before its last
    promotion), as a rollout: loaded, then all traffic once READY and judged. Exit 4 with
    no_previous_stable when its stable never changed."""
    body = {"reason": reason} if reason else {}
    if steps:
        body["steps_bp"] = parse_steps(steps)
    if step_min_seconds is not None:
        body["step_min_seconds"] = step_min_seconds
    if promote_grace_seconds is not None:
        body["promote_grace_seconds"] = promote_grace_seconds
    started = state.api.post(f"endpoints/{segment(endpoint_name)}/undo/", body)
    if watch and not state.out.as_json:
        state.out.event(
            f"Undo on {endpoint_name}: rollout #{started['id']} brings back {started['candidate_variant']} "
            f"(artifact {started['candidate_artifact']})."
        )
    elif not watch:
        state.out.note(
            f"Undo on {endpoint_name}: rollout #{started['id']} brings back {started['candidate_variant']} "
            f"(artifact {started['candidate_artifact']})."
        )
    follow(state, started, watch=watch, interval=interval, timeout=timeout, through_pause=through_pause)


def _rollout_text(r: dict) -> str:
    traffic = r.get("traffic") or {}
    steps = r.get("steps_bp") or []
    return fields(
        [
            ("rollout", r.get("id")),
            ("endpoint", r.get("endpoint")),
            ("candidate", f"{r.get('candidate_variant')} (artifact {r.get('candidate_artifact')})"),
            ("stable", f"{r.get('baseline_variant')} (artifact {r.get('baseline_artifact')})"),
            ("strategy", f"{r.get('strategy')}, steps {'/'.join(f'{s / 100:g}' for s in steps)}%"),
            (
                "state",
                f"{r.get('state')} {step_text(r.get('step_index'), steps) if r.get('state') == 'canary' else ''}".rstrip(),
            ),
            (
                "traffic",
                f"candidate {traffic.get('candidate_bp', 0) / 100:g}% / stable {traffic.get('stable_bp', 0) / 100:g}%",
            ),
            ("generation", r.get("generation")),
            ("reason", r.get("reason")),
            ("created", f"{when(r.get('created_at'))} by {r.get('created_by')}"),
            ("finished", when(r.get("finished_at"))),
        ]
    )


COMMANDS = [rollout]
