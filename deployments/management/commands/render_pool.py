"""Print the Kubernetes objects of a serving pool as YAML (what the driver applies, with
the pool's admin key left out). A pool the operator's policy refuses (namespace, image,
repository secret: deployments/pool_policy.py) prints nothing and fails naming the rule."""

from django.core.management.base import BaseCommand, CommandError

from deployments.drivers import spec_for
from deployments.drivers.kubernetes import SpecRefused, render_yaml
from deployments.models import PoolDriver, ServingPool


class Command(BaseCommand):
    help = (
        "Print the Deployment, Service, HorizontalPodAutoscaler, PodDisruptionBudget, NetworkPolicy and admin-key "
        "Secret of a Kubernetes pool (the key itself is not shown)."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="the pool's name")

    def handle(self, *args, name, **options):
        pool = ServingPool.objects.select_related("team").filter(name=name).first()
        if pool is None:
            raise CommandError(f"No serving pool named {name!r}.")
        if pool.driver != PoolDriver.KUBERNETES:
            raise CommandError(f"Pool {name!r} uses the {pool.driver} driver; only kubernetes pools have manifests.")
        try:
            text = render_yaml(spec_for(pool))
        except SpecRefused as exc:
            raise CommandError(f"{exc} [{exc.code}]") from None
        self.stdout.write(text, ending="")
