"""Writes of feedback: who may send it, at what rate, and storing one validated batch.

Who (docs/experiments.md, the same at both doors): a key of the endpoint's team scoped to
it, or a member of its team, public endpoint or not; or, with no credentials, a batch whose
every event cites a signed, unexpired exposure token of the endpoint's running experiment
that accepts them (`feedback_tokens`), all of one unit. Feedback by unit key or bare request
id therefore always comes from the team. What one token carries is bounded (one click, a
few conversions, a bounded value: feedback_rules.per_exposure), at the door and in the store. Rate: events per key (or member) per second, counted in Redis
when the exposure stream is configured (shared by every web worker), else per process.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from experiments import feedback as feedback_rules
from experiments.models import Experiment, ExperimentState, Feedback, FeedbackStatus
from experiments.services.streams import stream_client
from experiments.store import default_store, store_readable_here
from kernel.errors import InvalidInput, PlatformError


class FeedbackLogDown(PlatformError):
    status = 503
    code = "feedback_log_unavailable"


class FeedbackRefused(Exception):
    def __init__(self, detail: str, status: int, code: str, field: str = "events"):
        super().__init__(detail)
        self.detail, self.status, self.code, self.field = detail, status, code, field


class FeedbackThrottled(Exception):
    def __init__(self, detail: str, wait: float):
        super().__init__(detail)
        self.detail, self.wait = detail, wait


NEEDS_A_KEY = "needs_a_key"  # FeedbackRefused's code when the batch may not go without a key or team member


def feedback_admit(*, endpoint, data: dict, caller: str | None, now_ms: int) -> dict:
    """The admission rule of the API's feedback door (POST /api/v1/feedback/) and what an
    admitted batch becomes: parsed by the rules both doors share, its exposure tokens
    resolved (`caller` None: no key of the team and no member, so every event must cite a
    token of an experiment that accepts them), within the caller's rate, within what each
    cited exposure carries, then published on the durable log ({received, queued}) or stored
    at once (the counts).

    Refusals: FeedbackRefused with code NEEDS_A_KEY (the view answers as for no credentials)
    or the rule's code and status (invalid_exposure_token: a cited token does not verify);
    InvalidInput (a batch a caller with credentials got wrong); FeedbackThrottled (over the
    rate: the seconds to wait); PlatformError 409 (more than an exposure carries)."""
    try:
        _, events = feedback_rules.parse_batch(data)
    except feedback_rules.FeedbackError as exc:
        if caller is None:
            raise FeedbackRefused(exc.detail, 401, NEEDS_A_KEY, exc.field) from None
        raise InvalidInput(exc.detail, field=exc.field) from None
    experiments = endpoint_experiments(endpoint)
    try:
        events = tokens_resolve(
            endpoint=endpoint,
            events=events,
            experiments=experiments,
            keyed=caller is not None,
            now_ms=now_ms,
            door=True,
        )
    except FeedbackRefused as exc:
        if caller is None and exc.code == "missing_key":
            raise FeedbackRefused(exc.detail, 401, NEEDS_A_KEY, exc.field) from None
        raise
    who = caller or f"tokens:{endpoint.pk}"
    limit = settings.FEEDBACK_EVENTS_PER_S_PER_KEY if caller else settings.FEEDBACK_TOKEN_EVENTS_PER_S_PER_ENDPOINT
    wait = rate_take(who=who, events=len(events), limit=limit)
    if wait:
        raise FeedbackThrottled(f"over the feedback rate of {limit} events/s" + (" per key" if caller else ""), wait)
    spent = tokens_carried(events=events)
    if spent is not None:
        raise PlatformError(spent, field="events", code="exposure_allowance_exceeded", status=409)
    queued = feedback_publish(endpoint=endpoint, events=data["events"], source=caller)
    if queued is not None:  # on the durable log, as the gateway's door queues it: stored by its reader
        return {"received": len(events), "queued": queued}
    return feedback_ingest(endpoint=endpoint, events=events, experiments=experiments)


def endpoint_experiments(endpoint) -> list[Experiment]:
    return list(Experiment.objects.filter(endpoint=endpoint).exclude(state=ExperimentState.DRAFT))


def token_keys(experiments, *, running_only: bool = True) -> dict[str, bytes]:
    """{experiment id: its token key} for the experiments that accept exposure tokens: the
    running ones (a door takes no token of an ended experiment), or every one for the ingest,
    which verifies what a door let through and refuses an ended experiment's events itself."""
    return {
        x.public_id: bytes.fromhex(x.token_key)
        for x in experiments
        if x.feedback_tokens and (x.state == ExperimentState.RUNNING or not running_only)
    }


