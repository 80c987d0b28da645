"""manage.py build_dataset: build the next version of a dataset from an endpoint's captured
requests joined with their clicks (the same service as POST /api/v1/datasets/: with the
embedded store, the experiment-data process builds it). Prints the dataset's id (ds-…), which
`train_reference_model --dataset` takes.
"""

from datetime import UTC, datetime, timedelta

from django.core.management.base import BaseCommand, CommandError

from experiments.management.registration import acting_user
from kernel.errors import PlatformError


def _when(text: str, option: str) -> datetime:
    """An ISO time, or `-40s` / `-90m` / `-3h` / `-2d` before now."""
    text = text.strip()
    units = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
    if text.startswith("-") and text[-1:] in units and text[1:-1].isdigit():
        return datetime.now(UTC) - timedelta(**{units[text[-1]]: int(text[1:-1])})
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"{option}: give an ISO time or -40s / -90m / -3h / -2d (got {text!r})") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Build a dataset version from an endpoint's captured requests and their clicks."

    def add_arguments(self, parser):
        parser.add_argument("endpoint", help="The endpoint whose captured requests make the rows.")
        parser.add_argument("name", help="The dataset (each build is its next version).")
        parser.add_argument("--start", required=True, help="From (ISO time, or -3h: three hours ago).")
        parser.add_argument("--end", required=True, help="To; its attribution window must have closed.")
        parser.add_argument("--experiment", default=None, help="Only this experiment's requests (exp-12).")
        parser.add_argument("--user", default="", help="Acting user (default: the first superuser).")

    def handle(self, *args, **opts):
        from deployments.selectors.rollouts import endpoint_get
        from experiments.selectors.online import online_experiment_get
        from experiments.services.dataset_requests import dataset_request

        user = acting_user(opts["user"])
        try:
            endpoint = endpoint_get(user=user, name=opts["endpoint"])
            experiment = (
                online_experiment_get(user=user, experiment_id=opts["experiment"]) if opts["experiment"] else None
            )
            dataset = dataset_request(
                user=user,
                endpoint=endpoint,
                experiment=experiment,
                start=_when(opts["start"], "--start"),
                end=_when(opts["end"], "--end"),
                name=opts["name"],
            )
        except PlatformError as exc:
            raise CommandError(exc.detail) from None
        stats = dataset.statistics
        self.stdout.write(
            f"{dataset.public_id}: {dataset.name} v{dataset.version}, {stats['rows']} rows "
            f"({stats['train_rows']} train, {stats['valid_rows']} valid), label rate {stats['label_rate']:.4f}"
        )
