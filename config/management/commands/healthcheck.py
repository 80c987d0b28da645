"""`manage.py healthcheck NAME ...`: exit 0 when each named component is up the way
/healthz judges it (database, broker, or a heartbeat row such as beat or pools), else
print why and exit 1. Container health checks (docker-compose.yml) run it."""

from django.core.management.base import BaseCommand, CommandError

from config.health import CHECKS, _check_heartbeat


class Command(BaseCommand):
    help = "Exit 0 when the named components (database, broker, worker, beat, pools, supervisor) are up."

    def add_arguments(self, parser):
        parser.add_argument("names", nargs="+")

    def handle(self, *args, names, **options):
        down = []
        for name in names:
            check = CHECKS.get(name) or (lambda name=name: _check_heartbeat(name))
            try:
                check()
            except Exception as exc:  # any failure is a "down", with its reason
                down.append(f"{name}: {type(exc).__name__}: {exc}")
        if down:
            raise CommandError("; ".join(down))
        self.stdout.write("ok")
