"""Following long work: a build until it ends (stages as they complete, a progress bar),
a rollout step by step with the judge's verdicts until it ends (like
`kubectl argo rollouts get rollout --watch`). Both poll the REST API; on a terminal the
live part is redrawn in place, elsewhere each event is one line.

A rollout is watched with one request per poll (GET /api/v1/rollouts/{id}/status/, every
2 s by default) sent with If-None-Match: while nothing changed the server answers a
bodiless 304, which its access log leaves out."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import click

from modelplane_cli import exits
from modelplane_cli.client import Api
from modelplane_cli.exits import CliError
from modelplane_cli.output import Output, bar, clock, parse_time

BUILD_DONE = {"succeeded": exits.OK, "failed": exits.BUILD_FAILED, "cancelled": exits.BUILD_FAILED}
ROLLOUT_DONE = {"succeeded": exits.OK, "rolled_back": exits.ROLLED_BACK, "failed": exits.ROLLOUT_FAILED}
WATCH_INTERVAL_S = 2.0  # a rollout's status changes with the judge's ticks (1 s) and steps (30 s and more)
STAGE_DONE = {"succeeded", "failed", "skipped", "cancelled"}
OUTCOME_COLOURS = {"pass": "green", "fail": "red", "inconclusive": "yellow"}


class Clock:
    """Deadline and pacing of a polling loop."""

    def __init__(self, *, interval: float, timeout: float | None, what: str):
        self.interval, self.what = interval, what
        self.started = time.monotonic()
        self.deadline = self.started + timeout if timeout else None
        self.timeout = timeout

    def tick(self) -> None:
        if self.deadline and time.monotonic() >= self.deadline:
            raise CliError(
                exits.TIMEOUT,
                f"gave up waiting for {self.what} after {self.timeout:g}s (it goes on; "
                "run the same wait/watch command again to follow it)",
            )
        time.sleep(self.interval)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


# --- builds --------------------------------------------------------------------------------
def wait_build(
    api: Api, out: Output, build_id: int, *, interval: float = 1.0, timeout: float | None = None
) -> tuple[dict, int]:
    """Poll a build until it ends; one line per stage that ends. Returns (build, exit code)."""
    pace = Clock(interval=interval, timeout=timeout, what=f"build {build_id}")
    printed, last_status = set(), None
    while True:
        build = api.get(f"builds/{build_id}/")
        status, attempt = build.get("status"), build.get("attempt")
        tries = f" (attempt {attempt} of {build.get('max_attempts')})" if attempt and attempt > 1 else ""
        headline = f"build {build_id} of {build.get('model')} v{build.get('version_number')}: {status}{tries}"
        if status != last_status and status not in BUILD_DONE:
            out.event(headline)
        running = ""
        for stage in build.get("stages") or []:
            name, stage_status = stage.get("name"), stage.get("status")
            if stage_status in STAGE_DONE and (attempt, name, stage_status) not in printed:
                printed.add((attempt, name, stage_status))
                took = f" in {stage['duration_s']:.1f}s" if isinstance(stage.get("duration_s"), (int, float)) else ""
                out.event(f"  stage {name} {stage_status}{took}")
            elif stage_status == "running":
                running = name
        if status != last_status and status in BUILD_DONE:  # the ending after the stages it ended with
            out.event(headline)
        last_status = status
        progress = (build.get("progress") or 0) / 100
        out.status(f"build {build_id} {bar(progress)} {running or status} · {pace.elapsed():.0f}s")
        if status in BUILD_DONE:
            out.clear_status()
            return build, BUILD_DONE[status]
        pace.tick()


def build_failure_text(build: dict) -> str:
    """The error and the tail of the stage that failed, for stderr."""
    lines = [f"build {build.get('id')} {build.get('status')}: {build.get('error') or 'no reason recorded'}"]
    failed = [s for s in build.get("stages") or [] if s.get("status") == "failed"]
    if failed and failed[-1].get("log"):
        tail = failed[-1]["log"].rstrip().splitlines()[-15:]
        lines += [f"--- last lines of stage {failed[-1].get('name')} ---", *tail]
    return "\n".join(lines)


# --- rollouts ------------------------------------------------------------------------------
_LABEL = re.compile(r"^(?P<state>[a-z_]+)\[(?P<step>\d+)\]$")


def step_text(step_index, steps_bp: list) -> str:
    if step_index is None or not steps_bp:
        return ""
    index = min(int(step_index), len(steps_bp) - 1)
    return f"step {index + 1}/{len(steps_bp)} ({steps_bp[index] / 100:g}%)"


def state_text(label: str, steps_bp: list) -> str:
    """ "canary[1]" → "canary step 2/4 (25%)" (events count steps from 0, people from 1)."""
    match = _LABEL.match(label or "")
    if match:
        return f"{match['state']} {step_text(int(match['step']), steps_bp)}"
    return label or "-"


def event_line(event: dict, steps_bp: list) -> str:
    when = clock(event.get("time"))
    if event.get("action") == "created":
        by = f" by {event['actor']}" if event.get("actor") else ""
        return f"{when}  created{by}"
    moved = f"{state_text(event.get('from_state'), steps_bp)} → {state_text(event.get('to_state'), steps_bp)}"
    if event.get("action") not in ("status_changed", "transition"):  # "transition": what older servers wrote
        moved = f"{event.get('action')}: {moved}"
    by = f" [{event['actor']}]" if event.get("actor") else ""
    return f"{when}  {moved}{by}  {event.get('reason') or ''}".rstrip()


def verdict_key(verdict: dict) -> tuple:
    return (
        verdict.get("step"),
        verdict.get("outcome"),
        tuple((c.get("name"), c.get("outcome")) for c in verdict.get("checks") or []),
    )


def verdict_line(verdict: dict, steps_bp: list) -> str:
    outcome = verdict.get("outcome") or "?"
    checks = " ".join(f"{c.get('name')}={_short(c.get('outcome'))}" for c in verdict.get("checks") or [])
    step = step_text(verdict.get("step"), steps_bp) or "shadow"
    reason = "" if outcome == "pass" else f"  {verdict.get('reason') or ''}"
    return (
        f"{clock(verdict.get('created_at'))}  judge {click.style(outcome, fg=OUTCOME_COLOURS.get(outcome))}"
        f"  {step}  {checks}{reason}"
    ).rstrip()


def _short(outcome) -> str:
    return {"inconclusive": "wait", "skipped": "skip"}.get(outcome, outcome or "?")


def arms_of(rollout: dict) -> list[dict]:
    """Every arm with its share: the API's `arms` where it has them, else from `traffic`
    (stable, the fair baseline copy, the candidate)."""
    arms = rollout.get("arms")
    if isinstance(arms, list) and arms:
        return [a for a in arms if isinstance(a, dict)]
    traffic = rollout.get("traffic") or {}
    out = [{"role": "stable", "variant": rollout.get("baseline_variant"), "weight_bp": traffic.get("stable_bp", 0)}]
    if traffic.get("baseline_bp"):
        fair = rollout.get("fair_baseline") or {}
        out.append({"role": "baseline", "variant": fair.get("variant"), "weight_bp": traffic["baseline_bp"]})
    role = "shadow" if traffic.get("candidate_role") == "shadow" else "candidate"
    out.append({"role": role, "variant": rollout.get("candidate_variant"), "weight_bp": traffic.get("candidate_bp", 0)})
    return out


def share_text(arm: dict, rollout: dict) -> str:
    if arm.get("role") == "shadow":
        return f"copies of {float(rollout.get('shadow_sample_rate') or 0) * 100:g}%"
    return f"{(arm.get('weight_bp') or 0) / 100:g}%"


def traffic_line(rollout: dict) -> str:
    return "traffic: " + " · ".join(
        f"{a.get('role')} {a.get('variant')} {share_text(a, rollout)}" for a in arms_of(rollout)
    )


def position_text(rollout: dict) -> str:
    state, steps = rollout.get("state"), rollout.get("steps_bp") or []
    if state == "canary":
        return f"canary {step_text(rollout.get('step_index'), steps)}"
    if state == "paused" and rollout.get("paused_from") == "canary":
        return f"paused at {step_text(rollout.get('step_index'), steps)}"
    return state or "-"


def guardrail_text(verdict: dict | None, steps: list) -> str:
    if not verdict:
        return "guardrails: no verdict yet"
    outcome = verdict.get("outcome") or "?"
    checks = " ".join(f"{c.get('name')}={_short(c.get('outcome'))}" for c in verdict.get("checks") or [])
    step = step_text(verdict.get("step"), steps) or "shadow"
    return (
        f"guardrails: judge {click.style(outcome, fg=OUTCOME_COLOURS.get(outcome))} at {clock(verdict.get('created_at'))}"
        f" ({step})  {checks}"
    ).rstrip()


def panel_lines(status: dict, last_event: dict | None) -> list[str]:
    """The live view on a terminal: what the endpoint page shows of a rollout."""
    rollout = status.get("rollout") or {}
    steps = rollout.get("steps_bp") or []
    head = [f"rollout #{rollout.get('id')} {rollout.get('endpoint')} · {position_text(rollout)}"]
    started = parse_time(rollout.get("step_started_at"))
    if started and rollout.get("state") in ("canary", "shadow"):
        in_step = max(0.0, (datetime.now(UTC) - started).total_seconds())
        head.append(f"step timer {in_step:.0f}s/{rollout.get('step_min_seconds', 0):g}s")
    head.append(f"gen {rollout.get('generation')}")
    lines = [" · ".join(head)]
    arms = arms_of(rollout)
    width = max(len(str(a.get("variant"))) for a in arms)
    for arm in arms:
        lines.append(f"  {str(arm.get('role')):<9} {str(arm.get('variant')):<{width}}  {share_text(arm, rollout)}")
    verdicts = status.get("verdicts") or []
    lines.append(guardrail_text(verdicts[-1] if verdicts else None, steps))
    if last_event:
        lines.append("last decision: " + event_line(last_event, steps))
    return lines


def end_code(status: dict) -> int:
    rollout = status.get("rollout") or {}
    if rollout.get("state") == "rolled_back" and (status.get("rolled_back_by") or {}).get("kind") == "person":
        return exits.ABORTED
    return ROLLOUT_DONE[rollout.get("state")]


def watch_rollout(
    api: Api,
    out: Output,
    rollout_id: int,
    *,
    interval: float = WATCH_INTERVAL_S,
    timeout: float | None = None,
    through_pause: bool = False,
) -> tuple[dict, int]:
    """Follow a rollout: each transition and each change of the judge's verdict (outcome or
    a check's outcome) is one line, and so is each change of the traffic split when the
    output is not a terminal (a terminal has the live panel); returns (rollout, exit code)
    once it ends or pauses. Exit 11 when the judge rolled it back, 14 when a person did."""
    pace = Clock(interval=interval, timeout=timeout, what=f"rollout {rollout_id}")
    seen_events: set = set()
    last_verdict_id, last_key, headed, last_traffic, last_event = 0, None, False, None, None
    status, etag = None, None
    while True:
        fresh, etag = api.poll(f"rollouts/{rollout_id}/status/", etag)
        if fresh is not None or status is None:
            status = fresh
            rollout = status.get("rollout") or {}
            steps = rollout.get("steps_bp") or []
            if not headed:
                out.event(
                    f"rollout #{rollout_id} on {rollout.get('endpoint')}: candidate {rollout.get('candidate_variant')} "
                    f"(artifact {rollout.get('candidate_artifact')}) vs stable {rollout.get('baseline_variant')}, "
                    f"{rollout.get('strategy')} steps {'/'.join(f'{s / 100:g}' for s in steps)}%"
                )
                headed = True
            lines = []
            for event in status.get("events") or []:
                if event.get("id") not in seen_events:
                    seen_events.add(event.get("id"))
                    last_event = event
                    lines.append((event.get("time") or "", 0, event.get("id"), event_line(event, steps)))
            for verdict in status.get("verdicts") or []:
                if (verdict.get("id") or 0) <= last_verdict_id:
                    continue
                last_verdict_id = verdict["id"]
                if verdict_key(verdict) != last_key:  # one line per change, not one per second
                    last_key = verdict_key(verdict)
                    lines.append((verdict.get("created_at") or "", 1, verdict["id"], verdict_line(verdict, steps)))
            for *_, line in sorted(
                lines, key=lambda item: (parse_time(item[0]) or datetime.min.replace(tzinfo=UTC), item[1], item[2])
            ):
                out.event(line)
            traffic = traffic_line(rollout)
            if not out.tty and traffic != last_traffic and rollout.get("state") not in ROLLOUT_DONE:
                out.event(f"{clock(datetime.now(UTC).isoformat())}  {traffic}")
            last_traffic = traffic
        rollout = status.get("rollout") or {}
        state = rollout.get("state")
        if state in ROLLOUT_DONE:
            code = end_code(status)
            by = status.get("rolled_back_by") or {}
            who = f" by {by.get('actor')}" if code == exits.ABORTED and by.get("actor") else ""
            out.event(f"rollout #{rollout_id} {state}{who}: {rollout.get('reason') or ''}".rstrip())
            return rollout, code
        if state == "paused" and not through_pause:
            out.event(
                f"rollout #{rollout_id} paused: {rollout.get('reason') or ''} — it waits for a person: "
                f"modelplane rollout resume {rollout_id} --generation {rollout.get('generation')}"
            )
            return rollout, exits.PAUSED
        out.panel(panel_lines(status, last_event))
        pace.tick()
