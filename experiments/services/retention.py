"""How long experiment data is kept (settings; docs/experiments.md).

- feedback that matched no exposure (`unknown`: it moves no experiment, and is what a flood
  leaves behind): FEEDBACK_UNKNOWN_RETENTION_DAYS after it was received (7);
- exposures and feedback of an experiment that ended (shipped, stopped, decided) more than
  EXPERIMENT_DATA_RETENTION_DAYS ago (90): its results stay in its evidence and its MLflow run;
- dead letters after DEAD_LETTER_RETENTION_DAYS (30).
A running experiment's rows are never deleted. Deletes go in bounded chunks, so one run
never holds a long transaction."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from experiments.models import DeadLetter, Experiment, ExperimentState, Exposure, Feedback, FeedbackStatus

CHUNK = 10_000
MAX_CHUNKS = 200


def _delete_chunked(qs) -> int:
    deleted = 0
    for _ in range(MAX_CHUNKS):
        ids = list(qs.values_list("pk", flat=True)[:CHUNK])
        if not ids:
            break
        deleted += qs.model.objects.filter(pk__in=ids).delete()[0]
    return deleted


def retention_run(*, now=None) -> dict:
    now = now or timezone.now()
    unknown = Feedback.objects.filter(
        status=FeedbackStatus.UNKNOWN,
        received_at__lt=now - timedelta(days=settings.FEEDBACK_UNKNOWN_RETENTION_DAYS),
    )
    ended = Experiment.objects.exclude(state__in=[ExperimentState.RUNNING, ExperimentState.DRAFT]).filter(
        ended_at__lt=now - timedelta(days=settings.EXPERIMENT_DATA_RETENTION_DAYS)
    )
    return {
        "unknown_feedback": _delete_chunked(unknown),
        "feedback": _delete_chunked(Feedback.objects.filter(experiment__in=ended)),
        "exposures": _delete_chunked(Exposure.objects.filter(experiment__in=ended)),
        "dead_letters": _delete_chunked(
            DeadLetter.objects.filter(created_at__lt=now - timedelta(days=settings.DEAD_LETTER_RETENTION_DAYS))
        ),
    }
