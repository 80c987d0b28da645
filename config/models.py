from django.db import models


class ComponentHeartbeat(models.Model):
    """Last sign of life of a background component (worker, beat, pool supervisor).

    /healthz reads these for the components `make run` started: a row older than
    HEALTHZ_MAX_AGE_S means that component is down.
    """

    name = models.CharField(max_length=64, unique=True)
    seen_at = models.DateTimeField()
    detail = models.JSONField(default=dict, blank=True)

    def __str__(self):
        return f"{self.name} @ {self.seen_at:%H:%M:%S}"


class SchedulerLease(models.Model):
    """Who may send the periodic tasks now (config/beat.py): one beat holds the lease and
    renews it every tick; another beat sends nothing until it lapses."""

    name = models.CharField(max_length=64, unique=True)
    holder = models.CharField(max_length=200)
    expires_at = models.DateTimeField()

    def __str__(self):
        return f"{self.name}: {self.holder} until {self.expires_at:%H:%M:%S}"
