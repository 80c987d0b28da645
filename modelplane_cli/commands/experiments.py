"""Online experiments: create (a draft; `--start` starts it too), start, watch, ship, stop,
list, get and results. `modelplane experiments …` is the same group.

`experiment watch` polls the results (one request per poll, every 2 s by default) until the
experiment is decided, shipped or stopped: exit 0 for a ship decision or a shipped winner,
15 when it ends without shipping (stopped, or decided to stop), 11 when a ship's rollout
rolled back (the experiment is decided again)."""

from __future__ import annotations

import click

from modelplane_cli import exits
from modelplane_cli.commands.builds import wait_options
from modelplane_cli.commands.common import ID_OR_MODEL_URI, list_options, show_page
from modelplane_cli.exits import CliError
from modelplane_cli.output import Output, clock, fields, when
from modelplane_cli.state import json_option, pass_state
from modelplane_cli.watch import WATCH_INTERVAL_S, Clock

EXPERIMENT_COLUMNS = [
    ("id", "id"),
    ("name", "name"),
    ("endpoint", "endpoint"),
    ("state", "state"),
    ("decision", "decision"),
    ("winner", "winner"),
    ("units/arm", "planned_units_per_arm"),
    ("started", "started_at"),
]
ENDED = ("shipped", "stopped")


def _pct(value) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{value * 100:+.2f}%"


def results_lines(results: dict) -> list[str]:
    """What the experiment page shows, as lines: state and progress, each arm, each
    candidate's lift with its always-valid band and guardrails, SRM."""
    progress = results.get("progress") or {}
    head = (
        f"experiment {results.get('experiment')} · {results.get('state')}"
        + (f" · decision {results['decision']}" if results.get("decision") else "")
        + (f" · winner {results['winner']}" if results.get("winner") else "")
        + f" · {progress.get('have', 0)}/{progress.get('need', 0)} {progress.get('unit', 'units per arm')}"
    )
    lines = [head]
    ship = results.get("ship") or {}
    if results.get("state") == "shipping" and ship.get("rollout"):
        lines.append(f"  ship: rollout #{ship['rollout']} " + (ship.get("waiting") or "in progress"))
    candidates = results.get("candidates") or {}
    guards = results.get("guardrails") or {}
    for name, arm in (results.get("arms") or {}).items():
        ctr = arm.get("ctr")
        text = f"  {name}: {arm.get('units', 0)} units, {arm.get('clicks', 0)}/{arm.get('exposures', 0)} clicks"
        text += f" (ctr {ctr * 100:.2f}%)" if isinstance(ctr, (int, float)) else ""
        if name in candidates:
            c = candidates[name]
            text += (
                f" · lift {_pct(c.get('lift'))} [{_pct(c.get('lower'))}, {_pct(c.get('upper'))}] {c.get('decision')}"
            )
            guard = guards.get(name) or {}
            text += f" · guardrails {guard.get('status') or c.get('guardrails') or '-'}"
        else:
            text += " · control"
        lines.append(text)
    srm = results.get("srm") or {}
    if srm:
        lines.append(
            f"  srm: e-value {srm.get('e_value', 0):.3g} / {srm.get('threshold', 0):g}"
            + (" FLAGGED" if srm.get("flagged") else "")
        )
    return lines


def _key(results: dict) -> tuple:
    guards = results.get("guardrails") or {}
    return (
        results.get("state"),
        results.get("decision"),
        results.get("winner"),
        tuple(sorted((name, g.get("status")) for name, g in guards.items())),
        (results.get("srm") or {}).get("flagged"),
        bool((results.get("ship") or {}).get("waiting")),  # the ship's rollout starts or stops waiting for traffic
    )


