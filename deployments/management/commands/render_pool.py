"""Print the Kubernetes objects of a serving pool as YAML (what the driver applies)."""

from django.core.management.base import BaseCommand, CommandError

from deployments.drivers.base import PoolSpec
from deployments.drivers.kubernetes import render_yaml
from deployments.models import PoolDriver, ServingPool


class Command(BaseCommand):
    help = "Print the Deployment, Service, HorizontalPodAutoscaler, PodDisruptionBudget and NetworkPolicy of a Kubernetes pool."

    def add_arguments(self, parser):
        parser.add_argument("name", help="the pool's name")

    def handle(self, *args, name, **options):
        pool = ServingPool.objects.select_related("team").filter(name=name).first()
        if pool is None:
            raise CommandError(f"No serving pool named {name!r}.")
        if pool.driver != PoolDriver.KUBERNETES:
            raise CommandError(f"Pool {name!r} uses the {pool.driver} driver; only kubernetes pools have manifests.")
        self.stdout.write(render_yaml(PoolSpec.from_pool(pool)), ending="")
