"""Following long work: a build until it ends (stages as they complete, a progress bar),
a rollout step by step with the judge's verdicts until it ends (like
`kubectl argo rollouts get rollout --watch`). Both poll the REST API; on a terminal the
last line is redrawn in place, elsewhere each event is one line."""

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
    if event.get("action") not in ("status_changed", "transition"):  # "transition": servers before issue 23
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


def status_line(rollout: dict, last_verdict: dict | None) -> str:
    """The live line on a terminal, most telling first (it is cut at the terminal's width)."""
    steps = rollout.get("steps_bp") or []
    state = rollout.get("state")
    index = rollout.get("step_index")
    parts = [
        f"rollout #{rollout.get('id')} {state}"
        + (f" step {index + 1}/{len(steps)}" if state == "canary" and steps else "")
    ]
    parts.append(f"candidate {(rollout.get('traffic') or {}).get('candidate_bp', 0) / 100:g}%")
    started = parse_time(rollout.get("step_started_at"))
    if started and state in ("canary", "shadow"):
        in_step = max(0.0, (datetime.now(UTC) - started).total_seconds())
        parts.append(f"step timer {in_step:.0f}s/{rollout.get('step_min_seconds', 0):g}s")
    if last_verdict:
        parts.append(f"judge {last_verdict.get('outcome')}")
    parts.append(f"gen {rollout.get('generation')}")
    return " · ".join(parts)


def watch_rollout(
    api: Api,
    out: Output,
    rollout_id: int,
    *,
    interval: float = 1.0,
    timeout: float | None = None,
    through_pause: bool = False,
) -> tuple[dict, int]:
    """Follow a rollout: each transition and each change of the judge's verdict (outcome or
    a check's outcome) is one line; returns (rollout, exit code) once it ends or pauses."""
    pace = Clock(interval=interval, timeout=timeout, what=f"rollout {rollout_id}")
    seen_events: set = set()
    last_verdict_id, last_key, last_verdict, headed = 0, None, None, False
    while True:
        rollout = api.get(f"rollouts/{rollout_id}/")  # first, so the events read next include its state
        steps = rollout.get("steps_bp") or []
        if not headed:
            out.event(
                f"rollout #{rollout_id} on {rollout.get('endpoint')}: candidate {rollout.get('candidate_variant')} "
                f"(artifact {rollout.get('candidate_artifact')}) vs stable {rollout.get('baseline_variant')}, "
                f"{rollout.get('strategy')} steps {'/'.join(f'{s / 100:g}' for s in steps)}%"
            )
            headed = True
        events = api.get(
            "events/", object_type="deployments.rollout", object_id=rollout_id, ordering="-time", page_size=100
        )
        verdicts = api.get("verdicts/", rollout=rollout_id, page_size=50)
        lines = []
        for event in (events or {}).get("results", []):
            if event.get("id") not in seen_events:
                seen_events.add(event.get("id"))
                lines.append((event.get("time") or "", 0, event.get("id"), event_line(event, steps)))
        for verdict in sorted((verdicts or {}).get("results", []), key=lambda v: v.get("id") or 0):
            if (verdict.get("id") or 0) <= last_verdict_id:
                continue
            last_verdict_id, last_verdict = verdict["id"], verdict
            if verdict_key(verdict) != last_key:  # one line per change, not one per second
                last_key = verdict_key(verdict)
                lines.append((verdict.get("created_at") or "", 1, verdict["id"], verdict_line(verdict, steps)))
        for *_, line in sorted(
            lines, key=lambda item: (parse_time(item[0]) or datetime.min.replace(tzinfo=UTC), item[1], item[2])
        ):
            out.event(line)
        state = rollout.get("state")
        if state in ROLLOUT_DONE:
            out.event(f"rollout #{rollout_id} {state}: {rollout.get('reason') or ''}".rstrip())
            return rollout, ROLLOUT_DONE[state]
        if state == "paused" and not through_pause:
            out.event(
                f"rollout #{rollout_id} paused: {rollout.get('reason') or ''} — it waits for a person: "
                f"modelplane rollout resume {rollout_id} --generation {rollout.get('generation')}"
            )
            return rollout, exits.PAUSED
        out.status(status_line(rollout, last_verdict))
        pace.tick()