def watch_experiment(
    api, out: Output, experiment_id: str, *, interval: float, timeout: float | None
) -> tuple[dict, int]:
    """Follow an experiment's results until it is decided, shipped or stopped: a line per
    change of state, decision or an arm's guardrails (each with the figures then); on a
    terminal the figures are redrawn in place."""
    pace = Clock(interval=interval, timeout=timeout, what=f"experiment {experiment_id}")
    last, saw_shipping = None, False
    while True:
        results = api.get(f"experiments/{experiment_id}/results/")
        lines = results_lines(results)
        if _key(results) != last:
            last = _key(results)
            guards = results.get("guardrails") or {}
            why = "; ".join(
                f"{n}: {g.get('reason')}" for n, g in guards.items() if g.get("status") == "fail" and g.get("reason")
            )
            ship = results.get("ship") or {}
            if not why and ship.get("waiting"):
                why = f"rollout #{ship.get('rollout')} {ship['waiting']}"
            out.event(f"{clock(_now())}  {lines[0]}" + (f" — {why}" if why else ""))
            if not out.tty:
                for line in lines[1:]:
                    out.event(line)
        state, decision = results.get("state"), results.get("decision")
        saw_shipping = saw_shipping or state == "shipping"
        if state in ENDED or state == "decided":
            experiment = api.get(f"experiments/{experiment_id}/")
            if state == "shipped" or (state == "decided" and decision == "ship" and not saw_shipping):
                return experiment, exits.OK
            if state == "decided" and decision == "ship":
                out.event(
                    f"the ship's rollout #{experiment.get('rollout_id')} did not succeed: decided again (ship may be tried again)"
                )
                return experiment, exits.ROLLED_BACK
            return experiment, exits.EXPERIMENT_STOPPED
        out.panel(lines)
        pace.tick()


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat()


@click.group()
def experiment():
    """Online experiments (A/B tests) on an endpoint: its stable against candidate artifacts."""


@experiment.command("list")
@click.option("--state", "state_filter", help="draft, running, decided, shipping, shipped, stopped")
@list_options
@json_option
@pass_state
def experiment_list(state, state_filter, page, page_size, everything):
    """Experiments of your teams, newest first."""
    body = state.api.page("experiments/", everything=everything, state=state_filter, page=page, page_size=page_size)
    show_page(state, body, EXPERIMENT_COLUMNS, empty="No experiments.")


@experiment.command("get")
@click.argument("experiment_id")
@json_option
@pass_state
def experiment_get(state, experiment_id):
    """One experiment: its plan, arms, state and decision."""
    state.out.result(state.api.get(f"experiments/{experiment_id}/"), _experiment_text)


@experiment.command("results")
@click.argument("experiment_id")
@json_option
@pass_state
def experiment_results(state, experiment_id):
    """The analysis now: per-arm counts, lift with its always-valid band, guardrails, SRM, progress."""
    body = state.api.get(f"experiments/{experiment_id}/results/")
    state.out.result(body, lambda r: "\n".join(results_lines(r)))


@experiment.command("create")
@click.argument("endpoint_name")
@click.argument("name")
@click.option(
    "--candidate",
    "candidates",
    type=ID_OR_MODEL_URI,
    multiple=True,
    required=True,
    help="A candidate arm (repeat): an artifact id or a model URI (models:/ctr@challenger).",
)
@click.option("--allocation", help="Percent per arm, control first, e.g. 50,50 (default: equal).")
@click.option("--hypothesis", default="", help="What you expect, in words.")
@click.option("--baseline-rate", type=float, help="The control's CTR you expect (for the planned sample).")
@click.option("--exposures-per-unit", type=float, help="Exposures per unit over the experiment.")
@click.option("--mde", type=float, help="Smallest relative lift worth detecting (0.05 = 5 %).")
@click.option("--alpha", type=float, help="False-positive rate of the decision.")
@click.option("--power", type=float, help="Power at the MDE.")
@click.option("--attribution-window-s", type=int, help="Feedback counts within this many seconds of its exposure.")
@click.option("--no-guardrail-psi", is_flag=True, help="Show prediction-score PSI per arm, never fail on it.")
@click.option(
    "--feedback-tokens", is_flag=True, help="Accept feedback citing the replies' exposure tokens without a key."
)
@click.option("--start", "start_now", is_flag=True, help="Start it at once (the arms get traffic).")
@json_option
@pass_state
def experiment_create(
    state, endpoint_name, name, candidates, allocation, hypothesis, no_guardrail_psi, feedback_tokens, start_now, **plan
):
    """Draft an experiment on an endpoint (its stable is the control); --start starts it."""
    body = {"endpoint": endpoint_name, "name": name, "candidates": list(candidates), "hypothesis": hypothesis}
    if allocation:
        try:
            body["allocation_bp"] = [round(float(p) * 100) for p in allocation.split(",") if p.strip()]
        except ValueError:
            raise CliError(
                exits.USAGE, f"--allocation: give percentages separated by commas (got {allocation!r})."
            ) from None
    if no_guardrail_psi:
        body["guardrail_psi"] = False
    if feedback_tokens:
        body["feedback_tokens"] = True
    body.update({key: value for key, value in plan.items() if value is not None})
    created = state.api.post("experiments/", body)
    if start_now:
        created = state.api.post(f"experiments/{created['id']}/start/")
    state.out.result(
        created,
        lambda e: f"Experiment {e['id']} ({e['name']}) on {e['endpoint']}: {e['state']}.\n" + _experiment_text(e),
    )


