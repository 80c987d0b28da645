"""manage.py train_reference_model: train the reference CTR model on synthetic clicks,
log params, AUC, logloss and the model to MLflow, and optionally register it as a
version (`--register MODEL_NAME`) through registry.services.catalog.version_create_from_mlflow.
"""

from django.core.management.base import BaseCommand, CommandError

from experiments.management.registration import acting_user, run_team
from experiments.reference.model import ReferenceConfig
from experiments.reference.train import log_to_mlflow, train
from kernel.errors import PlatformError


class Command(BaseCommand):
    help = "Train the reference CTR model, log it to MLflow, optionally register it as a model version."

    def add_arguments(self, parser):
        parser.add_argument("--version-tag", default="", help="Tag recorded on the run and the version (e.g. v1).")
        parser.add_argument("--rows", type=int, default=200_000)
        parser.add_argument("--valid-rows", type=int, default=20_000)
        parser.add_argument("--epochs", type=int, default=2)
        parser.add_argument("--vocab", type=int, default=10_000, help="Hash buckets per categorical feature.")
        parser.add_argument("--emb-dim", type=int, default=16)
        parser.add_argument("--interaction", choices=["dcn", "deepfm"], default="dcn")
        parser.add_argument("--cross-layers", type=int, default=2)
        parser.add_argument("--mlp", default="256,128", help="Hidden layer sizes, comma separated.")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--signal-seed", type=int, default=1234, help="The hidden teacher; keep it to compare versions."
        )
        parser.add_argument("--threads", type=int, default=2)
        parser.add_argument("--experiment", default="reference-ctr")
        parser.add_argument(
            "--register", metavar="MODEL_NAME", default="", help="Register the logged model as a version of MODEL_NAME."
        )
        parser.add_argument(
            "--team", default="", help="Team of a model created by --register (default: the user's first team)."
        )
        parser.add_argument("--user", default="", help="Acting user for --register (default: the first superuser).")
        parser.add_argument(
            "--dataset",
            default="",
            help="Train on a dataset built from the platform's traffic (its id, ds-…; manage.py build_dataset) "
            "instead of synthetic clicks; the version records it.",
        )

    def handle(self, *args, **opts):
        try:
            mlp = [int(x) for x in opts["mlp"].split(",") if x.strip()]
        except ValueError:
            raise CommandError("--mlp: give comma-separated integers, e.g. 256,128") from None
        config = ReferenceConfig(
            vocab=opts["vocab"],
            emb_dim=opts["emb_dim"],
            interaction=opts["interaction"],
            cross_layers=opts["cross_layers"],
            mlp=mlp,
        )
        user = acting_user(opts["user"]) if opts["register"] or opts["dataset"] else None
        team = run_team(user=user, model_name=opts["register"], team_name=opts["team"])
        dataset, splits = self._dataset(user, opts["dataset"]) if opts["dataset"] else (None, {})
        result = train(
            config,
            rows=opts["rows"],
            valid_rows=opts["valid_rows"],
            epochs=opts["epochs"],
            seed=opts["seed"],
            signal_seed=opts["signal_seed"],
            threads=opts["threads"],
            **splits,
        )
        self.stdout.write(
            f"trained in {result.metrics['train_seconds']:.1f}s: AUC {result.metrics['auc']:.4f}, logloss {result.metrics['logloss']:.4f}"
        )
        tags = {"version_tag": opts["version_tag"]} if opts["version_tag"] else {}
        if dataset is not None:
            tags["dataset"] = dataset.public_id
        from kernel.mlflow import ExperimentOfAnotherTeam

        try:
            uri = log_to_mlflow(
                result,
                experiment=opts["experiment"],
                run_name=opts["version_tag"],
                tags=tags,
                team=team.name if team else "",
                dataset=dataset,
            )
        except ExperimentOfAnotherTeam as exc:
            raise CommandError(f"--experiment: {exc}; name another experiment.") from None
        self.stdout.write(f"logged to MLflow: {uri}" + (f" (team {team.name})" if team else ""))
        if opts["register"]:
            version = self._register(user=user, name=opts["register"], team=team, uri=uri, result=result, tags=tags)
            self.stdout.write(self.style.SUCCESS(f"registered {version} (id {version.pk})"))

    def _dataset(self, user, public_id: str):
        """(the dataset, its splits as ClickLogs) of one of the user's teams; CommandError otherwise."""
        from experiments.models import Dataset
        from experiments.reference.data import ClickLog
        from experiments.services.datasets import dataset_arrays

        dataset = Dataset.objects.filter(public_id=public_id, team__in=user.groups.all()).first()
        if dataset is None and user.is_superuser:
            dataset = Dataset.objects.filter(public_id=public_id).first()
        if dataset is None:
            raise CommandError(f"--dataset: no dataset {public_id!r} of your teams")
        splits = {}
        for split, key in (("train", "data"), ("valid", "valid")):
            arrays = dataset_arrays(dataset, split)
            if "dense" not in arrays or "sparse" not in arrays:
                raise CommandError(f"--dataset: {public_id} has no dense and sparse inputs (its: {sorted(arrays)})")
            splits[key] = ClickLog(dense=arrays["dense"], sparse=arrays["sparse"], label=arrays["label"])
        return dataset, splits

    def _register(self, *, user, name, team, uri, result, tags):
        from registry.services.catalog import version_register_trained

        try:
            return version_register_trained(
                user=user,
                name=name,
                team=team,
                source_uri=uri,
                metrics={k: float(v) for k, v in result.metrics.items()},
                tags={**tags, "params": result.params},
                validation=result.validation.arrays(),
                description="Reference CTR ranker (synthetic clicks).",
            )
        except PlatformError as exc:
            raise CommandError(exc.detail) from exc
