"""Row locks for concurrent writes (select_for_update), one helper per object kind."""

from monitoring.models import Alert, ScrapeState


def alert_for_update(alert_id: int) -> Alert:
    return Alert.objects.select_for_update().get(pk=alert_id)


def alert_by_key_for_update(dedupe_key: str) -> Alert | None:
    return Alert.objects.select_for_update().filter(dedupe_key=dedupe_key).first()


def scrape_states_for_update(keys: list[str]) -> dict[str, ScrapeState]:
    """The scrape states of `keys` that no concurrent collector tick holds (skip_locked)."""
    rows = ScrapeState.objects.select_for_update(skip_locked=True).filter(target__in=keys)
    return {row.target: row for row in rows}


def group_carrier_for_update(alert: Alert) -> Alert | None:
    """The latest alert of `alert`'s group (team, endpoint, kind) that carries its own
    notification, locked: the one a new alert of the group may join."""
    return (
        Alert.objects.select_for_update()
        .filter(
            team_id=alert.team_id,
            endpoint=alert.endpoint,
            kind=alert.kind,
            notified_with__isnull=True,
            notified_at__isnull=False,
        )
        .exclude(pk=alert.pk)
        .order_by("-notified_at", "-id")
        .first()
    )
