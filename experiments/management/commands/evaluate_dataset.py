"""manage.py evaluate_dataset DATASET_ID: offline AUC of model versions on a dataset's validation
split (its later window), each scored as served (its ONNX artifact). By default the versions the
dataset's experiment served and the ones trained on it, side by side (experiments/services/dataset_eval.py).
"""

import json
import math

from django.core.management.base import BaseCommand, CommandError

from experiments.management.registration import acting_user
from kernel.errors import PlatformError


class Command(BaseCommand):
    help = "Offline AUC of model versions on a dataset's validation split (a later window of real traffic)."

    def add_arguments(self, parser):
        parser.add_argument("dataset", help="The dataset's id (ds-…).")
        parser.add_argument(
            "--model-version", dest="versions", type=int, action="append", default=[], help="A version id (repeat)."
        )
        parser.add_argument("--user", default="", help="Acting user (default: the first superuser).")
        parser.add_argument("--json", action="store_true", help="The rows as JSON.")

    def handle(self, *args, **opts):
        from experiments.selectors.datasets import dataset_get
        from experiments.services.dataset_eval import dataset_evaluate, default_versions
        from registry.selectors.catalog import version_list

        user = acting_user(opts["user"])
        try:
            dataset = dataset_get(user=user, dataset_id=opts["dataset"])
            if opts["versions"]:
                versions = list(version_list(user=user).filter(pk__in=opts["versions"]))
                missing = set(opts["versions"]) - {v.pk for v in versions}
                if missing:
                    raise CommandError(f"--model-version: no version {sorted(missing)} of your teams")
            else:
                versions = default_versions(user=user, dataset=dataset)
            if not versions:
                raise CommandError("no version to evaluate: give --model-version ID")
            rows = dataset_evaluate(dataset=dataset, versions=versions)
        except PlatformError as exc:
            raise CommandError(exc.detail) from None
        if opts["json"]:
            self.stdout.write(json.dumps(rows))
            return
        stats = dataset.statistics
        self.stdout.write(
            f"{dataset.public_id} ({dataset.name} v{dataset.version}) validation split: {stats.get('valid_rows')} rows "
            f"from {dataset.split_at:%Y-%m-%d %H:%M} to {dataset.window_end:%Y-%m-%d %H:%M}"
        )
        for row in rows:
            figure = "n/a (one class only)" if math.isnan(row["auc"]) else f"{row['auc']:.4f}"
            self.stdout.write(
                f"  {row['model']} v{row['number']}{' (' + row['tag'] + ')' if row['tag'] else ''}: AUC {figure}, "
                f"logloss {row['logloss']:.4f} ({row['artifact']})"
                + ("  <- trained on this dataset" if row["trained_on_it"] else "")
            )