def tokens_resolve(*, endpoint, events: list[dict], experiments, keyed: bool, now_ms: int, door: bool) -> list[dict]:
    """The batch's exposure-token rules (feedback_rules.check_tokens, the gateway's own) and
    each event citing a token turned into an event by the token's request id, matched only
    in the token's experiment (`token_experiment`). At a door (`door`) only a running
    experiment's tokens count and any refusal is raised; at the ingest a token of an
    experiment that ended meanwhile makes its event `refused` (counted, not attributed)."""
    by_id = {x.public_id: x for x in experiments}
    keys = token_keys(experiments, running_only=door)
    verdict = feedback_rules.check_tokens(events, keys.get, endpoint=endpoint.name, keyed=keyed, now_ms=now_ms)
    if verdict.refusal is not None:
        refusal = verdict.refusal
        field = verdict.detail.split(":", 1)[0]
        raise FeedbackRefused(verdict.detail, refusal.status, refusal.code, field)
    out = []
    for event, token in zip(events, verdict.tokens):
        if token is None:
            out.append(event)
            continue
        resolved = {k: v for k, v in event.items() if k != feedback_rules.TOKEN_FIELD}
        experiment = by_id[token.experiment]
        resolved.update(request_id=token.request_id, token_experiment=experiment.pk)
        if experiment.state != ExperimentState.RUNNING:
            resolved["refused"] = True
        out.append(resolved)
    return out


def tokens_carried(*, events: list[dict]) -> str | None:
    """Why the batch asks an exposure for more than it still carries (what earlier feedback
    took from it, in the store), as the door's 409 says it; None when it fits."""
    asked: dict[tuple, feedback_rules.TokenUse] = {}
    first: dict[tuple, int] = {}
    for i, event in enumerate(events):
        if event.get("token_experiment"):
            exposure = (event["token_experiment"], event["request_id"])
            asked.setdefault(exposure, feedback_rules.TokenUse()).add(event["type"], event.get("value"))
            first.setdefault(exposure, i)
    if not asked:
        return None
    carried = {exposure: feedback_rules.TokenUse() for exposure in asked}
    rows = Feedback.objects.filter(
        via_token=True,
        experiment_id__in={x for x, _ in asked},
        request_id__in={r for _, r in asked},
        status__in=[FeedbackStatus.ATTRIBUTED, FeedbackStatus.LATE],
    ).values_list("experiment_id", "request_id", "kind", "value")
    for experiment_id, rid, kind, value in rows:
        if (experiment_id, rid) in carried:
            carried[(experiment_id, rid)].add(kind, value)
    for exposure, use in asked.items():
        why = carried[exposure].plus(use).beyond()
        if why is not None:
            return (
                f"events[{first[exposure]}].{feedback_rules.TOKEN_FIELD}: this exposure already carried part of what one "
                f"exposure allows, and with this batch it would carry {why}; the replay is refused"
            )
    return None


def _redis():
    return stream_client()


def rate_take(*, who: str, events: int, limit: int) -> float:
    """Count `events` against `who`'s budget of `limit` events this second; 0.0 when
    allowed, else the seconds to wait."""
    now = time.time()
    window = f"feedback-rate:{who}:{int(now)}"
    client = _redis()
    if client is not None:
        pipe = client.pipeline()
        pipe.incrby(window, events)
        pipe.expire(window, 2)
        used = pipe.execute()[0]
    else:
        cache.add(window, 0, 2)
        used = cache.incr(window, events)
    return 0.0 if used <= limit else max(0.05, 1.0 - (now % 1.0))


def feedback_ingest(*, endpoint, events: list[dict], experiments=None, store=None) -> dict:
    """Store one validated, authorised batch for `endpoint`: attributed to the endpoint's
    experiments, duplicates of the team's own event ids counted once."""
    store = store or default_store()
    if experiments is None:
        experiments = endpoint_experiments(endpoint)
    with transaction.atomic():
        result = store.write_feedback(
            team=endpoint.team, endpoint_name=endpoint.name, experiments=experiments, events=events
        )
    return result.as_dict()


def feedback_publish(*, endpoint, events: list[dict], source: str | None) -> int | None:
    """Publish an admitted batch (the events as the client sent them) on the durable log, on the
    endpoint's team's subject of `source` (None: exposure tokens only), as the gateway's door
    does; the messages published, or None without a log (then the caller stores it at once, where
    this process may write the store; 503 where the embedded store is another process's)."""
    from deployments.selectors.gateway_routes import team_label
    from experiments.eventlog.writer import log_writer

    writer = log_writer()
    if writer is None:
        if not store_readable_here():  # the embedded store is another process's: only the log reaches it
            raise FeedbackLogDown(
                "feedback at the API needs the durable log (EVENT_LOG_URL) while the embedded store is owned by the "
                "experiment-data process; send it to the gateway's door (POST /v2/feedback) meanwhile"
            )
        return None
    try:
        return writer.publish_feedback(
            team=team_label(endpoint.team), endpoint=endpoint.name, source=source, events=events
        )
    except Exception as exc:  # noqa: BLE001 - the log refused or is gone: the client retries (event ids dedupe)
        raise FeedbackLogDown(f"the feedback log did not take the batch ({type(exc).__name__}); send it again") from exc
