"""One place that points MLflow at the configured tracking store, and the team scope of
what lives there.

A team owns an MLflow experiment through its tag `modelplane.team`; runs logged through
the platform carry the same tag. ONE rule says whose a run is, `run_team`: the run's own
`modelplane.team` tag, else its experiment's. Both the run pages (experiments.selectors.
training: who sees a run) and registration (`source_team`: who may make a version from
it) read it, so a developer who can create a version from a run can see it, and the other
way round. A registered model (`models:/…`) belongs to a team through the same tag on the
registered model, or else through its version's run. Another team's run, an untagged one
and one that does not exist all get one 404, whose message says what to tag
(`NOT_YOURS_HINT`).
"""

import os
import re
from functools import lru_cache

from django.conf import settings

TEAM_TAG = "modelplane.team"

_RUN_URI = re.compile(r"^runs:/(?P<run_id>[^/]+)(/.*)?$")
_MODEL_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[^/]+)|/(?P<ref>[^/]+))(/.*)?$")
_LOGGED_MODEL_URI = re.compile(r"^models:/(?P<model_id>m-[0-9a-f]+)/?$")  # MLflow 3's log_model returns these


@lru_cache(maxsize=1)
def configure() -> str:
    import mlflow

    uri = settings.MLFLOW_TRACKING_URI
    os.environ.setdefault("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    return uri


def client():
    from mlflow.tracking import MlflowClient

    configure()
    return MlflowClient(tracking_uri=settings.MLFLOW_TRACKING_URI, registry_uri=settings.MLFLOW_TRACKING_URI)


class ExperimentOfAnotherTeam(Exception):
    """The experiment name is taken by another team's experiment."""


def experiment_id(name: str, team: str | None = None) -> str:
    """Get or create an experiment whose artifacts live under MLFLOW_ARTIFACT_ROOT
    (a sqlite:// store would otherwise put them in ./mlruns of the current directory).

    With `team`, the experiment carries the team tag: a new one is created with it, an
    untagged one is claimed, and another team's raises ExperimentOfAnotherTeam."""
    tracking = client()
    existing = tracking.get_experiment_by_name(name)
    if existing is not None:
        owner = existing.tags.get(TEAM_TAG)
        if team and owner and owner != team:
            raise ExperimentOfAnotherTeam(f"experiment {name!r} belongs to another team")
        if team and not owner:
            tracking.set_experiment_tag(existing.experiment_id, TEAM_TAG, team)
        return existing.experiment_id
    root = settings.MLFLOW_ARTIFACT_ROOT
    location = root if "://" in root else f"file://{os.path.abspath(root)}"
    tags = {TEAM_TAG: team} if team else None
    return tracking.create_experiment(name, artifact_location=f"{location.rstrip('/')}/{name}", tags=tags)


NOT_YOURS_HINT = (
    f"A run belongs to the team its MLflow tag {TEAM_TAG} names, on the run or else on its experiment: "
    f"tag the run (or its experiment) with {TEAM_TAG}=<team> to see it here and register versions from it."
)


def run_team(run, experiment_tags: dict | None = None, tracking=None) -> str:
    """Whose run this is (the one rule): its own TEAM_TAG, else its experiment's (read
    from `experiment_tags` when the caller has them, else from the store); "" for nobody's."""
    from mlflow.exceptions import MlflowException

    team = run.data.tags.get(TEAM_TAG)
    if team:
        return team
    if experiment_tags is not None:
        return experiment_tags.get(TEAM_TAG) or ""
    try:
        return (tracking or client()).get_experiment(run.info.experiment_id).tags.get(TEAM_TAG) or ""
    except MlflowException:
        return ""


def _run_team(tracking, run_id: str) -> str | None:
    """run_team of the run `run_id`; None when the run does not exist."""
    from mlflow.exceptions import MlflowException

    try:
        run = tracking.get_run(run_id)
    except MlflowException:
        return None
    return run_team(run, tracking=tracking)


def _model_version(tracking, name: str, alias: str | None, ref: str | None):
    if alias:
        return tracking.get_model_version_by_alias(name, alias)
    if ref.isdigit():
        return tracking.get_model_version(name, ref)
    stages = None if ref.lower() == "latest" else [ref]
    versions = tracking.get_latest_versions(name, stages=stages)
    if not versions:
        return None
    return max(versions, key=lambda v: int(v.version))


def source_team(source_uri: str) -> str | None:
    """The team owning a `runs:/…` or `models:/…` URI (a registered model's version or alias,
    or MLflow 3's logged model `models:/m-…`): a team name, "" when the source
    exists but carries no team, None when it does not exist (or the URI is malformed)."""
    from mlflow.exceptions import MlflowException

    tracking = client()
    match = _RUN_URI.match(source_uri)
    if match:
        return _run_team(tracking, match["run_id"])
    match = _LOGGED_MODEL_URI.match(source_uri)
    if match:
        try:
            logged = tracking.get_logged_model(match["model_id"])
        except MlflowException:
            return None
        if logged.source_run_id:
            return _run_team(tracking, logged.source_run_id)
        try:
            return logged.tags.get(TEAM_TAG) or tracking.get_experiment(logged.experiment_id).tags.get(TEAM_TAG) or ""
        except MlflowException:
            return ""
    match = _MODEL_URI.match(source_uri)
    if not match:
        return None
    try:
        registered = tracking.get_registered_model(match["name"])
        version = _model_version(tracking, match["name"], match["alias"], match["ref"])
    except MlflowException:
        return None
    if version is None:
        return None
    owner = registered.tags.get(TEAM_TAG, "")
    run_owner = _run_team(tracking, version.run_id) if version.run_id else None
    if owner and run_owner and run_owner != owner:
        return ""  # a team's registered model pointing at another team's run belongs to neither
    return owner or run_owner or ""
