import os
import socket

from celery import shared_task
from django.utils import timezone

from config.heartbeats import heartbeat_record


@shared_task(name="platform.heartbeat", ignore_result=True, expires=20)
def heartbeat(scheduled_at: str | None = None) -> None:
    """Run by a worker every few seconds on beat's schedule: proves broker, beat and a worker live."""
    now = timezone.now()
    detail = {"host": socket.gethostname(), "pid": os.getpid()}
    heartbeat_record(name="worker", detail=detail, at=now)
    heartbeat_record(name="beat", detail={"via": "platform.heartbeat"}, at=now)


DEMO_QUEUE = "build-cpu"  # it trains a model: build-sized work, never on the control loop's queue
DEMO_MAX_STEPS = 200  # ~10 min of build and load polling, then it gives up and says so


@shared_task(
    name="platform.demo_experiment", bind=True, ignore_result=True, acks_late=True, soft_time_limit=240, time_limit=270
)
def demo_experiment(self, step: int = 1) -> None:
    """`make run`'s demo experiment (config/demo.py), one step per run: re-sent with a
    countdown while its build or model load is under way; a failure is one ERROR line."""
    from celery.exceptions import SoftTimeLimitExceeded

    from config import demo

    try:
        wait_s = demo.demo_experiment_step()
    except (demo.DemoFailed, SoftTimeLimitExceeded) as exc:
        demo.log.error("demo experiment not prepared: %s", exc or "time limit exceeded")
        return
    if wait_s is None:
        return
    if step >= DEMO_MAX_STEPS:
        demo.log.error("demo experiment not prepared: still waiting for its build or model load after %s steps", step)
        return
    self.apply_async(kwargs={"step": step + 1}, countdown=wait_s, queue=DEMO_QUEUE)
