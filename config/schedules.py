"""Periodic work scaled to what is being watched: a beat schedule that runs its task at its
full rate while something needs it (an active rollout for the reconcile and the judge, an
active release, a rollout or a running experiment for the collector) and at a slow idle
rate otherwise. Each task is idempotent and decides from the rows what remains, so the idle
rate changes only how soon work is noticed, never what is done; the idle rate still runs it
(a watch function that says "nothing" wrongly costs delay, not correctness).

The watch is a `module:function` path (beat pickles its schedule) to a selector that answers
with one indexed query; it is asked at most once per `ask_every_s` per schedule, and beat
checks every schedule at least that often, so work that appears is picked up within about
`ask_every_s` plus the full rate. Answers are shared by the schedules that watch the same
thing, and beat keeps its connection (reopened once when it fails)."""

from __future__ import annotations

import importlib
import logging
import time
from datetime import timedelta

from celery.schedules import schedule

log = logging.getLogger(__name__)


class watched(schedule):  # noqa: N801 - named like celery's own schedule classes (crontab, solar)
    def __init__(self, every_s: float, idle_s: float, watch: str, ask_every_s: float = 1.0, **kwargs):
        self.every_s, self.idle_s, self.watch, self.ask_every_s = every_s, idle_s, watch, ask_every_s
        super().__init__(run_every=timedelta(seconds=every_s), **kwargs)

    def __reduce__(self):
        return self.__class__, (self.every_s, self.idle_s, self.watch, self.ask_every_s)

    def __repr__(self):
        return f"<watched: every {self.every_s} s while {self.watch}, else {self.idle_s} s>"

    def watching(self) -> bool:
        return _answer(self.watch, self.ask_every_s)

    def is_due(self, last_run_at):
        self.run_every = timedelta(seconds=self.every_s if self.watching() else self.idle_s)
        due, next_check = super().is_due(last_run_at)
        return due, min(next_check, self.ask_every_s)  # look again soon: work may appear meanwhile


_answers: dict[str, tuple[float, bool]] = {}  # watch path -> (when asked, answer): shared by the schedules


def _answer(path: str, max_age_s: float) -> bool:
    now = time.monotonic()
    asked = _answers.get(path)
    if asked is None or now - asked[0] >= max_age_s:
        asked = _answers[path] = (now, _ask(path))
    return asked[1]


def _ask(path: str) -> bool:
    """The watch function's answer; True (full rate) when it cannot be asked."""
    import django
    from django.db import connection

    module, _, name = path.partition(":")
    for attempt in (0, 1):
        try:
            django.setup()  # idempotent; beat may not have set Django up yet
            return bool(getattr(importlib.import_module(module), name)())
        except Exception as exc:  # the connection gone (retried once on a new one), the database away
            if attempt == 0:
                connection.close()
                continue
            log.debug("watch %s failed (%s): full rate", path, exc)
    return True


def collector_watched() -> bool:
    """The collector's watch: a rollout (the judge reads its samples) or a running experiment
    (its guardrails do)."""
    from experiments.selectors.online import experiments_watched

    return _answer("deployments.selectors.rollouts:rollouts_watched", 1.0) or experiments_watched()
