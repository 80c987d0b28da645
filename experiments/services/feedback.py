"""Writes of feedback: who may send it, at what rate, and storing one validated batch.

Who (docs/experiments.md, the same at both doors): a key of the endpoint's team
scoped to it, or a member of its team, public endpoint or not; or, with no credentials,
a batch whose every event cites a signed exposure token of an experiment on this endpoint
that accepts them (`feedback_tokens`). Feedback by unit key or bare request id therefore
always comes from the team. Rate: events per key (or member) per second, counted in Redis
when the exposure stream is configured (shared by every web worker), else per process.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from experiments import feedback as feedback_rules
from experiments.models import Experiment, ExperimentState
from experiments.store import default_store


class FeedbackRefused(Exception):
    def __init__(self, detail: str, status: int, code: str, field: str = "events"):
        super().__init__(detail)
        self.detail, self.status, self.code, self.field = detail, status, code, field


def endpoint_experiments(endpoint) -> list[Experiment]:
    return list(Experiment.objects.filter(endpoint=endpoint).exclude(state=ExperimentState.DRAFT))


def token_keys(experiments) -> dict[str, bytes]:
    """{experiment id: its token key} for the experiments that accept exposure tokens."""
    return {x.public_id: bytes.fromhex(x.token_key) for x in experiments if x.feedback_tokens}


def tokens_resolve(*, endpoint, events: list[dict], keys: dict[str, bytes]) -> list[dict]:
    """Each event citing an exposure token becomes an event by the token's request id, once
    its signature verifies under its experiment's key and it names this endpoint; a token
    that does not is refused with the event's index."""
    out = []
    for i, event in enumerate(events):
        token = event.get(feedback_rules.TOKEN_FIELD)
        if token is None:
            out.append(event)
            continue
        fields = feedback_rules.read_exposure_token(token, keys.get)
        if fields is None or fields[1] != endpoint.name:
            raise FeedbackRefused(
                f"events[{i}].exposure_token: not a token this endpoint's experiment signed (or it does not "
                "accept tokens: send the endpoint's inference key).",
                401,
                "invalid_exposure_token",
                f"events[{i}].exposure_token",
            )
        resolved = {k: v for k, v in event.items() if k != feedback_rules.TOKEN_FIELD}
        resolved["request_id"] = fields[3]
        out.append(resolved)
    return out


def _redis():
    from experiments.services.ingest import stream_client

    return stream_client()


def rate_take(*, who: str, events: int) -> float:
    """Count `events` against `who`'s budget this second; 0.0 when allowed, else the seconds
    to wait. The budget is settings.FEEDBACK_EVENTS_PER_S_PER_KEY events per second."""
    limit = settings.FEEDBACK_EVENTS_PER_S_PER_KEY
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
