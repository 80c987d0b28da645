"""One Celery beat sends the periodic tasks (config/beat.py): the lease in the database
goes to one holder, is renewed by it, and passes to another only once it lapsed."""

from datetime import timedelta

import pytest
from celery.beat import PersistentScheduler
from django.utils import timezone

from config.beat import LeasedScheduler, beat_lease_hold
from config.celery import app

pytestmark = pytest.mark.django_db(transaction=True)


def test_one_holder_at_a_time_until_its_lease_lapses():
    now = timezone.now()
    assert beat_lease_hold(holder="beat-a", ttl_s=15, now=now)
    assert not beat_lease_hold(holder="beat-b", ttl_s=15, now=now + timedelta(seconds=5))
    assert beat_lease_hold(holder="beat-a", ttl_s=15, now=now + timedelta(seconds=10))  # renewed to 25 s
    assert not beat_lease_hold(holder="beat-b", ttl_s=15, now=now + timedelta(seconds=20))
    assert beat_lease_hold(holder="beat-b", ttl_s=15, now=now + timedelta(seconds=26))  # a stopped renewing
    assert not beat_lease_hold(holder="beat-a", ttl_s=15, now=now + timedelta(seconds=27))


def test_a_second_beat_sends_nothing_while_the_first_holds_the_lease(tmp_path, monkeypatch):
    sent = []
    monkeypatch.setattr(PersistentScheduler, "tick", lambda self, *a, **k: sent.append(self.holder) or 1.0)
    first = LeasedScheduler(app=app, schedule_filename=str(tmp_path / "a"), lazy=True)
    second = LeasedScheduler(app=app, schedule_filename=str(tmp_path / "b"), lazy=True)
    for _ in range(3):
        assert first.tick() == 1.0
        assert second.tick() == pytest.approx(first.lease_ttl_s / 3)
    assert sent == [first.holder] * 3