@experiment.command("start")
@click.argument("experiment_id")
@json_option
@pass_state
def experiment_start(state, experiment_id):
    """Start a draft experiment: the gateway splits the endpoint's traffic between its arms."""
    started = state.api.post(f"experiments/{experiment_id}/start/")
    state.out.result(started, lambda e: f"Experiment {e['id']} started: {e['state']}.")


@experiment.command("watch")
@click.argument("experiment_id")
@wait_options(interval=WATCH_INTERVAL_S)
@json_option
@pass_state
def experiment_watch(state, experiment_id, interval, timeout):
    """Follow an experiment until it is decided, shipped or stopped: exit 0 ship decision or
    shipped, 15 stopped or decided to stop, 11 its ship's rollout rolled back, 6 --timeout."""
    _finish(state, *watch_experiment(state.api, state.out, experiment_id, interval=interval, timeout=timeout))


@experiment.command("ship")
@click.argument("experiment_id")
@click.option("--reason", default="", help="Recorded in the audit trail.")
@click.option("--watch", is_flag=True, help="Then follow it until shipped (0) or its rollout rolled back (11).")
@wait_options(interval=WATCH_INTERVAL_S)
@json_option
@pass_state
def experiment_ship(state, experiment_id, reason, watch, interval, timeout):
    """Ship the winner after a ship decision: a one-step rollout to 100 %; shipped once it succeeded."""
    shipped = state.api.post(f"experiments/{experiment_id}/ship/", {"reason": reason} if reason else {})
    if not watch:
        state.out.result(shipped, lambda e: f"Experiment {e['id']}: {e['state']} (rollout #{e.get('rollout_id')}).")
        return
    _finish(state, *watch_experiment(state.api, state.out, experiment_id, interval=interval, timeout=timeout))


@experiment.command("stop")
@click.argument("experiment_id")
@click.option("--reason", default="", help="Recorded in the audit trail.")
@json_option
@pass_state
def experiment_stop(state, experiment_id, reason):
    """Stop an experiment: the control keeps all the traffic."""
    stopped = state.api.post(f"experiments/{experiment_id}/stop/", {"reason": reason} if reason else {})
    state.out.result(stopped, lambda e: f"Experiment {e['id']} stopped: {e['state']}.")


def _finish(state, experiment: dict, code: int) -> None:
    state.out.result(experiment, None)
    if code:
        click.get_current_context().exit(code)


def _experiment_text(e: dict) -> str:
    arms = ", ".join(
        f"{a.get('name')} {a.get('allocation_bp', 0) / 100:g}%{' (control)' if a.get('is_control') else ''}"
        for a in e.get("arms") or []
    )
    return fields(
        [
            ("experiment", f"{e.get('id')} ({e.get('name')})"),
            ("endpoint", e.get("endpoint")),
            ("state", e.get("state")),
            ("arms", arms),
            (
                "plan",
                f"mde {e.get('mde')}, alpha {e.get('alpha')}, power {e.get('power')}, {e.get('planned_units_per_arm')} units per arm",
            ),
            ("decision", e.get("decision")),
            ("winner", e.get("winner")),
            ("rollout", e.get("rollout_id")),
            ("started", when(e.get("started_at"))),
            ("ended", when(e.get("ended_at"))),
        ]
    )


COMMANDS = [experiment]
ALIASES = {"experiments": "experiment"}
