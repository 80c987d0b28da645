"""manage.py train_gr_model: train the reference generative recommender on a synthetic world,
log params, HR@10 (model and oracle) and its bundle to MLflow, and optionally register it
(`--register MODEL_NAME`): its items as a version of the item catalog `--catalog` (reused
when the catalog's latest version holds the same items) and the bundle as a version of the
model (task generative_rec) built against that catalog version."""

import tempfile
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from experiments.management.registration import acting_user, run_team
from kernel.errors import PlatformError


class Command(BaseCommand):
    help = "Train the reference generative recommender, log it to MLflow, optionally register it with its catalog."

    def add_arguments(self, parser):
        parser.add_argument("--tiny", action="store_true", help="The tests' tiny world and model (seconds).")
        parser.add_argument("--items", type=int, default=1000)
        parser.add_argument("--users", type=int, default=None, help="Training users (default 3000; --tiny: 300).")
        parser.add_argument("--epochs", type=int, default=None, help="Default 8; --tiny: 4.")
        parser.add_argument("--codes-per-level", type=int, default=64)
        parser.add_argument("--d-model", type=int, default=64)
        parser.add_argument("--layers", type=int, default=2)
        parser.add_argument("--max-history", type=int, default=50)
        parser.add_argument("--holdout-users", type=int, default=None, help="Default 300; --tiny: 48.")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--threads", type=int, default=1)
        parser.add_argument("--version-tag", default="", help="Tag recorded on the run and the version (e.g. v1).")
        parser.add_argument("--experiment", default="reference-gr")
        parser.add_argument(
            "--register", metavar="MODEL_NAME", default="", help="Register it as a version of MODEL_NAME."
        )
        parser.add_argument("--catalog", default="", help="Item catalog of the items (default: MODEL_NAME-items).")
        parser.add_argument(
            "--team", default="", help="Team of what --register creates (default: the user's first team)."
        )
        parser.add_argument("--user", default="", help="Acting user for --register (default: the first superuser).")

    def handle(self, *args, **opts):
        from experiments.gr import train as recipe
        from experiments.gr.model import GRConfig
        from experiments.gr.world import WorldConfig

        user = acting_user(opts["user"]) if opts["register"] else None
        team = run_team(user=user, model_name=opts["register"], team_name=opts["team"])
        defaults = {"users": 3000, "epochs": 8, "holdout_users": 300}
        if opts["tiny"]:
            preset = recipe.TINY
            world, config = preset["world"], preset["model"]
            defaults = {k: preset[k] for k in defaults}
        else:
            world = WorldConfig(items=opts["items"])
            config = GRConfig(
                codes_per_level=opts["codes_per_level"],
                d_model=opts["d_model"],
                layers=opts["layers"],
                max_history=opts["max_history"],
            )
        sizes = {k: default if opts[k] is None else opts[k] for k, default in defaults.items()}
        try:
            result = recipe.train(world, config, seed=opts["seed"], threads=opts["threads"], **sizes)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        with tempfile.TemporaryDirectory(prefix="gr-bundle-") as tmp:
            bundle = recipe.write_bundle(result, Path(tmp) / "bundle")
            result.metrics.update(recipe.evaluate(result, bundle))
            self.stdout.write(
                f"trained in {result.metrics['train_seconds']:.1f}s: HR@10 {result.metrics['hr_at_10']:.3f} "
                f"(oracle {result.metrics['oracle_hr_at_10']:.3f}), illegal ids {int(result.metrics['illegal_ids'])}"
            )
            from kernel.mlflow import ExperimentOfAnotherTeam

            try:
                run_id = recipe.log_to_mlflow(
                    result,
                    bundle,
                    experiment=opts["experiment"],
                    run_name=opts["version_tag"],
                    team=team.name if team else "",
                )
            except ExperimentOfAnotherTeam as exc:
                raise CommandError(f"--experiment: {exc}; name another experiment.") from None
            self.stdout.write(f"logged to MLflow: run {run_id}" + (f" (team {team.name})" if team else ""))
            if opts["register"]:
                version = self._register(user=user, team=team, result=result, bundle=bundle, run_id=run_id, opts=opts)
                self.stdout.write(
                    self.style.SUCCESS(f"registered {version} (id {version.pk}) on {version.gr.catalog_version}")
                )

    def _register(self, *, user, team, result, bundle, run_id, opts):
        from experiments.gr.train import catalog_arrays
        from registry.models import Task
        from registry.selectors.catalog import model_list
        from registry.services.catalog import model_create
        from registry.services.gr_versions import gr_version_create

        name = opts["register"]
        try:
            model = model_list(user=user).filter(name=name).first() or model_create(
                user=user,
                name=name,
                team=team,
                task=Task.GENERATIVE_REC,
                description="Reference generative recommender (HSTU-style, semantic ids, synthetic world).",
            )
            catalog_version = self._catalog_version(
                user=user,
                team=team,
                name=opts["catalog"] or f"{name}-items",
                arrays=catalog_arrays(result),
                config=result.model.config,
            )
            tags = {"mlflow_run_id": run_id, "params": result.params}
            if opts["version_tag"]:
                tags["version_tag"] = opts["version_tag"]
            return gr_version_create(
                user=user,
                model=model,
                bundle_dir=bundle,
                catalog_version=catalog_version,
                metrics={k: float(v) for k, v in result.metrics.items()},
                tags=tags,
            )
        except PlatformError as exc:
            raise CommandError(exc.detail) from exc

    def _catalog_version(self, *, user, team, name, arrays, config):
        """The catalog's latest version when it holds exactly these items, else a new one."""
        import numpy as np

        from registry import storage
        from registry.gr.catalog_files import read_items
        from registry.selectors.item_catalogs import item_catalog_list
        from registry.services.item_catalogs import item_catalog_create, item_catalog_version_create

        catalog = item_catalog_list(user=user).filter(name=name).first() or item_catalog_create(
            user=user,
            team=team,
            name=name,
            levels=config.levels,
            codes_per_level=config.codes_per_level,
            description="Items of the reference generative recommender's synthetic world.",
        )
        latest = catalog.versions.order_by("-version").first()
        if latest is not None:
            held = read_items(storage.absolute(latest.path))
            if np.array_equal(held.item_ids, arrays["item_id"]) and np.array_equal(
                held.semantic_ids, arrays["semantic_id"]
            ):
                return latest
        return item_catalog_version_create(
            user=user, catalog=catalog, item_id=arrays["item_id"], semantic_id=arrays["semantic_id"]
        )
